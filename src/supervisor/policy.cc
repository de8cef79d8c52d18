#include "supervisor/policy.h"

#include <algorithm>

namespace fr::supervisor {

void RestartPolicy::on_ready(double now) { m_ready_at = now; }

Verdict RestartPolicy::on_exit(double now, bool failure, bool warm) {
  // A run that stayed up long enough wipes the slate: backoff and escalation start over.
  if (m_ready_at >= 0 && now - m_ready_at >= m_c.reset_after_s) {
    m_next = 0;
    m_warm_failures = 0;
    m_failures.clear();
  }
  const bool was_ready = m_ready_at >= 0;
  m_ready_at = -1;
  if (!failure) {
    m_backoff = 0;  // requested restarts (reload, restart) go at once
    return Verdict::kRestart;
  }
  m_failures.push_back(now);
  while (!m_failures.empty() && now - m_failures.front() > m_c.crash_loop_window_s) m_failures.pop_front();
  if (static_cast<int>(m_failures.size()) >= m_c.crash_loop_limit) return Verdict::kGiveUp;

  m_backoff = m_next == 0 ? m_c.backoff_initial_s : std::min(m_next, m_c.backoff_max_s);
  m_next = std::min(std::max(m_backoff, m_c.backoff_initial_s) * m_c.backoff_multiplier, m_c.backoff_max_s);
  // Escalate when warm starts keep failing before they ever become ready: the cache may be the problem.
  m_warm_failures = warm && !was_ready ? m_warm_failures + 1 : 0;
  if (m_c.warm_failures_before_cold > 0 && m_warm_failures >= m_c.warm_failures_before_cold) {
    m_warm_failures = 0;
    return Verdict::kColdRestart;
  }
  return Verdict::kRestart;
}

std::string RestartPolicy::give_up_reason(const std::string& cause, const std::string& detail) const {
  return std::to_string(failures_in_window()) + " failures within " + std::to_string(static_cast<int>(m_c.crash_loop_window_s)) +
         " s; last: " + cause + " (" + detail + ")";
}

}  // namespace fr::supervisor

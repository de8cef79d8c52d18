#include "supervisor/start/attempts.h"

#include <spdlog/spdlog.h>

namespace fr::supervisor {

void StartAttempts::record(StartPath p, const std::string& outcome, const StartRefusal& why) {
  m_attempts.push_back({p, outcome, why});
  m_stats.start_attempt(start_path_name(p), outcome, why.code);
  if (outcome == "skipped" || outcome == "failed")
    spdlog::info("start path {} {}: {}", start_path_name(p), outcome, why.detail);
}

bool StartAttempts::waiting(const char* code) const {
  return !m_attempts.empty() && m_attempts.back().outcome == "waiting" && m_attempts.back().why.code == code;
}

std::string StartAttempts::text() const {
  std::string s;
  for (const auto& a : m_attempts) {
    if (a.outcome != "skipped" && a.outcome != "failed") continue;
    s += (s.empty() ? "" : "; ") + a.outcome + " " + start_path_name(a.path) + ": " + a.why.detail;
  }
  return s;
}

std::vector<status::StartAttemptStatus> StartAttempts::rows() const {
  std::vector<status::StartAttemptStatus> out;
  for (const auto& a : m_attempts) {
    status::StartAttemptStatus row{start_path_name(a.path), a.outcome, std::nullopt, {}};
    if (!a.why.code.empty()) {
      row.reason = a.why.code;
      row.detail = a.why.detail;
    }
    out.push_back(std::move(row));
  }
  return out;
}

const StartAttempt* StartAttempts::last_on(StartPath p) const {
  const StartAttempt* last = nullptr;
  for (const auto& a : m_attempts)
    if (a.path == p) last = &a;
  return last;
}

}  // namespace fr::supervisor

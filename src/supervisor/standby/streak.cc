#include "supervisor/standby/streak.h"

#include <limits>

namespace fr::supervisor {

RestartConfig standby_backoff_config(const RestartConfig& r) {
  RestartConfig c = r;
  c.crash_loop_limit = std::numeric_limits<int>::max();
  c.warm_failures_before_cold = 0;
  return c;
}

void StandbyStreak::reset(const RestartConfig& restart) {
  m_in_row = 0;
  m_policy = RestartPolicy(standby_backoff_config(restart));
  m_backoff_s = 0;
}

void StandbyStreak::end_of_parked(double parked_at, double now, const Config& cfg) {
  if (parked_at > 0 && now - parked_at >= cfg.restart.reset_after_s) reset(cfg.restart);
}

bool StandbyStreak::fail(double now, double parked_at, const std::string& what, const Config& cfg, const FlagList& flags) {
  end_of_parked(parked_at, now, cfg);
  m_in_row++;
  (void)m_policy.on_exit(now, /*failure=*/true, /*warm=*/false);  // never gives up: standby_backoff_config
  m_backoff_s = m_policy.backoff_s();
  if (m_in_row < cfg.standby.max_failures || !m_disabled.empty()) return false;
  m_disabled = std::to_string(m_in_row) + " standbys in a row failed (standby.max_failures " +
               std::to_string(cfg.standby.max_failures) + "); last: " + what + "; off until the flags change";
  m_disabled_flags = flags;
  return true;
}

void StandbyStreak::enable(const RestartConfig& restart) {
  m_disabled.clear();
  reset(restart);
}

}  // namespace fr::supervisor

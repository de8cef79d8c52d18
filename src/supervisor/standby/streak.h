// The standby's failure streak (docs/standby.md): every end of a standby we did not ask for is a failure,
// whatever stage it came at; the streak ends only when a standby stayed parked restart.reset_after_s or
// was released. Each failure sets the delay before the next spawn (the engine's backoff, restart.backoff_*,
// without its crash-loop give-up and cold escalation), and standby.max_failures in a row disable the path
// until the engine's flags change. Pure: the caller passes the time and the config it reads now (a re-read
// config changes restart.* and standby.max_failures under a running streak).
#pragma once

#include <string>

#include "supervisor/config.h"
#include "supervisor/flags.h"
#include "supervisor/policy.h"

namespace fr::supervisor {

// restart's backoff for the standby's spawns: never gives up (crash_loop_limit unbounded), never asks
// for a cold restart.
RestartConfig standby_backoff_config(const RestartConfig& r);

class StandbyStreak {
 public:
  explicit StandbyStreak(const RestartConfig& restart) : m_policy(standby_backoff_config(restart)) {}

  // A new streak: no failure in a row, no backoff (a release, or a standby that proved itself).
  void reset(const RestartConfig& restart);
  // A standby parked at `parked_at` (0: it never parked) ends at `now`: one that stayed parked
  // restart.reset_after_s proved it starts, so its end begins a new streak.
  void end_of_parked(double parked_at, double now, const Config& cfg);
  // Counts a failure at `now` (after end_of_parked) and sets backoff_s(). Returns true when this one
  // disabled the path: disabled() says why, with `what` (the last failure), until `flags` change.
  bool fail(double now, double parked_at, const std::string& what, const Config& cfg, const FlagList& flags);
  // The flags changed since the path was disabled: it may be tried again, on a new streak.
  void enable(const RestartConfig& restart);

  int in_row() const { return m_in_row; }
  double backoff_s() const { return m_backoff_s; }  // the delay before the next spawn after the last failure
  const std::string& disabled() const { return m_disabled; }  // "" while the path is on
  const FlagList& disabled_flags() const { return m_disabled_flags; }

 private:
  int m_in_row = 0;
  RestartPolicy m_policy;
  double m_backoff_s = 0;
  std::string m_disabled;
  FlagList m_disabled_flags;
};

}  // namespace fr::supervisor

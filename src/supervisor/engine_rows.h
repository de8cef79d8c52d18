// The status rows the lifecycle records of an engine (status `last_exit` and `last_start`,
// docs/supervisor.md), built here alone, typed (status/status.h), from its record (engine.h) and the
// facts of the moment. The Supervisor keeps the last of each and reads them as typed values.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "status/status.h"
#include "supervisor/engine.h"

namespace fr::supervisor {

// The exit of an engine that ran, classified as `cause` (classify.h's name) with `detail`: its pid, how
// long it ran, its reap (e.died_at) and whether it had been ready.
status::LastExitStatus exit_row(const Engine& e, const std::string& cause, const std::string& detail);
// The end of an engine that never ran: its spawn failed, or a restore stopped before the helper named a
// process (then `died_at`, when the stop ended it, on the clock of exit_row's).
status::LastExitStatus unrun_exit_row(const std::string& cause, const std::string& detail,
                                      std::optional<double> died_at = std::nullopt);
// READY of `e` on `path` at `ready_at` (the loop's clock, CLOCK_MONOTONIC), `since_previous_exit` after the
// reap of the engine before it, with each listed path's answer at this start.
status::LastStartStatus start_row(const Engine& e, const std::string& path, double ready_at, double since_previous_exit,
                                  std::vector<status::StartAttemptStatus> attempts);

}  // namespace fr::supervisor

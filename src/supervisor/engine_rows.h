// The status rows fastrestartd builds of its engine (status `engine`, `last_exit`, `last_start` and the
// `memory` rows of the GPUs it shares, docs/supervisor.md), built here alone, typed (status/status.h), from
// its record (engine.h) and the facts of the moment. The Supervisor keeps the last exit and the last start
// and reads them as typed values.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fastrestart/result.h"
#include "status/status.h"
#include "supervisor/classify.h"
#include "supervisor/engine.h"
#include "supervisor/host_probe.h"
#include "supervisor/memory_share.h"

namespace fr::supervisor {

// The facts of `e`'s exit with `wait_status`, for classify_engine_exit: a stop asked for (not a kill for a
// start timeout or a hang) or fastrestartd stopping (`stopping`: any exit then is requested), and whether the
// cgroup's OOM kill count grew while it ran (`oom_after`: read at the exit).
ExitFacts engine_exit_facts(const Engine& e, int wait_status, bool stopping, std::optional<uint64_t> oom_after);
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
// Why a start expected warm loaded from disk: the miss the daemons or the engine itself recorded, or else
// that it never asked the daemons, whose sockets are in `socket_dir`.
std::string warm_miss_reason(const Engine& e, const std::string& socket_dir);

// The running (or exited, not yet drained) engine at `now` (the loop's clock).
status::EngineStatus engine_row(const Engine& e, double now);
// One GPU's row: its probe's figures `m` (or why they are missing), the budget memory.utilization
// gives, and its share now (`share`: what the daemon holds outside the engine, a standby's reserve, the
// arenas and what is left the engine).
status::MemoryRowStatus memory_row(const std::string& gpu, const Result<GpuMemory>& m, double utilization,
                                   const GpuShare& share);

}  // namespace fr::supervisor

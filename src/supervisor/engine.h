// The record of one engine process: the live engine (the Supervisor's), or a standby that becomes the
// live engine at its release (standby/standby.h hands it over). Extends SupervisedChild (pid, pidfd,
// output and its reader) with what the lifecycle, the exit classification and status need.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "status/status.h"
#include "supervisor/engines/engine_kind.h"
#include "supervisor/flags.h"
#include "supervisor/supervised_child.h"

namespace fr::supervisor {

struct Engine : SupervisedChild {
  double spawned_at = 0;
  double died_at = 0;
  bool exited = false;
  int status = 0;
  bool stop_requested = false;
  bool killed_timeout = false;
  bool killed_hang = false;
  bool warm_expected = false;
  std::string path;  // "cold" | "warm" once ready
  std::string miss_reason;  // why it did not attach, when it asked and missed (a daemon's or its own word)
  std::deque<std::string> tail;  // its last output lines, which classify its exit
  std::optional<uint64_t> oom_before;
  FlagList flags;  // the engine's flags when it was started
  std::unique_ptr<EngineReport> report = std::make_unique<EngineReport>();  // what it said (the kind's new_report())
  bool strict = false;  // vllm-preload: started with ipc_cache fallback false
  bool in_pid_ns = false;      // PID 1 of its own PID namespace (spawned so, or restored): snapshottable
  std::string snapshot_id;     // restored from this snapshot (pid -1 while the helper restores it)
  double attach_since_unix = 0;  // attach records by its pid from this time on are its own (a standby attached early)
  std::string standby_level;     // released from a standby parked at this level
  std::optional<status::ArenaOutcomeStatus> arena;  // its `fastrestart-arena:` line, once it printed one
  // Where its readiness and health checks go (private_endpoint.h): its private endpoint's port, or 0 for
  // the public port; `endpoint_note` says which in status ("private 127.0.0.1:N", "public (why)").
  uint16_t probe_port = 0;
  std::string endpoint_note = "public";
};

}  // namespace fr::supervisor

// Start paths: the ways the supervisor can bring up the next engine (docs/supervisor.md, "Start paths").
// `restart.start` lists them in order; for each start the supervisor asks every listed path in turn
// whether it can serve now and starts the first that can, recording why each earlier one was skipped or
// failed (status "start_paths", /metrics fastrestart_start_path_total, STATUS=).
//
// A path is one file in this folder (standby.cc, snapshot.cc, warm.cc, cold.cc) and one line in registry.cc. It
// decides from facts the StartHost gives it and acts only through the StartHost, so it owns no process.
#pragma once

#include <optional>
#include <string>

#include "fastrestart/result.h"
#include "supervisor/config.h"

namespace fr::supervisor {

// Why a path cannot serve the next start: a short code (a /metrics label, a bounded set) and the words.
struct StartRefusal {
  std::string code;    // no_daemon | daemons_not_ready | nothing_held | unavailable | busy | no_artifact | not_parked | requested | failed
  std::string detail;  // for the operator: status, the log and STATUS=
};

// What the paths need from the supervisor (implemented by Supervisor).
class StartHost {
 public:
  virtual ~StartHost() = default;
  // nullopt when the weight daemons hold weights an engine can attach to now; else why not.
  virtual std::optional<StartRefusal> daemons_refusal() const = 0;
  // True when live daemons hold weights that an engine before this start loaded or used. False without
  // daemons, and right after the daemons were (re)loaded.
  virtual bool daemons_hold_old_weights() const = 0;
  // Stops the daemons and loads them again; once they are ready the walk of restart.start begins again.
  virtual void reload_daemons_for_start() = 0;
  // Spawns the engine process; `expected` is the path it is expected to take ("warm" attaches).
  virtual Status spawn_engine(StartPath expected) = 0;
  // nullopt when a snapshot artifact can be restored now; else why not.
  virtual std::optional<StartRefusal> snapshot_refusal() const = 0;
  // Starts restoring an artifact. A restore that fails later makes the supervisor try the next path.
  virtual Status restore_snapshot() = 0;
  // nullopt when a standby is parked at its gate on the current flags and daemons; else why not.
  virtual std::optional<StartRefusal> standby_refusal() const = 0;
  // Opens the standby's gate: it becomes the engine, and readiness runs as for any start.
  virtual Status release_standby() = 0;
};

enum class StartOutcome {
  kStarted,  // the engine (or its restore) is under way
  kWaiting,  // the path asked for fresh daemons first (StartHost::reload_daemons_for_start)
};

class StartPathImpl {
 public:
  virtual ~StartPathImpl() = default;
  virtual StartPath id() const = 0;
  // nullopt when this path can serve the next start now.
  virtual std::optional<StartRefusal> refusal(const StartHost& host) const = 0;
  // Begins the start. An error: the path failed at once, and the next listed path is tried.
  virtual Result<StartOutcome> start(StartHost& host) const = 0;
};

// The registered implementation of `id` (registry.cc).
const StartPathImpl& start_path(StartPath id);

// One implementation per file.
const StartPathImpl& snapshot_start_path();
const StartPathImpl& warm_start_path();
const StartPathImpl& cold_start_path();
const StartPathImpl& standby_start_path();

}  // namespace fr::supervisor

// Start paths: the ways the supervisor can bring up the next engine (docs/supervisor.md, "Start paths").
// `restart.start` lists them in order; for each start the supervisor asks every listed path in turn
// whether it can serve now and starts the first that can, recording why each earlier one was skipped or
// failed (status "start_paths", /metrics fastrestart_start_path_total, STATUS=).
//
// A path is one file (warm.cc and cold.cc in this folder; standby/path.cc and snapshots/path.cc beside the
// part that serves them) and one line in paths.def. It decides from facts the StartHost gives it and acts
// only through the StartHost, so it owns no process. A path that needs state of its own (a parked standby,
// a snapshot artifact) reaches it as a StartPart: StartHost::part(id) names no path.
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

enum class StartOutcome {
  kStarted,  // the engine (or its restore) is under way
  kWaiting,  // the path asked for fresh daemons first (StartHost::reload_daemons_for_start)
};

// The part of the supervisor that serves one start path (the standby, the snapshots): what that path asks
// of it. The paths every start shares (warm, cold) need none: they spawn an engine through the StartHost.
class StartPart {
 public:
  virtual ~StartPart() = default;
  // nullopt when the part can serve the next start now; else why not.
  virtual std::optional<StartRefusal> refusal() const = 0;
  // Begins the start (a restore, a release). An error: it failed at once, and the next listed path is
  // tried; one that fails later makes the supervisor try the next path itself.
  virtual Status start() = 0;
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
  // The part that serves `path` (the standby for "standby", the snapshots for "snapshot"); nullptr for a
  // path that has none (warm, cold). The host owns it; it lives as long as the host.
  virtual StartPart* part(StartPath path) const = 0;
};

// The refusal and start of a path served by a part: `host.part(path)`'s, or `unavailable` when the host
// has no such part (part_path.cc).
std::optional<StartRefusal> part_refusal(const StartHost& host, StartPath path);
Result<StartOutcome> start_part(StartHost& host, StartPath path);

class StartPathImpl {
 public:
  virtual ~StartPathImpl() = default;
  virtual StartPath id() const = 0;
  // nullopt when this path can serve the next start now.
  virtual std::optional<StartRefusal> refusal(const StartHost& host) const = 0;
  // Begins the start. An error: the path failed at once, and the next listed path is tried.
  virtual Result<StartOutcome> start(StartHost& host) const = 0;
};

// A path served entirely by its part: its refusal and start are the part's (part_refusal, start_part).
class PartStartPath final : public StartPathImpl {
 public:
  constexpr explicit PartStartPath(StartPath id) : m_id(id) {}
  StartPath id() const override { return m_id; }
  std::optional<StartRefusal> refusal(const StartHost& host) const override { return part_refusal(host, m_id); }
  Result<StartOutcome> start(StartHost& host) const override { return start_part(host, m_id); }

 private:
  StartPath m_id;
};

// The implementation of `id`: its row in the table (paths.def); each path's own function is declared from
// the table in paths.cc.
const StartPathImpl& start_path(StartPath id);

}  // namespace fr::supervisor

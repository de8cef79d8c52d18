// A part of the supervisor that serves one start path (docs/supervisor.md, "Start paths"), and the hooks
// every part shares. The Supervisor holds one part per path that has state of its own (the standby, the
// snapshots), built from the table in start/paths.h, and runs each hook over all of them in table order:
// a reaped child is offered to each part until one claims it, the known children are every part's, READY
// is told to each, the loop's end closes each, and each fills its own rows of status. A part reaches the
// supervisor only through its own host interface (standby_host.h, snapshot_host.h), which it is built with.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <cstdint>
#include <set>
#include <string>

#include "status/status.h"
#include "supervisor/config.h"
#include "supervisor/loop.h"
#include "supervisor/start/start_path.h"

namespace fr::supervisor {

// fastrestartd's listening socket (engine.listen = "supervisor", docs/listen-socket.md), handed to the
// parts that start engines with it: fd -1 when the engine binds its port itself. The Supervisor owns it
// and sets it before run(); a part keeps a reference and reads it when it starts a process.
struct ListenHandoff {
  int fd = -1;
  uint64_t inode = 0;
};

// No listening socket: the engine binds its port itself.
inline const ListenHandoff kNoListen{};

// What every part is built with besides its host: the loop it runs on, the config and the listening
// socket. Each is the Supervisor's and outlives the part; the config may change in place (a re-read).
struct PartBasics {
  Loop& loop;
  const Config& config;
  const ListenHandoff& listen = kNoListen;
};

// What a part learns at READY (Supervisor::decide_path_after_ready).
struct ReadyFacts {
  std::string path;              // the path the start took: "snapshot" | "standby" | "warm" | "cold"
  double since_spawn = 0;        // the engine's spawn (or a standby's release) to READY
  bool released = false;         // the engine is a released standby
  std::string restore_outcome;   // this start's attempt on the path "snapshot" ("" when it made none)
  std::string restore_detail;
  const status::LastStartStatus* last_start = nullptr;  // status's last_start for this start
};

class Part : public StartPart {
 public:
  // The path this part serves (its row in start/paths.h).
  virtual StartPath path() const = 0;
  // A reaped child: true when it was this part's (its exit is then handled here).
  virtual bool on_exit(pid_t, int /*status*/) { return false; }
  // The children this part started: not engine leftovers (orphans.h).
  virtual void add_known_pids(std::set<pid_t>&) const {}
  virtual void after_ready(const ReadyFacts&) {}
  // The loop ends: the part's processes are ended or forgotten, its handles and timers go.
  virtual void close() {}
  // Its rows of status and /metrics.
  virtual void fill_status(status::SupervisorStatus&) const {}
};

}  // namespace fr::supervisor

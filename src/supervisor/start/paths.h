// The start paths: one table, one row per path {path, name, how it decides and starts, the part that
// serves it}. The config parser reads the names from it (restart.start), the walk its decision, and the
// Supervisor builds its parts from it. Adding a path: its folder (the part, if it has state of its own,
// and its path file) and one row in paths.cc, plus its value in config.h's StartPath.
#pragma once

#include <memory>
#include <span>

#include "supervisor/config.h"
#include "supervisor/host_probe.h"
#include "supervisor/stats.h"
#include "supervisor/start/part.h"
#include "supervisor/start/start_path.h"

namespace fr::supervisor {

class StandbyHost;
class SnapshotHost;
class RestoreHost;

// What a part is built with: the Supervisor's host interfaces and the listening socket.
struct PartHosts {
  StandbyHost& standby;
  SnapshotHost& snapshots;
  RestoreHost& restore;
  PartBasics basics;
  GpuProbe& gpus;      // the standby's: its memory before a spawn and at a park
  const Stats& stats;  // the snapshots': the times to ready `snapshot inspect` reads
};

struct StartPathRow {
  StartPath path;
  const char* name;                                     // in restart.start, status and /metrics
  const StartPathImpl& (*decide)();                     // its refusal and start (start_path.h)
  std::unique_ptr<Part> (*make)(const PartHosts& hosts);  // nullptr: the path has no state of its own
};

// Every path, in StartPath's order.
std::span<const StartPathRow> start_path_rows();
// The names, in the same order (the config parser's choice).
std::span<const char* const> start_path_names();

}  // namespace fr::supervisor

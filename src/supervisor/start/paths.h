// The start paths: one table (paths.def), one row per path {path, how it decides and starts, the part that
// serves it}. The config parser reads the names from it (restart.start), the walk its decision, and the
// Supervisor builds its parts from it. Adding a path is its folder and one line in paths.def
// (docs/start-paths.md shows one, and a test builds it).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string_view>

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
  StartPath path;                                         // its name: restart.start, status, /metrics
  const StartPathImpl& (*decide)();                       // its refusal and start (start_path.h)
  std::unique_ptr<Part> (*make)(const PartHosts& hosts);  // no_part: the path has no state of its own
};

// Every path, in the table's order.
std::span<const StartPathRow> start_path_rows();
// The path named `name`; nullopt when the table has none.
std::optional<StartPath> start_path_named(std::string_view name);

// The `make` of a path without state of its own: nullptr.
std::unique_ptr<Part> no_part(const PartHosts& hosts);

}  // namespace fr::supervisor

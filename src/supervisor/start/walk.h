// Where a start's walk of restart.start begins (docs/supervisor.md, "Start paths"). An operator's explicit
// request for one path (`fastrestartctl snapshot restore`, or the artifact a `snapshot create` just wrote)
// wins over the order: the paths listed before it are skipped with the reason `requested`, so a parked
// standby listed first cannot serve the start the request was for and leave the artifact pending.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "supervisor/start/start_path.h"

namespace fr::supervisor {

struct WalkBegin {
  size_t first = 0;                 // the index in the order to try first
  std::vector<StartPath> skipped;   // the paths before it, in order: recorded as skipped, `requested`
};

// `requested`: the path an explicit request asked for, if any. A request for a path the order does not
// list changes nothing (the walk begins at the first).
WalkBegin walk_begin(const std::vector<StartPath>& order, std::optional<StartPath> requested);

// The refusal recorded for a path skipped because `requested` was asked for.
StartRefusal requested_refusal(StartPath requested);

}  // namespace fr::supervisor

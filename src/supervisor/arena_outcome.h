// An engine's word on its KV arena as status records it (`arena_outcome`; docs/supervisor.md, "KV
// arenas"): its `fastrestart-arena:` line (arena_line.h) read and logged. Recorded, never acted on.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "status/status.h"

namespace fr::supervisor {

// nullopt for a line that is not an arena line, and for a malformed one (that costs only a debug note:
// it is the engine's own output). `pid`: the engine's.
std::optional<status::ArenaOutcomeStatus> arena_outcome_of_line(const std::string& line, pid_t pid);

}  // namespace fr::supervisor

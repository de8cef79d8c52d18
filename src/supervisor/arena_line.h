// An engine's word on its KV arena, read from its output (docs/supervisor.md, "KV arenas"): one line as it
// starts, holding `fastrestart-arena:` and then either
//
//   fastrestart-arena: leased name=kv bytes=107374182400 waited_s=0.081 swap_s=0.003 generation=4
//   fastrestart-arena: fallback reason="arena_lease.wait_s: arena 'kv' is still leased to pid 4321"
//
// The engine prints it; fastrestartd only reads it into status (`arena_outcome`). Contract:
// - The marker may stand anywhere in the line (after a logger's prefix). A line without it is not an arena
//   line; a line with it that does not parse is malformed: the caller logs the reason at debug and keeps
//   what it had. Nothing here throws or reads past the line.
// - Bounded: a line over kMaxArenaLine bytes is malformed, a fallback reason over kMaxArenaReason bytes is
//   cut there (with "..." appended), and each value is checked for its type and range.
// - leased: `name` (1-64 of A-Z a-z 0-9 _ . -), `bytes` (an integer > 0), `generation` (an integer > 0),
//   `waited_s` and `swap_s` (finite decimals >= 0) are all required. fallback: `reason` is required, a
//   quoted string (`\"` and `\\` escape a quote and a backslash) or one bare word. Keys other than these
//   are ignored (engines may add their own); a key given twice is malformed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "status/status.h"

namespace fr::supervisor {

inline constexpr size_t kMaxArenaLine = 4096;
inline constexpr size_t kMaxArenaReason = 512;

// The line as read is status's record of it, not a copy: `outcome` ("leased" or "fallback") and the line's
// fields set, `pid` and `unix_time` left for the caller (arena_outcome.h). `reason` (fallback only) may
// hold any bytes but NUL (escape it before logging).
using ArenaLine = status::ArenaOutcomeStatus;

// nullopt: not an arena line. An error (Errc::kInvalidArgument): an arena line that is malformed, naming
// what is wrong ("fastrestart-arena: leased: bytes: not an integer > 0").
Result<std::optional<ArenaLine>> parse_arena_line(std::string_view line);

}  // namespace fr::supervisor

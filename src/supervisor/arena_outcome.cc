#include "supervisor/arena_outcome.h"

#include <ctime>

#include <spdlog/spdlog.h>

#include "common/control_chars.h"
#include "supervisor/arena_line.h"

namespace fr::supervisor {

std::optional<status::ArenaOutcomeStatus> arena_outcome_of_line(const std::string& line, pid_t pid) {
  auto parsed = parse_arena_line(line);
  if (!parsed.ok()) {
    spdlog::debug("engine pid {}: ignored a malformed arena line: {}", pid, escape_control_chars(parsed.error().message));
    return std::nullopt;
  }
  if (!*parsed) return std::nullopt;
  status::ArenaOutcomeStatus o = std::move(**parsed);
  o.pid = pid;
  o.unix_time = static_cast<double>(std::time(nullptr));
  if (o.outcome == "leased")
    spdlog::info("engine pid {}: leased KV arena {} ({} bytes, generation {}) after waiting {:.3f} s; swap {:.3f} s", pid,
                 o.name, o.bytes, o.generation, o.waited_s, o.swap_s);
  else
    spdlog::warn("engine pid {}: no KV arena, it allocates its KV cache itself: {}", pid, escape_control_chars(o.reason));
  return o;
}

}  // namespace fr::supervisor

// What an engine says of its KV arena (arena_line.h; docs/supervisor.md, "KV arenas"): recorded for status,
// never acted on. The arenas themselves are the daemons' (their status, daemons/native.cc) and their bytes
// count in the engine's share (supervisor_memory.cc).
#include <ctime>

#include <spdlog/spdlog.h>

#include "common/control_chars.h"
#include "supervisor/arena_line.h"
#include "supervisor/supervisor.h"
#include "supervisor/supervisor_internal.h"

namespace fr::supervisor {

void Supervisor::observe_arena_line(Engine& e, const std::string& line) {
  auto parsed = parse_arena_line(line);
  if (!parsed.ok()) {
    // The engine's own output: a malformed line costs nothing but this note.
    spdlog::debug("engine pid {}: ignored a malformed arena line: {}", e.pid, escape_control_chars(parsed.error().message));
    return;
  }
  if (!*parsed) return;
  const ArenaLine& a = **parsed;
  status::ArenaOutcomeStatus o;
  o.outcome = a.leased ? "leased" : "fallback";
  o.pid = e.pid;
  o.unix_time = static_cast<double>(std::time(nullptr));
  o.name = a.name;
  o.bytes = a.bytes;
  o.waited_s = a.waited_s;
  o.swap_s = a.swap_s;
  o.generation = a.generation;
  o.reason = a.reason;
  if (a.leased)
    spdlog::info("engine pid {}: leased KV arena {} ({} bytes, generation {}) after waiting {:.3f} s; swap {:.3f} s", e.pid,
                 a.name, a.bytes, a.generation, a.waited_s, a.swap_s);
  else
    spdlog::warn("engine pid {}: no KV arena, it allocates its KV cache itself: {}", e.pid, escape_control_chars(a.reason));
  e.arena = o;
  if (m_engine.get() == &e) m_arena_outcome = std::move(o);
}

std::optional<status::ArenaOutcomeStatus> Supervisor::arena_outcome() const {
  // The current engine's word, null until it says it; once it is gone, the last engine's that spoke.
  if (m_engine) return m_engine->arena;
  return m_arena_outcome;
}

}  // namespace fr::supervisor

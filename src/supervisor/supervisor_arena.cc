// What an engine says of its KV arena (arena_outcome.h; docs/supervisor.md, "KV arenas"): recorded for
// status, never acted on. The arenas themselves are the daemons' (their status, daemons/native.cc) and
// their bytes count in the engine's share (supervisor_memory.cc).
#include "supervisor/arena_outcome.h"
#include "supervisor/supervisor.h"

namespace fr::supervisor {

void Supervisor::observe_arena_line(Engine& e, const std::string& line) {
  auto o = arena_outcome_of_line(line, e.pid);
  if (!o) return;
  e.arena = o;
  if (m_engine.get() == &e) m_arena_outcome = std::move(o);
}

std::optional<status::ArenaOutcomeStatus> Supervisor::arena_outcome() const {
  // The current engine's word, null until it says it; once it is gone, the last engine's that spoke.
  if (m_engine) return m_engine->arena;
  return m_arena_outcome;
}

}  // namespace fr::supervisor

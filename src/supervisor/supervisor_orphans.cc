// Which of fastrestartd's children it started itself: everything else that reparents to it is an engine
// leftover (orphans.h), swept at the drain step (EngineEnd::drain, engine_end.h).
#include "supervisor/supervisor.h"

namespace fr::supervisor {

std::set<pid_t> Supervisor::known_children() const {
  std::set<pid_t> known;
  m_daemons->add_known_pids(known);  // the weight daemons (vllm preload: its launcher, and so its ranks' group)
  for (const auto& p : m_parts) p->add_known_pids(known);  // the snapshot helper, the standby's process
  // The engine, spawned or restored from a snapshot and adopted: its group is handled as the engine's.
  if (m_engine && !m_engine->exited && m_engine->pid > 0) known.insert(m_engine->pid);
  if (m_front && m_front->pid() > 0) known.insert(m_front->pid());  // fastrestart-front is ours, not a leftover
  return known;
}

}  // namespace fr::supervisor

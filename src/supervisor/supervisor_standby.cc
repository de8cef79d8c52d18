// The Supervisor as the standby part's host (standby/standby_host.h): a new engine record, the last
// engine's death for the release's timeline, and the hand-over of a released standby as the live engine.
// The standby's process, gate, streak, memory and status are the part's (standby/standby.cc).
#include <spdlog/spdlog.h>

#include "supervisor/engine_group_record.h"
#include "supervisor/supervisor.h"
#include "supervisor/state_files.h"

namespace fr::supervisor {

std::unique_ptr<Engine> Supervisor::new_engine_record() {
  auto e = std::make_unique<Engine>();
  e->flags = m_reload.flags();
  e->report = m_kind->new_report();
  return e;
}

std::optional<double> Supervisor::engine_died_at() const {
  return m_last_exit ? m_last_exit->died_at_s : std::nullopt;
}

void Supervisor::adopt_engine(std::unique_ptr<Engine> engine) {
  m_engine = std::move(engine);
  Engine& e = *m_engine;
  e.spawned_at = m_loop.now_s();  // time to ready counts from the release
  e.standby_level = standby_level_name(m_cfg.standby.level);
  e.oom_before = m_oom.read();
  // Its output is the engine's from now on.
  read_child_output(m_loop, std::move(e.output), "engine", engine_line_handler(&e), e);
  if (auto st = write_private_file(state_path(m_cfg, "engine.pgid"), engine_group_record(e.pid)); !st.ok())
    spdlog::warn("could not record the engine's process group: {}", st.error().message);
  // No note_engine_spawn here: the drain's baseline (the leak check's "used before the engine") stays what it
  // was before the engine that died: used memory now includes that engine's, still being freed (a release
  // does not wait for it), and this one's own context (warmed).
  set_status("Starting the engine (standby released at " + e.standby_level + ")");
  m_watch.arm(true);
}

}  // namespace fr::supervisor

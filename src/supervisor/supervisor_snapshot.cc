// The Supervisor as the snapshots part's host (snapshots/snapshot_host.h): the steps of a restore and a
// dump that touch the live engine, which is the Supervisor's. The artifacts, the helper and its jobs are
// the part's (snapshots/snapshots.cc).
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>

#include "supervisor/engine_group_record.h"
#include "supervisor/engine_rows.h"
#include "supervisor/supervisor.h"
#include "supervisor/state_files.h"

namespace fr::supervisor {

using nlohmann::json;

void Supervisor::restoring_engine(const std::string& id) {
  m_engine = new_engine_record();
  Engine& e = *m_engine;
  e.in_pid_ns = true;
  e.snapshot_id = id;
  e.spawned_at = m_loop.now_s();
  e.oom_before = m_oom.read();
  set_status("Restoring the engine from snapshot " + id);
}

void Supervisor::restore_spawned(UniqueFd output) {
  // The helper's output pipe becomes the restored engine's stdout/stderr (criu --inherit-fd): read as any
  // engine's (its tail, progress, and the arena line of the lease its resume takes).
  read_child_output(m_loop, std::move(output), "engine", engine_line_handler(m_engine.get()), *m_engine);
  m_watch.arm(false);
}

void Supervisor::restore_not_spawned() { m_engine.reset(); }

void Supervisor::restored(pid_t pid, std::optional<int> exited) {
  Engine& e = *m_engine;
  e.pid = pid;
  e.pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, e.pid, 0)));
  // A restored engine leases its KV arena again in the helper's resume, before its pid is known here.
  if (e.arena) e.arena->pid = e.pid;
  if (e.arena && m_engine.get() == &e) m_arena_outcome = e.arena;
  // As for a spawned engine: if fastrestartd dies, the next one kills what is left of this group
  // (a restored engine leads its own session, as it did when it was dumped).
  if (auto st = write_private_file(state_path(m_cfg, "engine.pgid"), engine_group_record(e.pid)); !st.ok())
    spdlog::warn("could not record the engine's process group: {}", st.error().message);
  if (exited) {
    on_engine_exit(*exited);
    return;
  }
  if (e.stop_requested) {
    signal_group(e.pid, e.pidfd.get(), SIGKILL);
    return;
  }
  m_watch.poll_now();
}

void Supervisor::restore_failed(const std::string& detail) {
  Engine& e = *m_engine;
  if (e.stop_requested) {
    // Stopped while restoring: nothing runs; finish like an exit we asked for.
    e.exited = true;
    e.died_at = m_loop.now_s();
    m_last_exit = unrun_exit_row("requested", "stopped while restoring a snapshot", e.died_at);
    raise(Event::kEngineExited);
    return;
  }
  m_watch.stop_deadline();
  m_engine.reset();
  m_attempts.record(StartPath::kSnapshot, "failed", {"failed", detail});
  walk_start_paths(m_start_index + 1);
}

DumpTarget Supervisor::dump_target() const {
  if (!m_engine) return {};
  return {m_engine->pid, m_engine->in_pid_ns, m_engine->output.get()};
}

void Supervisor::dump_begins() {
  m_watch.stop_health();
  m_engine->stop_requested = true;
}

void Supervisor::dump_failed() {
  if (!m_engine || m_engine->exited || m_engine->path.empty()) return;
  // The dump's result may come after the engine was asked to stop meanwhile (SIGTERM, a dead preload): that
  // stop stands. Cleared, the exit it asked for would count as a crash and health checks would run again.
  if (m_state != State::kReady) {
    spdlog::info("the failed dump's engine (pid {}) is being stopped ({}): it is not checked again", m_engine->pid,
                 state_name(m_state));
    return;
  }
  m_engine->stop_requested = false;
  m_watch.start_health();
}

void Supervisor::create_finished() {
  if (m_attempts.waiting("snapshot_create")) raise(Event::kSnapshotCreated);
}

}  // namespace fr::supervisor

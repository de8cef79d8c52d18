// The standby's end (docs/standby.md): a discard (the gate told to exit, SIGTERM, SIGKILL after a grace),
// the wait of the daemons for its group, and its exit: classified as an engine's, a failure counted in the
// streak and followed by a backoff, a discard followed by its successor.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "supervisor/child.h"
#include "supervisor/group_stop.h"
#include "supervisor/listen_socket.h"
#include "supervisor/standby/gate_message.h"
#include "supervisor/standby/standby.h"
#include "supervisor/state_files.h"

namespace fr::supervisor {

namespace {

constexpr double kStandbyStopGraceS = 5;  // a parked standby has nothing in flight

}  // namespace

void Standby::discard(const std::string& why) {
  if (m_phase == Phase::kBackoff) {
    m_backoff_timer.stop();
    m_phase = Phase::kOff;
  }
  if (!alive() || m_phase == Phase::kStopping) return;
  spdlog::info("standby: stopping pid {}: {}", m_proc->pid, why);
  if (m_gate) (void)!::send(m_gate.get(), gate_exit_line().data(), gate_exit_line().size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  m_phase = Phase::kStopping;
  m_stop_reason = why;
  m_port_timer.stop();
  stop_group(m_park_timer, {.pgid = m_proc->pid, .pidfd = m_proc->pidfd.get(), .grace_s = kStandbyStopGraceS,
                            .what = "the standby's process group"});
}

bool Standby::stop_before_daemons(const std::string& why) {
  const bool running = alive();
  discard(why);  // also a pending respawn
  if (running) m_then_daemons = true;  // on_exit calls standby_gone
  return running;
}

bool Standby::on_exit(pid_t pid, int status) {
  if (!alive() || pid != m_proc->pid) return false;
  const Config& cfg = m_cfg;
  Engine& e = *m_proc;
  if (e.reader) e.reader->drain();  // its last lines may still be in the pipe: they classify the exit
  e.exited = true;
  m_park_timer.stop();
  m_port_timer.stop();
  m_gate_reader.reset();
  m_gate.reset();
  ExitFacts f;
  f.wait_status = status;
  f.requested = m_phase == Phase::kStopping;
  const Classification c = classify_engine_exit(f, e.tail, m_host.engine_kind().failure_rules(),  // as the live engine's
                                                m_listen.fd >= 0 ? std::optional(engine_serve_port(cfg)) : std::nullopt);
  const bool was_parked = m_phase == Phase::kParked;
  const bool stopped = m_phase == Phase::kStopping;
  const bool failed_kill = stopped && m_stop_reason.starts_with("failed:");
  const pid_t pgid = e.pid;
  ::unlink(state_path(cfg, "standby.pgid").c_str());
  // Its workers go with it: a standby's group never outlives it.
  if (group_alive(pgid)) signal_group(pgid, -1, SIGKILL);
  m_proc.reset();
  if (stopped) {
    spdlog::info("standby pid {} stopped ({}: {})", pgid, m_stop_reason, c.detail);
    // Discarded (new flags, config, daemons, model) is no failure, but ends the streak if it proved itself.
    if (!failed_kill) m_streak.end_of_parked(m_parked_at, m_loop.now_s(), cfg);
  } else {
    m_failures["died"]++;
    m_last_failure = std::string(was_parked ? "died while parked: " : "died before parking: ") + exit_cause_name(c.cause) +
                     " (" + c.detail + ")";
    spdlog::error("standby pid {} {}", pgid, m_last_failure);
    note_failure(m_last_failure);
  }
  if (m_then_daemons) {
    m_then_daemons = false;
    m_phase = m_streak.disabled().empty() ? Phase::kOff : Phase::kDisabled;
    m_host.standby_gone();
    return true;
  }
  if (!m_streak.disabled().empty()) {
    m_phase = Phase::kDisabled;
    return true;
  }
  if (stopped && !failed_kill) {
    m_phase = Phase::kOff;
    maybe_spawn();  // discarded for new flags or daemons: its successor, if an engine serves
    return true;
  }
  retry_later();
  return true;
}

void Standby::close() {
  m_park_timer.stop();
  m_backoff_timer.stop();
  m_port_timer.stop();
  m_gate_reader.reset();
  m_gate.reset();
  m_proc.reset();
}

}  // namespace fr::supervisor

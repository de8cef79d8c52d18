// The standby as the StartPart of the path "standby" (docs/standby.md): whether it can serve the next
// start, the release that hands its process over as the live engine, the release's timeline, and status.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <spdlog/spdlog.h>

#include "supervisor/standby/gate_message.h"
#include "supervisor/standby/standby.h"
#include "supervisor/state_files.h"

namespace fr::supervisor {

namespace {

const char* standby_phase_name(StandbyPhase p) {
  switch (p) {
    case StandbyPhase::kOff: return "off";
    case StandbyPhase::kStarting: return "starting";
    case StandbyPhase::kParked: return "parked";
    case StandbyPhase::kStopping: return "stopping";
    case StandbyPhase::kBackoff: return "backoff";
    case StandbyPhase::kDisabled: return "disabled";
  }
  return "off";
}

}  // namespace

std::optional<StartRefusal> Standby::refusal() const {
  if (!m_created) return StartRefusal{"not_parked", "no standby was started yet (one starts once an engine is ready)"};
  switch (m_phase) {
    case Phase::kOff: return StartRefusal{"not_parked", "no standby is running"};
    case Phase::kStarting:
      return StartRefusal{"not_parked", "the standby (pid " + std::to_string(m_proc ? m_proc->pid : 0) + ") has not parked yet"};
    case Phase::kStopping: return StartRefusal{"not_parked", "the standby is being stopped (" + m_stop_reason + ")"};
    case Phase::kBackoff: return StartRefusal{"not_parked", "the standby is being started again after: " + m_last_failure};
    case Phase::kDisabled: return StartRefusal{"unavailable", m_streak.disabled()};
    case Phase::kParked: break;
  }
  if (!alive()) return StartRefusal{"not_parked", "the standby is gone"};
  if (auto why = stale(); !why.empty()) return StartRefusal{"unavailable", why};
  if (m_cfg.standby.level == StandbyLevel::kWarmed && m_daemon_generation != m_host.daemon_generation())
    return StartRefusal{"unavailable", "the weight daemons were reloaded since the standby attached to them"};
  return std::nullopt;
}

// Opens the gate: the standby becomes the engine, and readiness runs as for any start.
Status Standby::start() {
  const std::string line = gate_release_line();
  if (::send(m_gate.get(), line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(line.size())) {
    const std::string why = std::string("the standby's gate did not take the release: ") + std::strerror(errno);
    failed("release", why);
    return make_error(Errc::kIo, why);
  }
  const Config& cfg = m_cfg;
  const double now = m_loop.now_s();
  m_port_timer.stop();
  m_gate_reader.reset();
  m_gate.reset();
  m_releases++;
  m_released_at = now;
  m_streak.reset(cfg.restart);  // it became the engine: the standby path works
  const std::optional<double> died = m_host.engine_died_at();
  m_released_after_death_s = died ? now - *died : -1;
  m_phase = Phase::kOff;
  m_release_to_ready_s.reset();
  m_death_to_ready_s.reset();
  ::unlink(state_path(cfg, "standby.pgid").c_str());  // the host records its group as the engine's
  spdlog::info("standby: released pid {} at {}{}", m_proc->pid, standby_level_name(cfg.standby.level),
               m_released_after_death_s >= 0 ? fmt::format(", {:.3f} s after the engine's death", m_released_after_death_s)
                                             : std::string());
  m_host.adopt_engine(std::move(m_proc));
  return {};
}

void Standby::after_ready(double since_release) {
  if (!m_created) return;
  m_release_to_ready_s = since_release;
  if (m_released_after_death_s >= 0) m_death_to_ready_s = m_released_after_death_s + since_release;
}

std::optional<status::StandbyStatus> Standby::status() const {
  if (!wanted()) return std::nullopt;
  const Config& cfg = m_cfg;
  status::StandbyStatus st;
  st.level = standby_level_name(cfg.standby.level);
  for (const auto& gpu : cfg.gpus) st.reserve_bytes += reserve_bytes(gpu);  // per GPU: status.memory[]
  if (!m_created) {
    st.state = "off";
    return st;
  }
  st.state = standby_phase_name(m_phase);
  if (alive()) {
    st.pid = m_proc->pid;
    st.age_s = m_loop.now_s() - m_proc->spawned_at;
  }
  st.gpu_bytes = m_phase == Phase::kParked ? m_gpu_bytes : 0;
  st.spawns = m_spawns;
  st.releases = m_releases;
  st.failures = m_failures;
  st.disabled = m_streak.disabled();
  st.last_failure = m_last_failure;
  st.failures_in_row = m_streak.in_row();
  st.backoff_s = m_phase == Phase::kBackoff ? m_streak.backoff_s() : 0;
  if (m_releases > 0 && m_released_after_death_s >= 0) st.death_to_release_s = m_released_after_death_s;
  st.release_to_ready_s = m_release_to_ready_s;
  st.death_to_ready_s = m_death_to_ready_s;
  return st;
}

void Standby::after_ready(const ReadyFacts& ready) {
  if (ready.released) after_ready(ready.since_spawn);
  maybe_spawn();  // one standby behind the engine, never before it is ready
}

void Standby::fill_status(status::SupervisorStatus& st) const { st.standby = status(); }

}  // namespace fr::supervisor

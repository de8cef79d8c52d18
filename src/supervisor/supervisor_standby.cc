// The standby engine (docs/standby.md): one copy of the engine, started after the live one is ready, that
// does its slow GPU-free work (and at level warmed its attach and warm-up) and parks at a gate. The start
// path "standby" (standby/path.cc) releases it; everything it needs from the supervisor is here.
#include "supervisor/supervisor.h"
#include "supervisor/supervisor_internal.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <spdlog/spdlog.h>

#include "common/control_chars.h"
#include "supervisor/engine_group_record.h"
#include "supervisor/listen_socket.h"
#include "supervisor/standby/gate_message.h"
#include "supervisor/standby/model_files.h"
#include "supervisor/standby/port_owner.h"
#include "supervisor/standby/stale.h"

namespace fr::supervisor {

using Phase = StandbyPhase;

namespace {

constexpr double kStandbyStopGraceS = 5;   // a parked standby has nothing in flight
constexpr double kPortCheckEveryS = 1;     // while parked: has it bound the engine's port?
constexpr uint64_t kMiB = 1048576;

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kOff: return "off";
    case Phase::kStarting: return "starting";
    case Phase::kParked: return "parked";
    case Phase::kStopping: return "stopping";
    case Phase::kBackoff: return "backoff";
    case Phase::kDisabled: return "disabled";
  }
  return "off";
}

}  // namespace

std::map<std::string, FileIdentity> Supervisor::standby_model_files() const {
  std::vector<std::string> roots = m_cfg.weights.checkpoint;
  if (roots.empty())
    if (std::string m = m_kind->local_model_path(m_flags); !m.empty()) roots.push_back(std::move(m));
  return identify_model_files(model_files(roots));
}

std::string Supervisor::standby_stale() const {
  if (!m_standby) return {};
  const Standby& s = *m_standby;
  return standby_stale_reason(s.flags, s.launch, s.checkpoint, m_flags, m_cfg, [this] { return standby_model_files(); });
}

bool Supervisor::standby_wanted() const {
  const auto& s = m_cfg.restart.start;
  return std::find(s.begin(), s.end(), StartPath::kStandby) != s.end();
}

bool Supervisor::standby_alive() const { return m_standby && m_standby->proc && !m_standby->proc->exited; }

void Supervisor::maybe_spawn_standby() {
  if (!standby_wanted() || is_terminal(m_state) || !engine_serving()) return;
  if (!m_standby) m_standby = std::make_unique<Standby>(m_loop, m_cfg.restart);
  Standby& s = *m_standby;
  switch (s.phase) {
    case Phase::kDisabled:
      if (s.streak.disabled_flags() == m_flags) return;
      spdlog::info("standby: the flags changed since it was disabled; trying again");
      s.streak.enable(m_cfg.restart);
      break;
    case Phase::kStopping:
    case Phase::kBackoff:
      return;  // its exit, or the backoff, comes back here
    case Phase::kStarting:
    case Phase::kParked: {
      const std::string stale = standby_stale();
      if (stale.empty() && s.daemon_generation == m_daemon_generation) return;
      discard_standby(!stale.empty() ? stale : "the weight daemons were reloaded");
      return;  // its exit starts the next one
    }
    case Phase::kOff: break;
  }
  spawn_standby();
}

void Supervisor::spawn_standby() {
  Standby& s = *m_standby;
  s.phase = Phase::kOff;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    standby_failed("spawn", std::string("socketpair: ") + std::strerror(errno));
    return;
  }
  UniqueFd ours(sv[0]), theirs(sv[1]);
  // Descriptor 3 is the listening socket's in the child (SpawnSpec::listen_fd): the gate goes elsewhere.
  if (m_listen_fd >= 0 && theirs.get() == 3) theirs.reset(::fcntl(3, F_DUPFD_CLOEXEC, 4));
  if (!theirs) {
    standby_failed("spawn", std::string("moving the gate socket off descriptor 3: ") + std::strerror(errno));
    return;
  }
  ::fcntl(ours.get(), F_SETFL, O_NONBLOCK);
  auto e = std::make_unique<Engine>();
  e->flags = m_flags;
  e->report = m_kind->new_report();
  SpawnSpec spec;
  spec.argv = engine_argv(/*for_standby=*/true);
  spec.env = engine_env(/*for_standby=*/true);
  spec.env["FASTRESTART_STANDBY_FD"] = std::to_string(theirs.get());
  spec.env["FASTRESTART_STANDBY_LEVEL"] = standby_level_name(m_cfg.standby.level);
  spec.pass_fd = theirs.get();
  spec.listen_fd = m_listen_fd;  // held without accepting until the release (docs/listen-socket.md)
  spec.listen_fd_name = kListenFdName;
  spec.working_dir = m_cfg.engine.working_dir;
  spec.new_pid_namespace = m_snapshots->wanted();
  if (!m_cfg.engine.cgroup.empty()) spec.cgroup_procs = m_cfg.engine.cgroup + "/cgroup.procs";
  e->in_pid_ns = spec.new_pid_namespace;
  e->spawned_at = m_loop.now_s();
  e->attach_since_unix = static_cast<double>(std::time(nullptr));
  s.used_before.clear();
  if (m_cfg.weights.backend != "host")
    for (const auto& gpu : m_cfg.gpus)
      if (auto m = m_gpus->memory(gpu); m.ok()) s.used_before[gpu] = static_cast<double>(m->used);
  Engine* raw = e.get();
  if (const std::string refused = engine_share_refusal(); !refused.empty()) {
    standby_failed("spawn", "not started: " + refused);
    return;
  }
  auto st = spawn_supervised(m_loop, spec, "standby", [raw](const std::string& l) {
    raw->tail.push_back(l);
    if (raw->tail.size() > 200) raw->tail.pop_front();
    raw->report->observe(l);
  }, *e);
  theirs.reset();  // the child holds it now (or nobody does)
  if (!st.ok()) {
    standby_failed("spawn", st.error().message);
    return;
  }
  s.proc = std::move(e);
  s.gate = std::move(ours);
  s.gate_reader = std::make_unique<LineReader>(
      m_loop, s.gate.get(), [this](const std::string& l) { on_gate_line(l); },
      [this] {
        // A standby that closes its gate without parking is not waiting, and one that closes it while
        // parked can no longer be released; one that dies closes it too, so give its exit a moment to be
        // reaped before calling it a protocol failure. (While parked the port check runs on port_timer.)
        if (!m_standby || (m_standby->phase != Phase::kStarting && m_standby->phase != Phase::kParked)) return;
        const Phase phase = m_standby->phase;
        const pid_t pid = m_standby->proc ? m_standby->proc->pid : -1;
        Timer& grace = phase == Phase::kParked ? m_standby->park_timer : m_standby->port_timer;
        grace.start(0.5, [this, pid, phase] {
          if (m_standby && m_standby->phase == phase && m_standby->proc && m_standby->proc->pid == pid)
            standby_failed("protocol", phase == Phase::kParked
                                           ? "closed its end of the gate socket while parked: it can no longer be released"
                                           : "closed its end of the gate socket without parking");
        });
      });
  s.phase = Phase::kStarting;
  s.flags = m_flags;
  s.daemon_generation = m_daemon_generation;
  s.checkpoint = standby_model_files();
  s.launch = standby_launch_config(m_cfg);
  s.gpu_bytes = 0;
  s.parked_at = 0;
  s.spawns++;
  const double timeout = m_cfg.standby.park_timeout_s;
  s.park_timer.start(timeout, [this, timeout] {
    standby_failed("never_parked", "did not park within " + std::to_string(static_cast<int>(timeout)) +
                                       " s (standby.park_timeout_s): does the engine speak the gate protocol (docs/standby.md)?");
  });
  if (auto w = write_private_file(state_path(m_cfg, "standby.pgid"), engine_group_record(s.proc->pid)); !w.ok())
    spdlog::warn("could not record the standby's process group: {}", w.error().message);
  spdlog::info("standby: started pid {} to park at {}", s.proc->pid, standby_level_name(m_cfg.standby.level));
}

void Supervisor::on_gate_line(const std::string& line) {
  if (!m_standby || !m_standby->proc) return;
  Standby& s = *m_standby;
  if (s.phase != Phase::kStarting) {
    if (s.phase == Phase::kParked) standby_failed("protocol", "wrote to its gate after parking: '" + escape_control_chars(line.substr(0, 200)) + "'");
    return;
  }
  auto m = parse_gate_message(line);
  if (!m.ok()) {
    standby_failed("protocol", m.error().message);
    return;
  }
  const std::string want = standby_level_name(m_cfg.standby.level);
  if (m->level != want) {
    standby_failed("protocol", "parked at " + m->level + ", but standby.level is " + want);
    return;
  }
  // The pid it reports must be of its own group (in its own PID namespace it sees other numbers).
  if (!s.proc->in_pid_ns && m->pid != s.proc->pid && ::getpgid(m->pid) != s.proc->pid) {
    standby_failed("protocol", "reported pid " + std::to_string(m->pid) + ", which is not in its process group " +
                                   std::to_string(s.proc->pid));
    return;
  }
  on_standby_parked();
}

void Supervisor::on_standby_parked() {
  Standby& s = *m_standby;
  s.park_timer.stop();
  s.phase = Phase::kParked;
  s.parked_at = m_loop.now_s();  // the failure streak is not over yet: it may die parked (see note_standby_failure)
  measure_standby_memory(/*at_park=*/true);  // at every park: its reserve follows the flags it was started on
  const uint64_t bytes = s.gpu_bytes;
  spdlog::info("standby: pid {} parked at {} after {:.2f} s, {} MiB of GPU memory", s.proc->pid,
               standby_level_name(m_cfg.standby.level), s.parked_at - s.proc->spawned_at, bytes / kMiB);
  auto check_port = [this] {
    if (!m_standby || m_standby->phase != Phase::kParked || !m_standby->proc) return;
    if (pid_t p = group_listener(m_standby->proc->pid, m_cfg.engine.port, m_listen_inode))
      standby_failed("listening", "pid " + std::to_string(p) + " listens on the engine's port " +
                                      std::to_string(m_cfg.engine.port) + " before its release");
  };
  check_port();
  if (m_standby && m_standby->phase == Phase::kParked) s.port_timer.start(kPortCheckEveryS, check_port, kPortCheckEveryS);
}

void Supervisor::note_standby_failure(const std::string& what) {
  Standby& s = *m_standby;
  if (s.streak.fail(m_loop.now_s(), s.parked_at, what, m_cfg, m_flags)) spdlog::error("standby: disabled: {}", s.streak.disabled());
}

void Supervisor::retry_standby_later() {
  Standby& s = *m_standby;
  s.phase = Phase::kBackoff;
  spdlog::info("standby: starting another in {:.2f} s ({} failure(s) in a row of standby.max_failures {})", s.streak.backoff_s(),
               s.streak.in_row(), m_cfg.standby.max_failures);
  s.backoff_timer.start(s.streak.backoff_s(), [this] {
    if (!m_standby || m_standby->phase != Phase::kBackoff) return;
    m_standby->phase = Phase::kOff;
    maybe_spawn_standby();
  });
}

void Supervisor::standby_failed(const std::string& reason, const std::string& detail) {
  Standby& s = *m_standby;
  s.failures[reason]++;
  s.last_failure = detail;
  spdlog::error("standby{}: {}", s.proc ? " pid " + std::to_string(s.proc->pid) : std::string(), detail);
  note_standby_failure(detail);
  s.park_timer.stop();
  s.port_timer.stop();
  if (standby_alive()) {
    s.phase = Phase::kStopping;
    s.stop_reason = "failed: " + reason;
    signal_group(s.proc->pid, s.proc->pidfd.get(), SIGKILL);  // it misbehaved: no grace
    return;
  }
  s.proc.reset();
  s.gate_reader.reset();
  s.gate.reset();
  if (!s.streak.disabled().empty()) {
    s.phase = Phase::kDisabled;
    return;
  }
  retry_standby_later();
}

void Supervisor::discard_standby(const std::string& why) {
  if (!m_standby) return;
  Standby& s = *m_standby;
  if (s.phase == Phase::kBackoff) {
    s.backoff_timer.stop();
    s.phase = Phase::kOff;
  }
  if (!standby_alive() || s.phase == Phase::kStopping) return;
  spdlog::info("standby: stopping pid {}: {}", s.proc->pid, why);
  if (s.gate) (void)!::send(s.gate.get(), gate_exit_line().data(), gate_exit_line().size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  s.phase = Phase::kStopping;
  s.stop_reason = why;
  s.port_timer.stop();
  signal_group(s.proc->pid, s.proc->pidfd.get(), SIGTERM);
  const pid_t pgid = s.proc->pid;
  s.park_timer.start(kStandbyStopGraceS, [pgid] {
    if (group_alive(pgid)) signal_group(pgid, -1, SIGKILL);
  });
}

void Supervisor::on_standby_exit(int status) {
  Standby& s = *m_standby;
  Engine& e = *s.proc;
  if (e.reader) e.reader->drain();  // its last lines may still be in the pipe: they classify the exit
  e.exited = true;
  s.park_timer.stop();
  s.port_timer.stop();
  s.gate_reader.reset();
  s.gate.reset();
  ExitFacts f;
  f.wait_status = status;
  f.requested = s.phase == Phase::kStopping;
  f.last_lines = &e.tail;
  f.rules = m_output_rules.empty() ? nullptr : &m_output_rules;
  Classification c = classify_exit(f);
  if (m_listen_fd >= 0 && is_failure(c.cause))
    if (auto conflict = listen_conflict_detail(&e.tail, m_cfg.engine.port)) c.detail = *conflict;
  const bool was_parked = s.phase == Phase::kParked;
  const bool stopped = s.phase == Phase::kStopping;
  const bool failed_kill = stopped && s.stop_reason.starts_with("failed:");
  const pid_t pgid = e.pid;
  ::unlink(state_path(m_cfg, "standby.pgid").c_str());
  // Its workers go with it: a standby's group never outlives it.
  if (group_alive(pgid)) signal_group(pgid, -1, SIGKILL);
  s.proc.reset();
  if (stopped) {
    spdlog::info("standby pid {} stopped ({}: {})", pgid, s.stop_reason, c.detail);
    // Discarded (new flags, config, daemons, model) is no failure, but ends the streak if it proved itself.
    if (!failed_kill) s.streak.end_of_parked(s.parked_at, m_loop.now_s(), m_cfg);
  } else {
    s.failures["died"]++;
    s.last_failure = std::string(was_parked ? "died while parked: " : "died before parking: ") + exit_cause_name(c.cause) +
                     " (" + c.detail + ")";
    spdlog::error("standby pid {} {}", pgid, s.last_failure);
    note_standby_failure(s.last_failure);
  }
  if (m_stop_daemons_after_standby) {
    m_stop_daemons_after_standby = false;
    s.phase = s.streak.disabled().empty() ? Phase::kOff : Phase::kDisabled;
    stop_daemons();
    return;
  }
  if (!s.streak.disabled().empty()) {
    s.phase = Phase::kDisabled;
    return;
  }
  if (stopped && !failed_kill) {
    s.phase = Phase::kOff;
    maybe_spawn_standby();  // discarded for new flags or daemons: its successor, if an engine serves
    return;
  }
  retry_standby_later();
}

std::optional<StartRefusal> Supervisor::standby_refusal() const {
  if (!m_standby) return StartRefusal{"not_parked", "no standby was started yet (one starts once an engine is ready)"};
  const Standby& s = *m_standby;
  switch (s.phase) {
    case Phase::kOff: return StartRefusal{"not_parked", "no standby is running"};
    case Phase::kStarting:
      return StartRefusal{"not_parked", "the standby (pid " + std::to_string(s.proc ? s.proc->pid : 0) + ") has not parked yet"};
    case Phase::kStopping: return StartRefusal{"not_parked", "the standby is being stopped (" + s.stop_reason + ")"};
    case Phase::kBackoff: return StartRefusal{"not_parked", "the standby is being started again after: " + s.last_failure};
    case Phase::kDisabled: return StartRefusal{"unavailable", s.streak.disabled()};
    case Phase::kParked: break;
  }
  if (!standby_alive()) return StartRefusal{"not_parked", "the standby is gone"};
  if (auto stale = standby_stale(); !stale.empty()) return StartRefusal{"unavailable", stale};
  if (m_cfg.standby.level == StandbyLevel::kWarmed && s.daemon_generation != m_daemon_generation)
    return StartRefusal{"unavailable", "the weight daemons were reloaded since the standby attached to them"};
  return std::nullopt;
}

Status Supervisor::release_standby() {
  Standby& s = *m_standby;
  const std::string line = gate_release_line();
  if (::send(s.gate.get(), line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(line.size())) {
    const std::string why = std::string("the standby's gate did not take the release: ") + std::strerror(errno);
    standby_failed("release", why);
    return make_error(Errc::kIo, why);
  }
  const double now = m_loop.now_s();
  s.port_timer.stop();
  s.gate_reader.reset();
  s.gate.reset();
  s.releases++;
  s.released_at = now;
  s.streak.reset(m_cfg.restart);  // it became the engine: the standby path works
  s.released_after_death_s = m_last_exit.contains("died_at_s") ? now - m_last_exit["died_at_s"].get<double>() : -1;
  s.phase = Phase::kOff;
  s.release_to_ready_s.reset();
  s.death_to_ready_s.reset();
  m_engine = std::move(s.proc);
  Engine& e = *m_engine;
  e.spawned_at = now;  // time to ready counts from the release
  e.standby_level = standby_level_name(m_cfg.standby.level);
  e.oom_before = m_oom.read();
  // Its output is the engine's from now on.
  read_child_output(m_loop, std::move(e.output), "engine", engine_line_handler(&e), e);
  ::unlink(state_path(m_cfg, "standby.pgid").c_str());
  if (auto st = write_private_file(state_path(m_cfg, "engine.pgid"), engine_group_record(e.pid)); !st.ok())
    spdlog::warn("could not record the engine's process group: {}", st.error().message);
  // m_baseline_used (the leak check's "used before the engine") stays what it was before the engine that
  // died: used memory now includes that engine's, still being freed (a release does not wait for it), and
  // this one's own context (warmed).
  spdlog::info("standby: released pid {} at {}{}", e.pid, e.standby_level,
               s.released_after_death_s >= 0 ? fmt::format(", {:.3f} s after the engine's death", s.released_after_death_s) : std::string());
  set_status("Starting the engine (standby released at " + e.standby_level + ")");
  arm_readiness(true);
  return {};
}

void Supervisor::standby_after_ready(double since_release) {
  if (!m_standby || !m_engine || m_engine->standby_level.empty()) return;
  Standby& s = *m_standby;
  s.release_to_ready_s = since_release;
  if (s.released_after_death_s >= 0) s.death_to_ready_s = s.released_after_death_s + since_release;
}

std::optional<status::StandbyStatus> Supervisor::standby_status() const {
  if (!standby_wanted()) return std::nullopt;
  status::StandbyStatus st;
  st.level = standby_level_name(m_cfg.standby.level);
  for (const auto& gpu : m_cfg.gpus) st.reserve_bytes += standby_reserve_bytes(gpu);  // per GPU: status.memory[]
  if (!m_standby) {
    st.state = "off";
    return st;
  }
  const Standby& s = *m_standby;
  st.state = phase_name(s.phase);
  if (s.proc && !s.proc->exited) {
    st.pid = s.proc->pid;
    st.age_s = m_loop.now_s() - s.proc->spawned_at;
  }
  st.gpu_bytes = s.phase == Phase::kParked ? s.gpu_bytes : 0;
  st.spawns = s.spawns;
  st.releases = s.releases;
  st.failures = s.failures;
  st.disabled = s.streak.disabled();
  st.last_failure = s.last_failure;
  st.failures_in_row = s.streak.in_row();
  st.backoff_s = s.phase == Phase::kBackoff ? s.streak.backoff_s() : 0;
  if (s.releases > 0 && s.released_after_death_s >= 0) st.death_to_release_s = s.released_after_death_s;
  st.release_to_ready_s = s.release_to_ready_s;
  st.death_to_ready_s = s.death_to_ready_s;
  return st;
}

}  // namespace fr::supervisor

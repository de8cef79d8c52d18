// The standby's life (docs/standby.md): its spawn behind a ready engine, the gate's lines, the park and the
// port check while parked, its failures (counted in the streak, a successor after a backoff). Its end (a
// discard, its exit): standby_exit.cc; the release, refusal and status: standby_release.cc; its memory:
// standby_memory.cc.
#include "supervisor/standby/standby.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <spdlog/spdlog.h>

#include "common/control_chars.h"
#include "supervisor/child.h"
#include "supervisor/engine_group_record.h"
#include "supervisor/gpu_leftover.h"
#include "supervisor/listen_socket.h"
#include "supervisor/private_endpoint.h"
#include "supervisor/standby/gate_message.h"
#include "supervisor/standby/model_files.h"
#include "supervisor/port_owner.h"
#include "supervisor/standby/stale.h"
#include "supervisor/state_files.h"

namespace fr::supervisor {

namespace {

constexpr double kPortCheckEveryS = 1;     // while parked: has it bound the engine's port?
constexpr uint64_t kStandbyMiB = 1048576;
constexpr size_t kStandbyTailLines = 200;

}  // namespace

Standby::Standby(StandbyHost& host, const PartBasics& basics, GpuProbe& gpus)
    : m_host(host),
      m_loop(basics.loop),
      m_cfg(basics.config),
      m_listen(basics.listen),
      m_gpus(gpus),
      m_streak(basics.config.restart),
      m_park_timer(basics.loop),
      m_backoff_timer(basics.loop),
      m_port_timer(basics.loop) {}

Standby::~Standby() = default;

bool Standby::wanted() const {
  const auto& s = m_cfg.restart.start;
  return std::find(s.begin(), s.end(), StartPath::kStandby) != s.end();
}

bool Standby::alive() const { return m_proc && !m_proc->exited; }

void Standby::add_known_pids(std::set<pid_t>& known) const {
  if (alive()) known.insert(m_proc->pid);
}

std::map<std::string, FileIdentity> Standby::model_files() const {
  // The identities of the files under weights.checkpoint, else under the engine kind's local model path.
  std::vector<std::string> roots = m_cfg.weights.checkpoint;
  if (roots.empty())
    if (std::string m = m_host.engine_kind().local_model_path(m_host.engine_flags()); !m.empty()) roots.push_back(std::move(m));
  return identify_model_files(fr::supervisor::model_files(roots));
}

std::string Standby::stale() const {
  if (!m_created) return {};
  return standby_stale_reason(m_flags, m_launch, m_checkpoint, m_host.engine_flags(), m_cfg,
                              [this] { return model_files(); });
}

void Standby::maybe_spawn() {
  if (!wanted() || !m_host.engine_steady()) return;
  m_created = true;
  switch (m_phase) {
    case Phase::kDisabled:
      if (m_streak.disabled_flags() == m_host.engine_flags()) return;
      spdlog::info("standby: the flags changed since it was disabled; trying again");
      m_streak.enable(m_cfg.restart);
      break;
    case Phase::kStopping:
    case Phase::kBackoff:
      return;  // its exit, or the backoff, comes back here
    case Phase::kStarting:
    case Phase::kParked: {
      const std::string why = stale();
      if (why.empty() && m_daemon_generation == m_host.daemon_generation()) return;
      discard(!why.empty() ? why : "the weight daemons were reloaded");
      return;  // its exit starts the next one
    }
    case Phase::kOff: break;
  }
  spawn();
}

void Standby::spawn() {
  const Config& cfg = m_cfg;
  m_phase = Phase::kOff;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    failed("spawn", std::string("socketpair: ") + std::strerror(errno));
    return;
  }
  UniqueFd ours(sv[0]), theirs(sv[1]);
  // Descriptors 3 and 4 are the listening socket's and the private endpoint's in the child
  // (SpawnSpec::listen_fd, probe_fd): the gate goes elsewhere.
  if (m_listen.fd >= 0 && (theirs.get() == 3 || theirs.get() == 4)) theirs.reset(::fcntl(theirs.get(), F_DUPFD_CLOEXEC, 5));
  if (!theirs) {
    failed("spawn", std::string("moving the gate socket off descriptor 3: ") + std::strerror(errno));
    return;
  }
  ::fcntl(ours.get(), F_SETFL, O_NONBLOCK);
  std::unique_ptr<Engine> e = m_host.new_engine_record();
  // The listening socket is held without accepting until the release (docs/listen-socket.md).
  SpawnSpec spec = engine_spawn_spec(cfg, m_host.engine_command(/*for_standby=*/true), m_listen.fd);
  spec.env["FASTRESTART_STANDBY_FD"] = std::to_string(theirs.get());
  spec.env["FASTRESTART_STANDBY_LEVEL"] = standby_level_name(cfg.standby.level);
  spec.pass_fd = theirs.get();
  e->in_pid_ns = spec.new_pid_namespace;
  UniqueFd endpoint = prepare_private_endpoint(cfg, spec, *e);  // the standby's own: its checks after the release
  e->spawned_at = m_loop.now_s();
  e->attach_since_unix = static_cast<double>(std::time(nullptr));
  m_used_before.clear();
  if (cfg.weights.backend != "host") m_used_before = gpus_used_now(m_gpus, cfg.gpus);
  Engine* raw = e.get();
  if (const std::string refused = m_host.engine_share_refusal(); !refused.empty()) {
    failed("spawn", "not started: " + refused);
    return;
  }
  auto st = spawn_supervised(m_loop, spec, "standby", [raw](const std::string& l) {
    raw->tail.push_back(l);
    if (raw->tail.size() > kStandbyTailLines) raw->tail.pop_front();
    raw->report->observe(l);
  }, *e);
  theirs.reset();  // the child holds it now (or nobody does)
  endpoint.reset();
  if (!st.ok()) {
    failed("spawn", st.error().message);
    return;
  }
  m_proc = std::move(e);
  m_gate = std::move(ours);
  m_gate_reader = std::make_unique<LineReader>(
      m_loop, m_gate.get(), [this](const std::string& l) { on_gate_line(l); }, [this] { on_gate_closed(); });
  m_phase = Phase::kStarting;
  m_flags = m_host.engine_flags();
  m_daemon_generation = m_host.daemon_generation();
  m_checkpoint = model_files();
  m_launch = standby_launch_config(cfg);
  m_gpu_bytes = 0;
  m_parked_at = 0;
  m_spawns++;
  const double timeout = cfg.standby.park_timeout_s;
  m_park_timer.start(timeout, [this, timeout] {
    failed("never_parked", "did not park within " + std::to_string(static_cast<int>(timeout)) +
                               " s (standby.park_timeout_s): does the engine speak the gate protocol (docs/standby.md)?");
  });
  if (auto w = write_private_file(state_path(cfg, "standby.pgid"), engine_group_record(m_proc->pid)); !w.ok())
    spdlog::warn("could not record the standby's process group: {}", w.error().message);
  spdlog::info("standby: started pid {} to park at {}", m_proc->pid, standby_level_name(cfg.standby.level));
}

// A standby that closes its gate without parking is not waiting, and one that closes it while parked can
// no longer be released; one that dies closes it too, so give its exit a moment to be reaped before
// calling it a protocol failure. (While parked the port check runs on m_port_timer.)
void Standby::on_gate_closed() {
  if (m_phase != Phase::kStarting && m_phase != Phase::kParked) return;
  const Phase phase = m_phase;
  const pid_t pid = m_proc ? m_proc->pid : -1;
  Timer& grace = phase == Phase::kParked ? m_park_timer : m_port_timer;
  grace.start(0.5, [this, pid, phase] {
    if (m_phase == phase && m_proc && m_proc->pid == pid)
      failed("protocol", phase == Phase::kParked ? "closed its end of the gate socket while parked: it can no longer be released"
                                                 : "closed its end of the gate socket without parking");
  });
}

void Standby::on_gate_line(const std::string& line) {
  if (!m_proc) return;
  if (m_phase != Phase::kStarting) {
    if (m_phase == Phase::kParked) failed("protocol", "wrote to its gate after parking: '" + escape_control_chars(line.substr(0, 200)) + "'");
    return;
  }
  auto m = parse_gate_message(line);
  if (!m.ok()) {
    failed("protocol", m.error().message);
    return;
  }
  const std::string want = standby_level_name(m_cfg.standby.level);
  if (m->level != want) {
    failed("protocol", "parked at " + m->level + ", but standby.level is " + want);
    return;
  }
  // The pid it reports must be of its own group (in its own PID namespace it sees other numbers).
  if (!m_proc->in_pid_ns && m->pid != m_proc->pid && ::getpgid(m->pid) != m_proc->pid) {
    failed("protocol", "reported pid " + std::to_string(m->pid) + ", which is not in its process group " +
                           std::to_string(m_proc->pid));
    return;
  }
  on_parked();
}

void Standby::on_parked() {
  const Config& cfg = m_cfg;
  m_park_timer.stop();
  m_phase = Phase::kParked;
  m_parked_at = m_loop.now_s();  // the failure streak is not over yet: it may die parked (see note_failure)
  measure_memory(/*at_park=*/true);      // at every park: its reserve follows the flags it was started on
  spdlog::info("standby: pid {} parked at {} after {:.2f} s, {} MiB of GPU memory", m_proc->pid,
               standby_level_name(cfg.standby.level), m_parked_at - m_proc->spawned_at, m_gpu_bytes / kStandbyMiB);
  auto check_port = [this] {
    if (m_phase != Phase::kParked || !m_proc) return;
    const auto port = engine_serve_port(m_cfg);
    if (pid_t p = group_listener(m_proc->pid, port, m_listen.inode))
      failed("listening", "pid " + std::to_string(p) + " listens on the engine's port " + std::to_string(port) +
                              " before its release");
  };
  check_port();
  if (m_phase == Phase::kParked) m_port_timer.start(kPortCheckEveryS, check_port, kPortCheckEveryS);
}

void Standby::note_failure(const std::string& what) {
  if (m_streak.fail(m_loop.now_s(), m_parked_at, what, m_cfg, m_host.engine_flags()))
    spdlog::error("standby: disabled: {}", m_streak.disabled());
}

void Standby::retry_later() {
  m_phase = Phase::kBackoff;
  spdlog::info("standby: starting another in {:.2f} s ({} failure(s) in a row of standby.max_failures {})", m_streak.backoff_s(),
               m_streak.in_row(), m_cfg.standby.max_failures);
  m_backoff_timer.start(m_streak.backoff_s(), [this] {
    if (m_phase != Phase::kBackoff) return;
    m_phase = Phase::kOff;
    maybe_spawn();
  });
}

void Standby::failed(const std::string& reason, const std::string& detail) {
  m_failures[reason]++;
  m_last_failure = detail;
  spdlog::error("standby{}: {}", m_proc ? " pid " + std::to_string(m_proc->pid) : std::string(), detail);
  note_failure(detail);
  m_park_timer.stop();
  m_port_timer.stop();
  if (alive()) {
    m_phase = Phase::kStopping;
    m_stop_reason = "failed: " + reason;
    signal_group(m_proc->pid, m_proc->pidfd.get(), SIGKILL);  // it misbehaved: no grace
    return;
  }
  m_proc.reset();
  m_gate_reader.reset();
  m_gate.reset();
  if (!m_streak.disabled().empty()) {
    m_phase = Phase::kDisabled;
    return;
  }
  retry_later();
}

}  // namespace fr::supervisor

#include "supervisor/supervisor.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <spdlog/spdlog.h>

#include "common/control_chars.h"
#include "common/io.h"
#include "common/private_dir.h"
#include "supervisor/attach_path.h"
#include "supervisor/child.h"
#include "supervisor/engine_group_record.h"
#include "supervisor/engine_launch.h"
#include "supervisor/engine_progress.h"
#include "supervisor/engine_rows.h"
#include "supervisor/flags.h"
#include "supervisor/gpu_leftover.h"
#include "supervisor/kv_stats.h"
#include "supervisor/listen_socket.h"
#include "supervisor/private_endpoint.h"
#include "supervisor/readiness.h"
#include "supervisor/redaction.h"
#include "supervisor/state_files.h"
#include "supervisor/start/walk.h"
#include "supervisor/supervised_child.h"

namespace fr::supervisor {

using nlohmann::json;

namespace {

constexpr size_t kTailLines = 200;
constexpr double kExtendEveryS = 10;  // EXTEND_TIMEOUT_USEC cadence while the first engine starts

std::string fmt_s(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f s", s);
  return b;
}

}  // namespace

Supervisor::Supervisor(Config config, std::unique_ptr<GpuProbe> gpus, std::unique_ptr<Notifier> notifier)
    : m_cfg(std::move(config)),
      m_gpus(std::move(gpus)),
      m_notify(make_scrubbing_notifier(std::move(notifier))),
      m_policy(m_cfg.restart),
      m_oom(m_cfg.engine.cgroup),
      m_reload(state_path(m_cfg, "flags.json"), m_cfg.engine.flags),
      m_backoff_timer(m_loop),
      m_watchdog_timer(m_loop),
      m_end(m_loop, m_cfg, *m_gpus, *this) {
  register_secrets(m_cfg.engine);  // before anything logs or reports (docs/reliability.md, "Secrets")
  // The config's check read the kind's rules files already; one that broke since leaves the built-in rules.
  auto kind = make_engine_adapter(m_cfg);
  m_kind = kind.ok() ? std::move(*kind) : make_builtin_engine_adapter(m_cfg.engine.kind);
  m_daemons = make_daemon_set(*this);
  const PartHosts hosts{*this, *this, *this, {m_loop, m_cfg, m_listen}, *m_gpus, m_stats};
  for (const StartPathRow& row : start_path_rows())
    if (auto p = row.make(hosts)) m_parts.push_back(std::move(p));
  m_snapshots = static_cast<Snapshots*>(part(StartPath::kSnapshot));
  m_standby = static_cast<Standby*>(part(StartPath::kStandby));
  register_secret_words(m_reload.flags().words(), m_cfg.engine.secret_flags);  // flags.json's
}

Supervisor::~Supervisor() = default;

Part* Supervisor::part(StartPath path) const {
  for (const auto& p : m_parts)
    if (p->path() == path) return p.get();
  return nullptr;
}

// ---------------------------------------------------------------------------------------------------
// The table driver

void Supervisor::raise(Event e) {
  auto t = transition(m_state, e);
  if (!t) {
    spdlog::debug("event {} ignored in state {}", event_name(e), state_name(m_state));
    return;
  }
  spdlog::debug("{} --{}--> {}", state_name(m_state), event_name(e), state_name(t->next));
  m_state = t->next;
  for (Action a : t->actions) perform(a);
}

void Supervisor::perform(Action a) {
  switch (a) {
    case Action::kStartDaemons: start_daemons(); break;
    case Action::kReloadDaemons:
      set_status("Reloading the weight daemons (cold)");
      m_daemons->expect_fresh();
      stop_daemons();  // start_daemons() follows once they are gone (kDaemonsStopped in loading)
      break;
    case Action::kStartEngine: start_engine(); break;
    case Action::kStopEngine: stop_engine(false); break;
    case Action::kKillEngine: stop_engine(true); break;
    case Action::kClassifyExit: break;  // done in on_engine_exit, which has the facts
    case Action::kWaitDrain: wait_drain(); break;
    case Action::kCancelBackoff: m_backoff_timer.stop(); break;
    case Action::kNotifyHeld:
      m_standby->discard("the engine is held");
      set_status("Engine stopped by the operator (fastrestartctl start-engine to start it)");
      break;
    case Action::kScheduleBackoff: {
      // The backoff spaces out failing starts; a parked standby's start was paid for while the engine
      // served, and none is started again before an engine is ready, so it goes at once (docs/standby.md).
      double b = m_standby->refusal() ? m_policy.backoff_s() : 0.0;
      if (b > 0) set_status("Restarting in " + fmt_s(b) + " (after " + (m_last_exit ? m_last_exit->cause : "exit") + ")");
      m_backoff_timer.start(b, [this] { raise(Event::kBackoffElapsed); });
      break;
    }
    case Action::kNotifyReady: decide_path_after_ready(); break;
    case Action::kNotifyStopping:
      m_notify->notify("STOPPING=1\nSTATUS=Stopping: engine first, then the weight daemons");
      spdlog::info("stopping: engine first, then the weight daemons");
      m_standby->discard("fastrestartd is stopping");
      break;
    case Action::kNotifyFailed:
      m_exit_code = kExitCrashLoop;
      set_status("Failed: " + m_failure);
      spdlog::error("giving up: {}", m_failure);
      break;
    case Action::kStopDaemons: stop_daemons(); break;
    case Action::kExit: m_loop.stop(); break;
  }
}

// EngineWatchHost: its events go through the table.
Engine* Supervisor::watched_engine() { return m_engine.get(); }
void Supervisor::readiness_passed() { raise(Event::kEngineReady); }
void Supervisor::start_timed_out() { raise(Event::kStartTimeout); }
void Supervisor::engine_hung() { raise(Event::kHung); }

// Before the first READY=1 systemd's start timeout runs: while the engine is alive and within
// startup_timeout_s it is making its way (loading, compiling), so keep extending (ARCHITECTURE.md,
// "Readiness is a real request").
void Supervisor::still_starting() {
  if (m_ever_ready || m_loop.now_s() - m_last_extend < kExtendEveryS) return;
  m_last_extend = m_loop.now_s();
  m_notify->notify("EXTEND_TIMEOUT_USEC=" + std::to_string(static_cast<uint64_t>(kExtendEveryS * 3e6)));
}

void Supervisor::set_status(const std::string& s, const std::string& extra) {
  m_status_text = s;
  spdlog::info("status: {}", s);
  m_notify->notify(extra + "STATUS=" + s);
}

// ---------------------------------------------------------------------------------------------------
// Run

sigset_t handled_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, s);
  return set;
}

void block_handled_signals() {
  const sigset_t set = handled_signals();
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int Supervisor::run() {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphaned engine workers come back to us, not to PID 1
  m_started_at = m_loop.now_s();
  m_signals.push_back(std::make_unique<Signal>(m_loop, SIGCHLD, [this] { reap(); }));
  m_signals.push_back(std::make_unique<Signal>(m_loop, SIGTERM, [this] { on_stop_signal(); }));
  m_signals.push_back(std::make_unique<Signal>(m_loop, SIGINT, [this] { on_stop_signal(); }));
  m_signals.push_back(std::make_unique<Signal>(m_loop, SIGHUP, [this] { on_sighup(); }));
  const sigset_t handled = handled_signals();
  ::pthread_sigmask(SIG_UNBLOCK, &handled, nullptr);  // held since main (block_handled_signals): delivered now
  uint64_t wd_usec = 0;
  if (sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec > 0) {
    double every = static_cast<double>(wd_usec) / 2e6;
    m_watchdog_timer.start(every, [this] { m_notify->notify("WATCHDOG=1"); }, every);
  }
  spdlog::info("fastrestartd {} serving '{}' from {}", FASTRESTART_VERSION, m_cfg.name, m_cfg.path);
  m_snapshots->init();
  kill_left_engine_groups(m_cfg);
  // The front answers the port from here on: requests wait in it for the first engine (up to front.hold_s).
  if (m_front) m_front->start();
  start_daemons();  // m_state starts as kLoading
  m_running = true;
  m_loop.run();
  m_running = false;
  m_reload.close();
  // Close every handle we own before the loop goes away.
  m_signals.clear();
  // A front still running here (fastrestartd gave up: crash loop) is asked to finish what it holds, then killed.
  if (m_front) m_front->stop_blocking();
  for (auto& p : m_parts) p->close();
  m_engine.reset();
  m_daemons->close();
  m_watch.stop();
  for (Timer* t : {&m_backoff_timer, &m_watchdog_timer}) t->stop();
  m_end.stop();
  spdlog::info("fastrestartd exiting with code {}", m_exit_code);
  return m_exit_code;
}

void Supervisor::use_front_socket(int fd, uint16_t upstream_port) {
  m_cfg.front.bound_upstream_port = upstream_port;
  m_front = std::make_unique<FrontProcess>(m_loop, m_cfg, fd, state_path(m_cfg, "front.status.json"));
}

void Supervisor::on_stop_signal() {
  if (m_front && m_front->pid() > 0 && !m_front->stopping()) {
    m_notify->notify("STOPPING=1\nSTATUS=Stopping: the front drains, then the engine, then the weight daemons");
    m_front->stop([this] { raise(Event::kStopRequested); });
    return;
  }
  if (m_front) {
    if (m_front->pid() > 0) {
      spdlog::warn("a second stop signal: the front's drain ends now (SIGKILL)");
      m_front->kill_now();
    } else {
      m_front->stop(nullptr);  // none runs (between two fronts): none is started again
    }
  }
  raise(Event::kStopRequested);
}

void Supervisor::reap() {
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    if (m_engine && pid == m_engine->pid && !m_engine->exited) {
      on_engine_exit(status);
      continue;
    }
    if (m_front && m_front->on_exit(pid, status)) continue;
    if (m_daemons->on_exit(pid, status)) continue;
    if (std::any_of(m_parts.begin(), m_parts.end(), [&](auto& p) { return p->on_exit(pid, status); })) continue;
    m_snapshots->keep_exit(pid, status);  // perhaps a restored engine its helper has not named yet
    spdlog::debug("reaped orphan pid {}", pid);
  }
}

// ---------------------------------------------------------------------------------------------------
// Weight daemons: the set does the kind's work (daemons/daemon_set.h); the standby's order is ours.

void Supervisor::start_daemons() {
  ++m_daemon_generation;
  m_daemons->start();
}

void Supervisor::stop_daemons() {
  // The standby's group goes before the daemons, like the engine's (a warmed one maps their weights).
  if (m_standby->stop_before_daemons("the weight daemons are stopping")) return;  // standby_gone comes back here
  m_daemons->stop();
}

// ---------------------------------------------------------------------------------------------------
// Engine

EngineLaunch Supervisor::launch() const {
  return {m_cfg, m_reload.flags(), *m_kind, *m_gpus, m_daemons->preload_use(), m_daemons->loader_protocol(), gpu_shares()};
}

EngineCommand Supervisor::engine_command(bool for_standby) {
  const EngineLaunch in = launch();
  EngineCommand c{engine_launch_argv(in, for_standby), engine_launch_env(in, for_standby), m_snapshots->wanted()};
  m_snapshots->add_engine_env(c.env);
  c.env[kKvStatsEnv] = state_path(m_cfg, kKvStatsFileName);  // docs/kv-survival.md, "In fastrestartd's status"
  return c;
}

void Supervisor::start_engine() {
  m_backoff_timer.stop();
  if (m_snapshots->creating()) {
    // The dump ended the engine; the next start restores the artifact the dump is writing
    // (kSnapshotCreated walks the paths again).
    m_attempts.wait_first(StartPath::kSnapshot, {"snapshot_create", "waiting for the snapshot being created"});
    set_status("Waiting for the snapshot being created");
    return;
  }
  // A walk that waited for fresh daemons goes on with what it recorded before the reload.
  if (!m_attempts.waiting("reloading_daemons") && !m_attempts.waiting("snapshot_create")) m_attempts.clear();
  walk_start_paths(0);
  // A standby on flags the engine no longer runs (or a checkpoint that changed) is of no use: its successor
  // starts once this engine is ready.
  if (m_standby->alive())
    if (auto stale = m_standby->stale(); !stale.empty()) m_standby->discard(stale);
}

bool Supervisor::engine_serving() const {
  return m_engine && !m_engine->exited && !m_engine->path.empty() && !m_engine->stop_requested;
}

std::optional<StartPath> Supervisor::requested_start_path() const {
  if (!m_snapshots->requested()) return std::nullopt;
  const auto& order = m_cfg.restart.start;
  if (std::find(order.begin(), order.end(), StartPath::kSnapshot) == order.end()) return std::nullopt;
  return StartPath::kSnapshot;
}

// Asks each path of restart.start, from `from` on, whether it can serve, and starts the first that can. A
// walk from the top begins at the path an explicit request asked for (start/walk.h).
void Supervisor::walk_start_paths(size_t from) {
  const auto& order = m_cfg.restart.start;
  const std::optional<StartPath> requested = from == 0 ? requested_start_path() : std::nullopt;
  if (requested) {
    const WalkBegin b = walk_begin(order, requested);
    for (StartPath p : b.skipped) m_attempts.record(p, "skipped", requested_refusal(*requested));
    from = b.first;
  }
  for (size_t i = from; i < order.size(); ++i) {
    const StartPathImpl& path = start_path(order[i]);
    if (auto why = path.refusal(*this)) {
      m_attempts.record(order[i], "skipped", *why);
      if (requested && order[i] == *requested) {
        // The request cannot be served now: it does not stay pending for some later, unrelated start.
        spdlog::warn("the requested start path {} cannot serve this start ({}); dropping the request", start_path_name(*requested),
                     why->detail);
        m_snapshots->drop_request();
      }
      continue;
    }
    m_start_index = i;
    auto r = path.start(*this);
    if (!r.ok()) {
      m_attempts.record(order[i], "failed", {"failed", r.error().message});
      continue;
    }
    if (*r == StartOutcome::kWaiting) {
      m_attempts.record(order[i], "waiting", {"reloading_daemons", "reloading the weight daemons first"});
      return;
    }
    m_attempts.record(order[i], "started", {});
    return;
  }
  // No listed path could serve: the engine can still load from disk, so start it rather than not at all.
  spdlog::error("no start path of restart.start could serve ({}); starting the engine as configured", m_attempts.text());
  m_start_index = order.size();
  if (auto st = spawn_engine(StartPath::kCold); !st.ok()) spdlog::error("engine: {}", st.error().message);
}

std::optional<StartRefusal> Supervisor::daemons_refusal() const { return m_daemons->refusal(); }

bool Supervisor::daemons_hold_old_weights() const { return m_daemons->holds_old_weights(); }

void Supervisor::reload_daemons_for_start() { m_loop.post([this] { raise(Event::kFreshDaemonsNeeded); }); }

Status Supervisor::spawn_engine(StartPath expected) {
  m_engine = new_engine_record();
  Engine& e = *m_engine;
  e.warm_expected = expected == StartPath::kWarm;
  // The command first: engine_spawned() counts this start, and vllm preload's command (strict or with a
  // fallback) depends on the count before it.
  SpawnSpec spec = engine_spawn_spec(m_cfg, engine_command(), m_listen.fd);
  e.strict = m_daemons->engine_spawned();  // counted by the set (vllm preload: the first start is strict)
  e.in_pid_ns = spec.new_pid_namespace;
  // Closed when this function returns: from then on the engine alone holds its private endpoint.
  const UniqueFd endpoint = prepare_private_endpoint(m_cfg, spec, e);
  e.oom_before = m_oom.read();
  e.spawned_at = m_loop.now_s();
  e.attach_since_unix = static_cast<double>(std::time(nullptr));
  m_end.note_engine_spawn();
  const std::string skipped = m_attempts.text();
  set_status(std::string("Starting the engine (") + (e.warm_expected ? "warm" : "cold") + ")" +
             (skipped.empty() ? "" : "; " + skipped));
  spdlog::info("engine: {}", words_for_log(spec.argv));
  // A share under memory.min_share would start an engine that cannot fit (or a negative fraction): refused,
  // with the figures, as a start that failed (docs/supervisor.md, "Memory").
  const std::string refused = engine_share_refusal();
  auto s = refused.empty() ? spawn_supervised(m_loop, spec, "engine", engine_line_handler(&e), e)
                           : Status(make_error(Errc::kInvalidArgument, "not started: " + refused));
  if (!s.ok()) {
    spdlog::error("engine: {}", s.error().message);
    e.exited = true;
    e.status = 127 << 8;
    e.died_at = m_loop.now_s();
    m_last_exit = unrun_exit_row("crash", s.error().message);
    m_stats.restart("crash");
    // Through the table like any other exit (the process never ran: there is nothing to classify).
    m_loop.post([this] { raise(Event::kEngineExited); });
    return {};
  }
  // If fastrestartd dies, the next one kills what is left of this group (kill_recorded_group).
  if (auto st = write_private_file(state_path(m_cfg, "engine.pgid"), engine_group_record(e.pid)); !st.ok())
    spdlog::warn("could not record the engine's process group: {}", st.error().message);
  m_watch.arm(true);
  return {};
}

LineHandler Supervisor::engine_line_handler(Engine* raw) {
  return [this, raw](const std::string& l) {
    raw->tail.push_back(l);
    if (raw->tail.size() > kTailLines) raw->tail.pop_front();
    raw->report->observe(l);
    // The engine's own load progress (engine_progress.h) into status and STATUS= while it starts.
    auto progress = parse_engine_progress(l);
    if (!progress) progress = m_kind->progress(l);  // the kind's own lines (vLLM: data/vllm.toml)
    if (progress && m_state == State::kStarting)
      set_status(std::string("Starting the engine (") + (raw->warm_expected ? "warm" : "cold") + "): " + progress->text());
    observe_arena_line(*raw, l);
    observe_kv_line(raw->pid, l);
  };
}

void Supervisor::decide_path_after_ready() {
  m_watch.stop_deadline();
  Engine& e = *m_engine;
  const double ready_at = m_loop.now_s();
  const double since_spawn = ready_at - e.spawned_at;
  const std::optional<double> died = engine_died_at();
  const double since_death = died ? ready_at - *died : since_spawn;
  auto finish = [this, ready_at, since_spawn, since_death](std::string path) {
    if (!m_engine) return;
    m_engine->path = path;
    m_ever_ready = true;
    m_daemons->engine_ready();
    m_policy.on_ready(m_loop.now_s());
    m_stats.ready(path, since_spawn);
    // ready_at_s is on the clock of last_exit.died_at_s (CLOCK_MONOTONIC): a benchmark on the same machine
    // times a restart from its own kill(2) with it (docs/benchmarks.md, "How a restart is timed").
    m_last_start = start_row(*m_engine, path, ready_at, since_death, m_attempts.rows());
    // A start on the warm path that did not attach: say why (the daemons' miss record, the engine's own
    // result line, or that the engine never asked the daemons).
    std::string why_cold;
    if (m_engine->warm_expected && path == "cold") {
      why_cold = warm_miss_reason(*m_engine, m_cfg.weights.socket_dir.empty() ? default_socket_dir() : m_cfg.weights.socket_dir);
      m_last_start->expected = "warm";
      m_last_start->warm_miss = why_cold;
      spdlog::warn("the start was expected warm but the engine loaded from disk: {}", why_cold);
    }
    std::string text = "Ready (" + path + ") in " + fmt_s(since_spawn);
    if (!why_cold.empty()) text += "; expected warm: " + why_cold;
    else if (const std::string skipped = m_attempts.text(); !skipped.empty()) text += "; " + skipped;
    m_notify->notify("READY=1\nSTATUS=" + text + "; engine pid " + std::to_string(m_engine->pid));
    m_status_text = text;
    spdlog::info("READY: path {} in {} (engine pid {})", path, fmt_s(since_spawn), m_engine->pid);
    const ReadyOutcome reload = m_reload.ready(m_engine->flags, path, m_loop.now_s(), m_cfg.engine.flags);
    if (reload.outcome) m_stats.reload(*reload.outcome);
    if (reload.rollback) roll_back(*reload.rollback, /*posted=*/true);
    m_watch.start_health();
    const StartAttempt* restore = m_attempts.last_on(StartPath::kSnapshot);  // this start's, if any
    const ReadyFacts ready{path, since_spawn, !m_engine->standby_level.empty(), restore ? restore->outcome : "",
                           restore ? restore->why.detail : "", &*m_last_start};
    for (auto& p : m_parts) p->after_ready(ready);
    if (!m_engine->standby_level.empty()) m_last_start->standby_level = m_engine->standby_level;
  };
  const ReadyPathFacts facts{m_daemons->engine_report_decides(), m_daemons->loader_protocol(), m_kind->reports_attach(),
                             m_daemons->attach_sockets()};
  decide_ready_path(m_loop, e, facts, m_stats, [this] { return m_engine.get(); }, finish);
}

void Supervisor::stop_engine(bool kill_now) {
  m_watch.stop();
  if (!m_engine || m_engine->exited) {
    // Nothing running: go straight to what comes after a drain. Posted, it may come after that engine's
    // drain already ran (a failed spawn posts its own exit, which drains it too, and the drain's step can run
    // before this post): a second drain would count the exit again in the policy, or reset (orphan) an
    // engine started since. It is about the engine of now only.
    const bool had = m_engine != nullptr;
    const pid_t pid = had ? m_engine->pid : -1;
    m_loop.post([this, had, pid] {
      if ((m_engine != nullptr) != had || (had && m_engine->pid != pid)) {
        spdlog::info("the drain asked for an engine that is no longer there (pid {}) is dropped", pid);
        return;
      }
      wait_drain();
    });
    return;
  }
  Engine& e = *m_engine;
  e.stop_requested = true;
  if (e.pid < 0) return;  // the snapshot helper is restoring it: after_restore_job kills what it restored
  m_end.terminate(e.pid, e.pidfd.get(), kill_now);
}

void Supervisor::on_engine_exit(int status) {
  Engine& e = *m_engine;
  if (e.reader) e.reader->drain();  // its last lines may still be in the pipe: they classify the exit
  e.exited = true;
  e.status = status;
  e.died_at = m_loop.now_s();
  m_watch.stop();
  // During a stop, a SIGTERM'd engine counts as requested whatever its status.
  const ExitFacts f = engine_exit_facts(e, status, is_terminal(m_state), m_oom.read());
  const Classification c = classify_engine_exit(f, e.tail, m_kind->failure_rules(),
                                                m_listen.fd >= 0 ? std::optional(engine_serve_port(m_cfg)) : std::nullopt);
  // A push whose flags never became ready is rolled back: a rejected push, not a failure of the running
  // configuration. It is counted apart and does not feed the crash-loop limit or the backoff.
  const bool rejected_push = m_reload.on_trial() && is_failure(c.cause);
  if (!rejected_push) m_stats.restart(exit_cause_name(c.cause));
  m_last_exit = exit_row(e, exit_cause_name(c.cause), c.detail);
  if (is_failure(c.cause))
    spdlog::error("engine pid {} exited: {} ({})", e.pid, exit_cause_name(c.cause), c.detail);
  else
    spdlog::info("engine pid {} exited as requested ({})", e.pid, c.detail);
  raise(Event::kEngineExited);
}

void Supervisor::wait_drain() {
  // The engine may have published a new pool since the last status poll: refresh the held bytes now.
  if (!m_cfg.gpus.empty()) m_daemons->refresh();
  m_end.drain(m_engine ? m_engine->pid : -1, [this] { after_drain(); });
}

bool Supervisor::release_follows() const {
  return m_state == State::kDraining && !m_standby->refusal() && !requested_start_path();
}

uint64_t Supervisor::standby_gpu_bytes(const std::string& gpu) const { return m_standby->present_bytes(gpu); }

void Supervisor::after_drain() {
  ::unlink(state_path(m_cfg, "engine.pgid").c_str());  // the engine's group is gone
  const std::string cause = m_last_exit ? m_last_exit->cause : "requested";
  const std::string detail = m_last_exit ? m_last_exit->detail : "";
  const bool failure = cause != "requested";
  const bool was_warm = m_engine && m_engine->warm_expected;
  m_engine.reset();
  if (is_terminal(m_state)) {
    raise(Event::kDrainedRestart);  // the table maps any drained event to stopping the daemons
    return;
  }
  // Pushed flags that never became ready go back to the last flags that were (reload/reload.h). Not an
  // exit of the running configuration: the policy does not see it (no failure, no backoff step); the
  // restart with the old flags goes at once.
  if (auto rollback = m_reload.after_exit(failure, cause, detail))
    return roll_back(*rollback, /*posted=*/false);
  // What follows the drain is the table's: a cold reload or a changed checkpoint drains in kReloading,
  // stop-engine in kHolding; the policy's verdict is the event.
  Verdict v = m_policy.on_exit(m_loop.now_s(), failure, was_warm);
  switch (v) {
    case Verdict::kRestart: raise(Event::kDrainedRestart); break;
    case Verdict::kColdRestart:
      spdlog::warn("warm starts keep failing: reloading the weight daemons cold");
      raise(Event::kDrainedColdRestart);
      break;
    case Verdict::kGiveUp:
      m_failure = m_policy.give_up_reason(cause, detail);
      raise(Event::kDrainedGiveUp);
      break;
  }
}

void Supervisor::on_sighup() {
  spdlog::info("SIGHUP: re-reading {}", m_cfg.path);
  // The same re-read as `fastrestartctl reload` without flags, without waiting for the engine to be ready.
  json r = reload_refusal();
  if (r.is_null()) r = reread_config(/*waiter=*/nullptr);
  if (!r.value("ok", false)) spdlog::error("SIGHUP: {}", r["error"].value("message", std::string("failed")));
  else spdlog::info("SIGHUP: {}", r.value("message", std::string("reloading")));
}

}  // namespace fr::supervisor

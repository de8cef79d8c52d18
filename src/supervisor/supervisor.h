// fastrestartd's core: owns the weight daemons and the engine, runs the lifecycle table (lifecycle.h) on
// a libuv loop, and answers control requests. Everything here runs on the loop thread except request(),
// which control threads call and which waits for the loop's answer.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/file_identity.h"
#include "supervisor/classify.h"
#include "supervisor/config.h"
#include "supervisor/daemons/daemon_set.h"
#include "supervisor/control_request.h"
#include "supervisor/host_probe.h"
#include "supervisor/memory_share.h"
#include "supervisor/notifier.h"
#include "supervisor/lifecycle.h"
#include "supervisor/loop.h"
#include "supervisor/policy.h"
#include "supervisor/readiness.h"
#include "supervisor/reload/reload.h"
#include "supervisor/engine.h"
#include "supervisor/engine_end.h"
#include "supervisor/engine_launch.h"
#include "supervisor/engine_watch.h"
#include "supervisor/snapshots/snapshot_host.h"
#include "supervisor/snapshots/snapshots.h"
#include "supervisor/standby/standby.h"
#include "supervisor/standby/standby_host.h"
#include "supervisor/start/attempts.h"
#include "supervisor/start/part.h"
#include "supervisor/start/paths.h"
#include "supervisor/start/start_path.h"
#include "supervisor/stats.h"
#include "supervisor/supervised_child.h"
#include "status/status.h"
#include "supervisor/engines/engine_kind.h"
#include "supervisor/front/front_process.h"

namespace fr::supervisor {

// Exit codes of fastrestartd (docs/supervisor.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitConfig = 2;
inline constexpr int kExitCrashLoop = 3;
inline constexpr int kExitAlreadyRunning = 4;  // another fastrestartd holds the state directory's lock

// The signals the supervisor's loop handles: SIGCHLD, SIGTERM, SIGINT, SIGHUP. fastrestartd blocks them
// (block_handled_signals) before it starts any thread, and run() unblocks them once its handlers are in:
// one that arrives in between is held pending, not lost. That matters as PID 1 of a container, where the
// kernel discards a signal without a handler (a `podman stop` during startup would wait out its timeout),
// and it also clears a block inherited from the parent across exec, which would otherwise hide SIGTERM
// forever. Threads started while they are blocked keep them blocked; libuv's handler forwards a signal to
// the loop from whichever thread takes it.
sigset_t handled_signals();
void block_handled_signals();

// The parts reach it through their hosts, which it implements privately: the start paths (StartHost), the
// weight daemons (DaemonHost), the snapshots (SnapshotHost), the standby (StandbyHost); so do the watch
// of its engine's readiness and health (EngineWatchHost) and its stop and drain (EngineEndHost). A method of the
// same name in several hosts (loop, config, raise, ...) is one answer for all.
class Supervisor : private StartHost, private DaemonHost, private SnapshotHost, private RestoreHost, private StandbyHost,
                   private EngineWatchHost, private EngineEndHost {
 public:
  Supervisor(Config config, std::unique_ptr<GpuProbe> gpus, std::unique_ptr<Notifier> notifier);
  ~Supervisor() override;

  // Runs until stopped; returns the process exit code. Unblocks handled_signals() once its handlers are
  // installed, so a signal the caller held blocked before (block_handled_signals) is delivered then.
  int run();

  // Thread-safe: a control request (docs/supervisor.md, "Control protocol"); returns the reply.
  nlohmann::json request(const nlohmann::json& req);

  // engine.listen = "supervisor" (docs/listen-socket.md): the listening socket every engine and standby is
  // started with (fd 3, LISTEN_FDS). The caller owns it and keeps it open longer than this object; call
  // before run(). `inode` identifies it among the listeners on the engine's port.
  void use_listen_socket(int fd, uint64_t inode) {
    m_listen.fd = fd;
    m_listen.inode = inode;
  }
  // engine.listen = "front" (docs/front.md, "Running it"): the public listening socket fastrestart-front is
  // started with (fd 3), before the first engine and again after each death of the front; the engines get
  // use_listen_socket()'s (the loopback one, front.bound_upstream_port). The caller owns it as above; call
  // before run().
  // `upstream_port`: the port of use_listen_socket()'s socket (front.bound_upstream_port).
  void use_front_socket(int fd, uint16_t upstream_port);

 private:
  void raise(Event e) override;  // DaemonHost, SnapshotHost
  void perform(Action a);
  void set_status(const std::string& s, const std::string& extra = {}) override;

  // the weight daemons (m_daemons: daemons/daemon_set.h, one set of the configured kind)
  void start_daemons();
  void stop_daemons();  // after a standby's group is gone (a warmed one maps their weights): standby_gone
  uint64_t held_bytes(const std::string& gpu) const { return m_daemons->held_bytes(gpu); }
  // All the daemon's memory on `gpu`, its KV arenas with its weights: what stays used after an engine's
  // exit (the leak check), where held_bytes() is only what is held outside the engine's share.
  uint64_t daemon_gpu_bytes(const std::string& gpu) const override { return held_bytes(gpu) + m_daemons->arena_bytes(gpu); }
  // DaemonHost
  Loop& loop() override { return m_loop; }
  const Config& config() const override { return m_cfg; }
  GpuProbe& gpus() override { return *m_gpus; }
  bool awaiting_daemons() const override { return awaits_daemons(m_state); }
  bool terminal() const override { return is_terminal(m_state); }
  const std::string& status_text() const override { return m_status_text; }
  const FlagList& engine_flags() const override { return m_reload.flags(); }
  const EngineAdapter& engine_kind() const override { return *m_kind; }

  // engine
  void start_engine();
  void stop_engine(bool kill_now);
  void on_engine_exit(int status);
  void wait_drain();   // m_end's drain of the engine that exited, then after_drain()
  void after_drain();
  // EngineEndHost (engine_end.h; known_children and daemon_gpu_bytes are declared with their kin)
  bool stopping() const override { return m_state == State::kStopping; }
  bool release_follows() const override;
  uint64_t standby_gpu_bytes(const std::string& gpu) const override;
  // What an engine (or a standby) is started with now (engine_launch.h); changes nothing.
  EngineLaunch launch() const;
  EngineCommand engine_command(bool for_standby = false) override;  // StandbyHost, SnapshotHost
  // memory (supervisor_memory.cc, docs/supervisor.md "Memory"): each GPU's share from its own figures
  std::vector<GpuShare> gpu_shares() const;
  // Why no engine (or standby) may start on the shares now, with the figures; "" when it may. Sets
  // status's engine_share_refused and logs it once per change.
  std::string engine_share_refusal() override;
  // EngineWatchHost (engine_watch.h): the readiness polls, start deadline and health checks of m_engine
  Engine* watched_engine() override;
  void readiness_passed() override;
  void still_starting() override;  // EXTEND_TIMEOUT_USEC before the first READY=1
  void start_timed_out() override;
  void engine_hung() override;
  // READY: which path the start took (the daemons' records by its pid, else the engine's own word), then
  // what follows it (a pending reload or snapshot create answered, health checks, the next standby).
  void decide_path_after_ready();

  // start paths (start/start_path.h): walk restart.start from index `from`, recording each skip or failure
  void walk_start_paths(size_t from);
  bool engine_serving() const override;       // an engine passed readiness and nobody is stopping it
  // StartHost
  std::optional<StartRefusal> daemons_refusal() const override;
  bool daemons_hold_old_weights() const override;
  void reload_daemons_for_start() override;
  Status spawn_engine(StartPath expected) override;
  Part* part(StartPath path) const override;  // m_parts' part for `path`; nullptr: none

  // StandbyHost (supervisor_standby.cc): the standby part's view of the engine, and its hand-over
  bool engine_steady() const override { return !is_terminal(m_state) && engine_serving(); }
  std::unique_ptr<Engine> new_engine_record() override;
  uint64_t daemon_generation() const override { return m_daemon_generation; }
  std::optional<double> engine_died_at() const override;
  void adopt_engine(std::unique_ptr<Engine> engine) override;
  void standby_gone() override { stop_daemons(); }

  // The path an explicit request asked the next start to take (a pending `snapshot restore` or created
  // artifact), when restart.start lists it.
  std::optional<StartPath> requested_start_path() const;
  LineHandler engine_line_handler(Engine* e);  // what the engine's output lines feed (progress, vLLM report)
  // An engine's `fastrestart-arena:` line into its record (supervisor_arena.cc); others are ignored.
  void observe_arena_line(Engine& e, const std::string& line);
  std::optional<status::ArenaOutcomeStatus> arena_outcome() const;  // status `arena_outcome`

  // SnapshotHost, RestoreHost (supervisor_snapshot.cc): the snapshots part's steps on the live engine
  std::string reported_state() const override { return reported_state_name(m_state); }
  bool reload_running() const override { return m_reload.pending(); }
  void restoring_engine(const std::string& id) override;
  void restore_spawned(UniqueFd output) override;
  void restore_not_spawned() override;
  bool engine_present() const override { return m_engine != nullptr; }
  void restored(pid_t pid, std::optional<int> exited) override;
  void restore_failed(const std::string& detail) override;
  DumpTarget dump_target() const override;
  void dump_begins() override;
  void dump_failed() override;
  void create_finished() override;

  // signals and reaping
  void reap();
  std::set<pid_t> known_children() const override;  // ours, not engine leftovers (supervisor_orphans.cc)
  void on_sighup();
  // SIGTERM/SIGINT: with a front, it stops taking requests and drains first (front.stop_grace_s); then the
  // lifecycle's stop (engine, then daemons). A second signal during the drain ends it at once.
  void on_stop_signal();

  // control
  nlohmann::json status_json();
  nlohmann::json handle(const nlohmann::json& req, std::shared_ptr<std::promise<nlohmann::json>> reply);
  // reload: refused while a snapshot is created, the supervisor is stopping or failed, or a reload runs
  // (an error reply; null when a reload may start).
  nlohmann::json reload_refusal() const;
  // Re-reads the config file (reload without flags, SIGHUP); a change of the engine's flags starts a reload.
  // One that moves where the engine serves (address_change: engine.host/port/listen) is refused whole, so
  // m_cfg.engine's address is fastrestartd's start's for its lifetime: the socket it holds and the probes agree.
  nlohmann::json reread_config(std::shared_ptr<std::promise<nlohmann::json>> waiter);
  // Starts a reload on `next` (m_reload: reload/reload.h); `waiter`, when set, is answered once the engine
  // is ready on them or rolled back (the reply is then null). Answers at once when nothing changes or the
  // engine kind refuses them.
  nlohmann::json start_reload(const FlagList& next, Reload::Waiter waiter);
  // A rolled-back push: counted, and the engine restarted on the last ready flags (at once, or `posted`).
  void roll_back(const Rollback& r, bool posted);

  // What the engine kind says (supervisor_kind.cc; m_kind, engines/engine_kind.h).
  std::string readiness_model() const override;
  nlohmann::json handle_check(const ControlRequest& req);  // already read (control_request.h)
  std::string refuse_push(const FlagList& next);  // "" when the engine would start

  Config m_cfg;
  std::unique_ptr<GpuProbe> m_gpus;
  std::unique_ptr<Notifier> m_notify;
  Loop m_loop;
  State m_state = State::kLoading;
  RestartPolicy m_policy;
  OomCounter m_oom;
  int m_exit_code = kExitOk;
  ListenHandoff m_listen;      // use_listen_socket(); fd -1: the engine binds its port itself. The parts read it.
  double m_started_at = 0;

  // The engine's flags, the last ready ones, flags.json and a pending reload (reload/reload.h).
  Reload m_reload;
  std::unique_ptr<Engine> m_engine;
  uint64_t m_daemon_generation = 0;              // counts the daemons' (re)starts: a warmed standby maps one's weights
  // The parts, one per path with state of its own, in start/paths.h's order; the hooks every part has
  // (part.h) run over all of them. Declared after m_engine: a standby's release moves its process there.
  std::vector<std::unique_ptr<Part>> m_parts;
  // The two the Supervisor also asks for what only they do (m_parts owns them).
  Snapshots* m_snapshots = nullptr;  // the path "snapshot" (snapshots/snapshots.h)
  Standby* m_standby = nullptr;      // the path "standby" (standby/standby.h)

  size_t m_start_index = 0;                      // the path that started the engine (restart.start index)

  Timer m_backoff_timer, m_watchdog_timer;
  EngineWatch m_watch{m_loop, m_cfg, *this};  // the readiness polls, start deadline and health checks
  EngineEnd m_end;  // the engine's stop and the drain after its exit
  std::vector<std::unique_ptr<Signal>> m_signals;

  Stats m_stats;  // what status and /metrics count (docs/health.md: "metrics", "restarts", "rollbacks")
  // The current (or last) start: each listed path asked, in order, and what it answered (start/attempts.h).
  StartAttempts m_attempts{m_stats};
  std::optional<status::LastExitStatus> m_last_exit;    // engine_rows.h builds both
  std::optional<status::LastStartStatus> m_last_start;
  std::string m_status_text;
  std::string m_failure;
  bool m_ever_ready = false;     // READY=1 sent once: systemd's start timeout no longer applies
  double m_last_extend = 0;
  // What the last engine that was m_engine said of its KV arena (arena_line.h), for status once it is gone.
  std::optional<status::ArenaOutcomeStatus> m_arena_outcome;
  std::string m_share_refused;  // engine_share_refusal() at the last start: memory.min_share not met
  std::atomic<bool> m_running{false};                    // stop-engine: do not restart until start-engine

  std::unique_ptr<EngineAdapter> m_kind;   // engine.kind: what differs per kind (engines/registry.cc)
  std::unique_ptr<DaemonSet> m_daemons;    // weights.daemon's kind (daemons/registry.cc)
  std::unique_ptr<FrontProcess> m_front;  // engine.listen = "front": use_front_socket()
};

}  // namespace fr::supervisor

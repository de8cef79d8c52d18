// weights.daemon = "native": one fastrestart-weightd per GPU (docs/protocol.md), each preloading the
// checkpoint when weights.key is set. Readiness is their status replies (every entry loaded); a daemon
// that dies while engines run is respawned with a backoff (running engines keep their mappings).
#include "supervisor/daemons/native.h"

#include <signal.h>
#include <unistd.h>
#include <sys/wait.h>

#include <spdlog/spdlog.h>

#include "common/private_dir.h"
#include "daemon_client/daemon_client.h"
#include "protocol/daemon_status.h"
#include "supervisor/child.h"
#include "supervisor/memory_share.h"
#include "supervisor/daemons/daemon_set.h"
#include "supervisor/supervised_child.h"
#include "supervisor/checkpoint_files.h"

namespace fr::supervisor {

using nlohmann::json;

namespace {

constexpr double kDaemonStopGraceS = 30;

std::string daemon_binary(const Config& c) {
  return c.weights.daemon_path.empty() ? find_companion("fastrestart-weightd", "daemon") : c.weights.daemon_path;
}

struct Daemon : SupervisedChild {
  std::string gpu;     // as configured ("" for the host backend and the host-arena daemon)
  std::string socket;  // its socket path
  bool arenas_only = false;  // the host-arena daemon (weights.host_arenas): holds no weights
  bool exited = false;
  bool stopping = false;
  bool ready = false;
  bool failed = false;
  std::string error;
  proto::DaemonStatus status;  // last status reply
  int respawns = 0;            // after unexpected deaths (backoff); reset after a stable run
  double spawned_at = 0;       // loop time of the last spawn
  std::unique_ptr<Timer> respawn;
};

class NativeDaemons final : public DaemonSet {
 public:
  explicit NativeDaemons(DaemonHost& host) : m_host(host), m_poll_timer(host.loop()), m_kill_timer(host.loop()) {}

  const char* kind() const override { return "native"; }
  bool loader_protocol() const override { return true; }

  void start() override {
    m_daemons.clear();
    ++m_generation;
    m_host.set_status("Starting the weight daemons");
    for (auto& spec : native_daemon_layout(m_host.config(), m_host.gpus())) {
      auto d = std::make_unique<Daemon>();
      d->gpu = spec.gpu;
      d->socket = spec.socket;
      d->arenas_only = spec.arenas_only;
      spawn(*d);
      m_daemons.push_back(std::move(d));
    }
    m_poll_timer.start(0.05, [this] { poll(); });
  }

  void stop() override {
    bool any = false;
    for (auto& d : m_daemons) {
      if (d->exited) {
        // A dead daemon's pending respawn belongs to the set being stopped: fired while the others are still
        // stopping (a cold reload), it would start a daemon nobody stops, so kDaemonsStopped never came.
        if (d->respawn && d->respawn->active()) {
          d->respawn->stop();
          spdlog::info("weight daemon for {} (pid {}): its respawn is dropped, the daemons are stopping",
                       d->gpu.empty() ? "host" : d->gpu, d->pid);
        }
        continue;
      }
      d->stopping = true;
      any = true;
      ::kill(d->pid, SIGTERM);
    }
    if (!any) {
      m_host.loop().post([this] { m_host.raise(Event::kDaemonsStopped); });
      return;
    }
    m_kill_timer.start(kDaemonStopGraceS, [this] {
      for (auto& d : m_daemons)
        if (!d->exited) ::kill(d->pid, SIGKILL);
    });
  }

  bool stopping() const override {
    for (const auto& d : m_daemons)
      if (d->stopping && !d->exited) return true;
    return false;
  }

  bool on_exit(pid_t pid, int status) override {
    for (auto& d : m_daemons)
      if (d->pid == pid && !d->exited) {
        daemon_exited(*d, status);
        return true;
      }
    return false;
  }

  void close() override {
    m_daemons.clear();
    m_poll_timer.stop();
    m_kill_timer.stop();
  }

  void refresh() override { poll(); }

  uint64_t held_bytes(const std::string& gpu) const override {
    for (const auto& d : m_daemons)
      if (d->gpu == gpu && !d->exited) return d->status.held_bytes;
    return 0;
  }

  uint64_t arena_bytes(const std::string& gpu) const override {
    for (const auto& d : m_daemons)
      if (d->gpu == gpu && !d->exited) return d->status.arena_bytes;
    return 0;
  }

  void add_known_pids(std::set<pid_t>& known) const override {
    for (const auto& d : m_daemons)
      if (!d->exited && d->pid > 0) known.insert(d->pid);
  }

  std::vector<status::DaemonRowStatus> rows() const override {
    std::vector<status::DaemonRowStatus> out;
    for (const auto& d : m_daemons) {
      status::DaemonRowStatus row;
      for (const auto& e : d->status.entries) {
        row.progress.done_bytes += e.progress.done_bytes;
        row.progress.total_bytes += e.progress.total_bytes;
        row.progress.rate_bytes_per_s += e.progress.rate_bytes_per_s;
      }
      row.gpu = d->gpu.empty() ? "host" : d->gpu;
      row.pid = d->pid;
      row.socket = d->socket;
      row.state = d->exited ? (d->stopping ? "stopped" : "dead") : d->failed ? "failed" : d->ready ? "ready" : "loading";
      row.error = d->error;
      row.held_bytes = d->status.held_bytes;
      row.entries = d->status.entries.size();
      row.arena_bytes = d->status.arena_bytes;
      row.arenas = d->status.arenas;
      out.push_back(std::move(row));
    }
    return out;
  }

  std::optional<StartRefusal> refusal() const override {
    if (m_daemons.empty()) return StartRefusal{"no_daemon", "no weight daemon is running"};
    bool holds = used();  // an engine was ready on these daemons: it attached or published
    for (const auto& d : m_daemons) {
      const std::string name = d->gpu.empty() ? "host" : d->gpu;
      if (d->exited || d->failed)
        return StartRefusal{"daemons_not_ready", "the weight daemon for " + name + " is " + (d->exited ? "not running" : "failed") +
                                                     (d->error.empty() ? "" : " (" + d->error + ")")};
      if (!d->ready) return StartRefusal{"daemons_not_ready", "the weight daemon for " + name + " is still loading"};
      if (!d->status.entries.empty()) holds = true;
    }
    if (!holds) return StartRefusal{"nothing_held", "the weight daemons hold no weights yet (the engine loads them from disk and publishes them)"};
    return std::nullopt;
  }

  bool holds_old_weights() const override {
    if (!used()) return false;
    for (const auto& d : m_daemons)
      if (!d->exited) return true;
    return false;
  }

  std::vector<std::string> attach_sockets() const override {
    std::vector<std::string> socks;
    for (const auto& d : m_daemons)
      if (!d->exited && !d->arenas_only) socks.push_back(d->socket);
    return socks;
  }

 private:
  void spawn(Daemon& d);
  void poll();
  void daemon_exited(Daemon& d, int status);

  DaemonHost& m_host;
  std::vector<std::unique_ptr<Daemon>> m_daemons;
  uint64_t m_generation = 0;  // counts start(): a status reply from before a (re)start is dropped
  Timer m_poll_timer, m_kill_timer;
};

void NativeDaemons::spawn(Daemon& d) {
  const Config& cfg = m_host.config();
  const auto files = checkpoint_files(cfg);
  const bool preload = !files.empty() && !cfg.weights.key.empty();
  SpawnSpec spec;
  spec.argv = native_daemon_argv(cfg, d.gpu);
  d.exited = d.stopping = d.ready = false;
  d.status = {};
  const std::string prefix = d.gpu.empty() ? "weightd" : "weightd[" + d.gpu + "]";
  if (auto s = spawn_supervised(m_host.loop(), spec, prefix, nullptr, d); !s.ok()) {
    d.failed = d.exited = true;
    d.error = s.error().message;
    spdlog::error("{}: {}", prefix, d.error);
    return;
  }
  d.failed = false;
  d.error.clear();
  d.spawned_at = m_host.loop().now_s();
  spdlog::info("started {} (pid {}){}", prefix, d.pid, preload ? ", preloading " + std::to_string(files.size()) + " file(s)" : "");
}

void NativeDaemons::poll() {
  struct Reply {
    size_t index;
    pid_t pid;  // the daemon asked: one respawned in its place since is not described by this reply
    Result<json> status;
  };
  // While daemons are being stopped their exits decide what follows (kDaemonsStopped); a status they
  // answer now, or answered before the stop, says nothing about the daemons that come next.
  if (stopping()) return;
  const uint64_t generation = m_generation;
  auto pending = std::make_shared<std::vector<Reply>>();
  auto remaining = std::make_shared<size_t>(0);
  for (size_t i = 0; i < m_daemons.size(); ++i) {
    if (m_daemons[i]->exited || m_daemons[i]->stopping) continue;
    ++*remaining;
  }
  if (*remaining == 0) {
    m_host.raise(Event::kDaemonsFailed);
    return;
  }
  for (size_t i = 0; i < m_daemons.size(); ++i) {
    Daemon& d = *m_daemons[i];
    if (d.exited || d.stopping) continue;
    std::string sock = d.socket;
    const pid_t pid = d.pid;
    run_in_pool<Reply>(
        m_host.loop(),
        [i, pid, sock]() -> Reply {
          auto c = DaemonClient::connect(sock, 1.0, "fastrestartd");
          if (!c.ok()) return {i, pid, c.error()};
          return {i, pid, c->call({{"op", "status"}}, 5)};
        },
        [this, pending, remaining, generation](Reply r) {
          pending->push_back(std::move(r));
          if (--*remaining > 0) return;
          // Replies from before a stop or a reload of the daemons: they must not start an engine on daemons
          // that are going away (seen on the H200: a reply to the drain's poll arrived just after the cold
          // reload stopped the daemons, the engine started at once and the daemons were never restarted).
          if (generation != m_generation || stopping()) return;
          // All answers in: decide.
          bool all_ready = true, any_failed = false;
          uint64_t done = 0, total = 0;
          double rate = 0;
          for (auto& rep : *pending) {
            if (rep.index >= m_daemons.size()) continue;
            Daemon& dm = *m_daemons[rep.index];
            // The batch waits for its slowest daemon (up to its call timeout): meanwhile this one may have died
            // and been respawned in place, and the dead one's status (ready, its held bytes) is not the new one's.
            if (dm.pid != rep.pid || dm.exited) {
              spdlog::info("weight daemon pid {} is gone: its status reply is dropped", rep.pid);
              all_ready = false;
              continue;
            }
            if (!rep.status.ok()) {
              all_ready = false;  // not listening yet
              continue;
            }
            auto st = proto::daemon_status_from_json(*rep.status);
            if (!st.ok()) {
              spdlog::warn("weight daemon {}: unreadable status: {}", dm.gpu.empty() ? "host" : dm.gpu, st.error().message);
              all_ready = false;
              continue;
            }
            dm.status = std::move(*st);
            bool ready = true;
            for (const auto& e : dm.status.entries) {
              done += e.progress.done_bytes;
              total += e.progress.total_bytes;
              rate += e.progress.rate_bytes_per_s;
              if (e.state == "loading") ready = false;
              if (e.state == "failed") {
                any_failed = true;
                dm.error = e.error.value_or("load failed");
              }
            }
            dm.ready = ready;
            all_ready &= ready;
          }
          if (!m_host.awaiting_daemons()) {
            m_poll_timer.start(2.0, [this] { poll(); });  // keep status fresh
            return;
          }
          if (any_failed) {
            spdlog::error("a weight daemon failed to load; the engine will load from disk");
            m_host.raise(Event::kDaemonsFailed);
          } else if (all_ready) {
            m_host.raise(Event::kDaemonsReady);
          } else {
            if (total > 0) {
              double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0;
              char b[160];
              std::snprintf(b, sizeof b, "Loading weights: %s / %s (%.2f GB/s, ETA %.0f s)", gb_text(double(done)).c_str(),
                            gb_text(double(total)).c_str(), rate / 1e9, eta);
              // Progress is being made: keep systemd's start timeout from firing.
              m_host.set_status(b, "EXTEND_TIMEOUT_USEC=" + std::to_string(30'000'000) + "\n");
            }
            m_poll_timer.start(0.2, [this] { poll(); });
            return;
          }
          m_poll_timer.start(2.0, [this] { poll(); });
        });
  }
}

void NativeDaemons::daemon_exited(Daemon& d, int status) {
  d.exited = true;
  d.reader.reset();
  std::string how = WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                                      : "signal " + std::to_string(WTERMSIG(status));
  if (d.stopping) {
    spdlog::info("weight daemon pid {} stopped ({})", d.pid, how);
    bool all_gone = true;
    for (auto& x : m_daemons) all_gone &= x->exited;
    if (!all_gone) return;
    m_kill_timer.stop();
    m_host.raise(Event::kDaemonsStopped);  // stopping: exit; loading: a reload stopped them, start them again
    return;
  }
  d.failed = true;
  d.error = "exited unexpectedly: " + how;
  if (m_host.awaiting_daemons()) {
    // Dead while loading (no GPU, a bad checkpoint, ...): the engine starts anyway and loads from disk.
    spdlog::error("weight daemon pid {} died while loading ({}); the engine will load from disk", d.pid, how);
    poll();
    return;
  }
  if (m_host.terminal()) return;
  // Running engines keep their mappings; the next restart needs a daemon again. Respawn with a backoff so a
  // daemon that cannot start does not spin.
  // A daemon that ran as long as restart.reset_after_s starts its backoff again (as the engine's does):
  // else every death in a long life would wait the full 60 s (found by the soak).
  if (m_host.loop().now_s() - d.spawned_at >= m_host.config().restart.reset_after_s) d.respawns = 0;
  const double delay = std::min(60.0, 0.5 * static_cast<double>(1 << std::min(d.respawns, 7)));
  d.respawns++;
  spdlog::error("weight daemon pid {} died ({}); running engines keep their mappings; respawning in {:.1f} s",
                d.pid, how, delay);
  if (!d.respawn) d.respawn = std::make_unique<Timer>(m_host.loop());
  Daemon* raw = &d;
  d.respawn->start(delay, [this, raw] {
    if (m_host.terminal()) return;
    spawn(*raw);
    // The status poll chain ends when no daemon is alive: restart it, or the respawned daemon would show
    // "loading" and 0 held bytes forever (found by the soak, tests/soak).
    m_poll_timer.start(0.05, [this] { poll(); });
  });
}

}  // namespace

std::vector<NativeDaemonSpec> native_daemon_layout(const Config& c, GpuProbe& gpus) {
  const bool host = c.weights.backend == "host";
  // The host backend runs one daemon, or one per listed GPU that it stands for (tensor-parallel tests).
  const std::vector<std::string> list = host && c.gpus.empty() ? std::vector<std::string>{""} : c.gpus;
  const std::string dir = c.weights.socket_dir.empty() ? default_socket_dir() : c.weights.socket_dir;
  std::vector<NativeDaemonSpec> out;
  for (const auto& gpu : list) {
    std::string uuid = gpu.empty() ? "host" : "host-" + gpu;
    if (!host) {
      uuid = gpu;
      if (gpu.rfind("GPU-", 0) != 0) {
        auto m = gpus.memory(gpu);
        if (m.ok()) uuid = m->uuid;
      }
    }
    out.push_back({gpu, dir + "/weightd-" + uuid + ".sock"});
  }
  // Host arenas beside GPU weights (a KV prefix index): the name engines look for (docs/kv-survival.md).
  if (!host && c.weights.host_arenas) out.push_back({"", dir + "/weightd-host.sock", true});
  return out;
}

std::vector<std::string> native_daemon_argv(const Config& c, const std::string& gpu) {
  const bool arenas_only = c.weights.backend != "host" && gpu.empty();
  const bool host = c.weights.backend == "host" || arenas_only;
  const auto files = checkpoint_files(c);
  const bool preload = !arenas_only && !files.empty() && !c.weights.key.empty();
  std::vector<std::string> argv = {daemon_binary(c), "--backend", host ? "host" : "cuda", "--reader-threads",
                                   std::to_string(c.weights.reader_threads), "--log-level", c.logging.level};
  if (!host || !gpu.empty()) argv.insert(argv.end(), {"--gpu", gpu});
  if (!c.weights.socket_dir.empty()) argv.insert(argv.end(), {"--socket-dir", c.weights.socket_dir});
  if (!c.control.group.empty()) argv.insert(argv.end(), {"--group", c.control.group});
  // The engine runs as this process's uid: only it may lease the KV arenas, whatever the group lets connect
  // (docs/protocol.md, "Arena security").
  argv.insert(argv.end(), {"--arena-uid", std::to_string(::geteuid())});
  if (preload) {
    for (const auto& f : files) argv.insert(argv.end(), {"--preload", f});
    for (const auto& [k, v] : c.weights.key) argv.insert(argv.end(), {"--config", k + "=" + v});
  }
  return argv;
}

std::unique_ptr<DaemonSet> make_native_daemons(DaemonHost& host) { return std::make_unique<NativeDaemons>(host); }

}  // namespace fr::supervisor

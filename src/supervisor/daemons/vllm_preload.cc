// weights.daemon = "vllm-preload" (docs/vllm.md): start `vllm preload` with the
// model and parallelism flags and a loopback health port, wait for its /health, start `vllm serve ...
// --load-format ipc_cache` strict the first time and with the configured fallback after (the flags are the
// vLLM adapter's: vllm_adapter.cc), stop it after the engine, restart it when the checkpoint files change
// under the same path.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <spdlog/spdlog.h>

#include "common/control_chars.h"

#include "common/file_identity.h"
#include "supervisor/child.h"
#include "supervisor/daemons/daemon_set.h"
#include "supervisor/group_stop.h"
#include "supervisor/flags.h"
#include "supervisor/readiness.h"
#include "supervisor/supervised_child.h"
#include "supervisor/checkpoint_files.h"
#include "supervisor/engines/vllm/vllm_adapter.h"

namespace fr::supervisor {

using nlohmann::json;

namespace {

constexpr double kPreloadStopGraceS = 30;
constexpr double kPreloadPollS = 0.25;
constexpr double kExtendEveryS = 10;  // EXTEND_TIMEOUT_USEC cadence while it loads

std::string join(const std::vector<std::string>& v, const char* sep = " ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// A loopback port nobody listens on now (the preload binds it a moment later; a race we accept and report:
// a taken port makes the preload exit, which shows in its log).
uint16_t free_loopback_port() {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  uint16_t port = 0;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &n) == 0)
    port = ntohs(a.sin_port);
  ::close(s);
  return port;
}

// The checkpoint files to watch: weights.checkpoint, else the model when it is a local path; directories
// expand to their *.safetensors (what vLLM loads), sorted.
std::vector<std::string> watched_files(const Config& c, const FlagList& flags) {
  std::vector<std::string> roots = c.weights.checkpoint;
  if (roots.empty()) {
    std::string m = vllm_model_of(flags);
    std::error_code ec;
    if (!m.empty() && std::filesystem::exists(m, ec)) roots.push_back(m);
  }
  return expand_checkpoint_paths(roots);
}

std::vector<FileIdentity> identities(const std::vector<std::string>& files) {
  std::vector<FileIdentity> out;
  for (const auto& f : files) {
    auto id = identify_file(f);
    if (id.ok()) out.push_back(*id);
    else out.push_back(FileIdentity{f, 0, 0, 0, 0, 0});  // missing: compares unequal to any real file
  }
  return out;
}

// The first difference between two identity lists, in words; "" when equal.
std::string identity_change(const std::vector<FileIdentity>& before, const std::vector<FileIdentity>& now) {
  for (const auto& b : before) {
    auto it = std::find_if(now.begin(), now.end(), [&](const FileIdentity& n) { return n.path == b.path; });
    if (it == now.end()) return b.path + " is gone";
    if (*it == b) continue;
    if (it->ino == 0) return b.path + " is gone";
    if (it->ino != b.ino || it->dev != b.dev) return b.path + " was replaced (inode " + std::to_string(b.ino) + " -> " + std::to_string(it->ino) + ")";
    if (it->size != b.size) return b.path + " changed size (" + std::to_string(b.size) + " -> " + std::to_string(it->size) + " bytes)";
    return b.path + " was rewritten in place (mtime/ctime changed)";
  }
  for (const auto& n : now)
    if (std::none_of(before.begin(), before.end(), [&](const FileIdentity& b) { return b.path == n.path; }))
      return n.path + " appeared";
  return {};
}

// One `vllm preload` launcher, which runs a daemon rank per local GPU. Its pid is also the process group
// of the ranks.
struct Preload : SupervisedChild {
  std::vector<std::string> argv;
  uint16_t health_port = 0;
  bool exited = false;
  bool stopping = false;
  bool ready = false;
  bool failed = false;
  bool probe_in_flight = false;
  std::string error;
  double spawned_at = 0;
  double last_output = 0;            // progress, for weights.load_timeout_s
  double ready_at = 0;
  std::vector<FileIdentity> checkpoint;  // the checkpoint files when it started loading
  int engine_starts = 0;             // engines started on it: the first is strict (ipc_cache fallback false)
  bool gave_weights = false;         // weights.mode = copy: an engine took the weights, the cache is released
  std::string stale;                 // the checkpoint changed under it: what changed
  std::deque<std::string> tail;      // its last lines: why it died
};

class VllmPreload final : public DaemonSet {
 public:
  explicit VllmPreload(DaemonHost& host)
      : m_host(host), m_poll_timer(host.loop()), m_kill_timer(host.loop()), m_watch_timer(host.loop()) {}

  const char* kind() const override { return "vllm-preload"; }
  void start() override;
  void stop() override;
  bool stopping() const override { return m_preload && m_preload->stopping && !m_preload->exited; }
  bool on_exit(pid_t pid, int status) override {
    if (!m_preload || pid != m_preload->pid || m_preload->exited) return false;
    preload_exited(status);
    return true;
  }
  void close() override {
    m_preload.reset();
    m_watch_timer.stop();
    m_poll_timer.stop();
    m_kill_timer.stop();
  }
  // Its ranks' pools are not reported per GPU: the engine's share is the configured budget.
  uint64_t held_bytes(const std::string&) const override { return 0; }
  void add_known_pids(std::set<pid_t>& known) const override {
    if (m_preload && !m_preload->exited && m_preload->pid > 0) known.insert(m_preload->pid);  // and its ranks' group
  }
  std::vector<status::DaemonRowStatus> rows() const override;
  std::optional<StartRefusal> refusal() const override;
  bool holds_old_weights() const override {
    // The preload's cache is also spent when an engine took it (copy) or the checkpoint changed under it.
    return m_preload && !m_preload->exited && (used() || m_preload->gave_weights || !m_preload->stale.empty());
  }
  // vLLM's own words decide: "Mapped N tensors from the weight cache daemon" / the loader's result line.
  bool engine_report_decides() const override { return true; }
  // What the next engine start is told of the preload (EngineAdapter::flags_for_preload); engine_spawned counts it.
  std::optional<PreloadUse> preload_use() const override {
    const Config& c = m_host.config();
    const bool s = serving();
    return PreloadUse{s, s && m_preload->engine_starts == 0, c.weights.fallback, c.weights.mode, c.weights.socket_dir};
  }
  bool engine_spawned() override {
    if (!serving()) return false;
    // What this start used of the preload (preload_use() gave the engine's flags the same facts).
    const bool strict = m_preload->engine_starts++ == 0;
    if (m_host.config().weights.mode == WeightsMode::kCopy) m_preload->gave_weights = true;
    return strict;
  }

 private:
  bool serving() const { return m_preload && m_preload->ready && !m_preload->exited; }  // up and ready
  void poll();
  void preload_exited(int status);
  void watch_checkpoint();

  DaemonHost& m_host;
  std::unique_ptr<Preload> m_preload;
  double m_last_extend = 0;
  Timer m_poll_timer, m_kill_timer, m_watch_timer;
};

void VllmPreload::start() {
  const Config& cfg = m_host.config();
  m_preload = std::make_unique<Preload>();
  Preload& p = *m_preload;
  const FlagList& flags = m_host.engine_flags();
  // The same program as `vllm serve`, with `preload` in the place of `serve` (config.cc checked it is there).
  p.argv = cfg.engine.command;
  *std::find(p.argv.begin(), p.argv.end(), "serve") = "preload";
  const std::string model = vllm_model_of(flags);
  if (!model.empty()) p.argv.insert(p.argv.end(), {"--model", model});
  for (const auto& f : flags.flags()) {
    if (f.name.empty()) continue;
    const std::string name = canonical_flag_name(f.name);
    if (name == "--model") continue;
    if (!m_host.engine_kind().passes_to_preload(name)) continue;
    auto words = to_words({f});
    p.argv.insert(p.argv.end(), words.begin(), words.end());
  }
  p.health_port = cfg.weights.health_port ? static_cast<uint16_t>(cfg.weights.health_port) : free_loopback_port();
  p.argv.insert(p.argv.end(), {"--weight-cache-health-host", "127.0.0.1", "--weight-cache-health-port", std::to_string(p.health_port)});
  if (!cfg.weights.socket_dir.empty()) p.argv.insert(p.argv.end(), {"--weight-cache-socket-dir", cfg.weights.socket_dir});
  p.checkpoint = identities(watched_files(cfg, flags));

  SpawnSpec spec;
  spec.argv = p.argv;
  spec.env = cfg.engine.env;
  spec.working_dir = cfg.engine.working_dir;
  if (!cfg.gpus.empty()) spec.env["CUDA_VISIBLE_DEVICES"] = join(cfg.gpus, ",");
  m_host.set_status("Starting the weight daemons (vllm preload)");
  spdlog::info("vllm preload: {}", words_for_log(p.argv));
  Loop& loop = m_host.loop();
  p.spawned_at = p.last_output = loop.now_s();
  Preload* raw = &p;
  auto s = spawn_supervised(loop, spec, "vllm-preload", [&loop, raw](const std::string& l) {
    raw->last_output = loop.now_s();
    raw->tail.push_back(l.substr(0, 300));
    if (raw->tail.size() > 20) raw->tail.pop_front();
  }, p);
  if (!s.ok()) {
    p.failed = p.exited = true;
    p.error = s.error().message;
    spdlog::error("vllm preload: {}; the engine will load from disk", p.error);
    loop.post([this] { m_host.raise(Event::kDaemonsFailed); });
    return;
  }
  if (cfg.weights.watch_interval_s > 0 && !p.checkpoint.empty())
    m_watch_timer.start(cfg.weights.watch_interval_s, [this] { watch_checkpoint(); }, cfg.weights.watch_interval_s);
  m_poll_timer.start(kPreloadPollS, [this] { poll(); });
}

// While loading: /health answers 200 once every rank serves (vLLM docs/features/preload.md).
void VllmPreload::poll() {
  if (!m_preload || m_preload->exited || m_preload->stopping || m_preload->ready || !m_host.awaiting_daemons()) return;
  Preload& p = *m_preload;
  const Config& cfg = m_host.config();
  const double now = m_host.loop().now_s();
  if (now - p.last_output > cfg.weights.load_timeout_s) {
    p.failed = true;
    p.error = "no output and no /health for " + std::to_string(static_cast<int>(cfg.weights.load_timeout_s)) + " s";
    spdlog::error("vllm preload: {}; stopping it, the engine will load from disk", p.error);
    signal_group(p.pid, -1, SIGKILL);
    return;  // preload_exited raises kPreloadDied
  }
  if (p.probe_in_flight) return;
  p.probe_in_flight = true;
  ReadinessConfig rc;
  rc.health_path = "/health";
  const pid_t pid = p.pid;
  const uint16_t port = p.health_port;
  run_in_pool<ProbeResult>(
      m_host.loop(), [port, rc] { return probe_health("127.0.0.1", port, rc, 2.0); },
      [this, pid](ProbeResult r) {
        if (!m_preload || m_preload->pid != pid) return;
        Preload& pl = *m_preload;
        pl.probe_in_flight = false;
        if (pl.exited || pl.stopping || !m_host.awaiting_daemons()) return;
        const double t = m_host.loop().now_s();
        if (r.ok) {
          pl.ready = true;
          pl.ready_at = t;
          spdlog::info("vllm preload ready in {:.2f} s (/health on 127.0.0.1:{})", pl.ready_at - pl.spawned_at, pl.health_port);
          m_host.raise(Event::kDaemonsReady);
          return;
        }
        char b[200];
        std::snprintf(b, sizeof b, "Loading weights: vllm preload (pid %d) for %.0f s; waiting for its /health on 127.0.0.1:%u",
                      static_cast<int>(pl.pid), t - pl.spawned_at, static_cast<unsigned>(pl.health_port));
        // Alive and talking: keep systemd's start timeout from firing (as for our own daemons' progress).
        if (m_host.status_text().rfind("Loading weights: vllm preload", 0) != 0 || t - m_last_extend >= kExtendEveryS) {
          m_last_extend = t;
          m_host.set_status(b, "EXTEND_TIMEOUT_USEC=" + std::to_string(30'000'000) + "\n");
        }
        m_poll_timer.start(kPreloadPollS, [this] { poll(); });
      });
}

void VllmPreload::stop() {
  m_watch_timer.stop();
  if (!m_preload || m_preload->exited) {
    m_host.loop().post([this] { m_host.raise(Event::kDaemonsStopped); });
    return;
  }
  Preload& p = *m_preload;
  p.stopping = true;
  // vLLM: "SIGINT/SIGTERM to the vllm preload process terminates all daemon ranks, which unlinks their
  // sockets and releases the GPU memory". The ranks are its children, in its process group.
  stop_group(m_kill_timer, {.pgid = p.pid, .grace_s = kPreloadStopGraceS, .what = "the vllm preload's process group",
                            .term_to = TermTo::kLeader});
}

void VllmPreload::preload_exited(int status) {
  Preload& p = *m_preload;
  p.exited = true;
  p.reader.reset();
  const std::string how = WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                                            : "signal " + std::to_string(WTERMSIG(status));
  if (p.stopping) {
    // Its ranks hold the GPU memory: wait until the whole group is gone before anything comes next.
    const pid_t pgid = p.pid;
    // Re-armed through the timer, holding itself only weakly (as the drain's step does): a closure
    // that owned itself leaked on every preload stop (LeakSanitizer).
    auto tick = std::make_shared<std::function<void()>>();
    std::weak_ptr<std::function<void()>> weak = tick;
    *tick = [this, pgid, how, weak] {
      if (group_alive(pgid)) {
        if (auto t = weak.lock()) m_poll_timer.start(0.02, [t] { (*t)(); });
        return;
      }
      m_kill_timer.stop();
      spdlog::info("vllm preload pid {} stopped ({})", pgid, how);
      m_host.raise(Event::kDaemonsStopped);  // stopping: exit; loading: a reload stopped it, start it again
    };
    (*tick)();
    return;
  }
  if (p.failed) p.error += " (killed: " + how + ")";  // we killed it: the reason is already there
  else p.error = "exited unexpectedly: " + how;
  p.failed = true;
  // vLLM ends a failed start with the exception's line ("...Error: ...") after the traceback: name it.
  for (auto it = p.tail.rbegin(); it != p.tail.rend(); ++it)
    if (it->find("Error") != std::string::npos || it->find("error:") != std::string::npos) {
      p.error += ": " + *it;
      break;
    }
  m_watch_timer.stop();
  if (m_host.terminal()) return;
  // While loading the engine starts anyway and loads from disk; else an engine mapped to its weights
  // (zero_copy) loses them with it: the table reloads it and restarts the engine.
  if (m_host.awaiting_daemons())
    spdlog::error("vllm preload pid {} died while loading ({}); the engine will load from disk", p.pid, how);
  else
    spdlog::error("vllm preload pid {} died ({}); reloading it", p.pid, how);
  m_host.raise(Event::kPreloadDied);
}

// vLLM's fingerprint covers only the safetensors headers (vLLM issue #59647): a checkpoint rewritten with the
// same layout would be served from the daemon's old weights. So compare the files' identities (dev, inode,
// size, mtime, ctime) with those at the preload's start, and reload it ourselves when they differ.
void VllmPreload::watch_checkpoint() {
  if (!m_preload || m_preload->exited || m_preload->stopping || !m_preload->ready) return;
  std::vector<std::string> files;
  for (const auto& id : m_preload->checkpoint) files.push_back(id.path);
  // New files in a watched directory count too.
  for (const auto& f : watched_files(m_host.config(), m_host.engine_flags())) {
    auto id = identify_file(f);
    std::string path = id.ok() ? id->path : f;
    if (std::find(files.begin(), files.end(), path) == files.end()) files.push_back(f);
  }
  const std::string change = identity_change(m_preload->checkpoint, identities(files));
  if (change.empty() || !m_preload->stale.empty()) return;
  m_preload->stale = change;
  spdlog::warn("checkpoint changed under the same path ({}); vLLM's cache key would not notice (vLLM issue #59647): "
               "reloading vllm preload, then restarting the engine", change);
  m_host.raise(Event::kCheckpointChanged);
}

std::optional<StartRefusal> VllmPreload::refusal() const {
  if (!m_preload || m_preload->exited)
    return StartRefusal{"daemons_not_ready", "vllm preload is not running" + (m_preload && !m_preload->error.empty() ? " (" + m_preload->error + ")" : std::string())};
  if (!m_preload->ready) return StartRefusal{"daemons_not_ready", "vllm preload is not ready"};
  if (!m_preload->stale.empty()) return StartRefusal{"nothing_held", "the checkpoint changed under vllm preload: " + m_preload->stale};
  // copy mode: the engine takes the weights and the daemon releases its cache (vLLM docs).
  if (m_preload->gave_weights) return StartRefusal{"nothing_held", "vllm preload gave its weights to the last engine (weights.mode = copy)"};
  return std::nullopt;
}

std::vector<status::DaemonRowStatus> VllmPreload::rows() const {
  if (!m_preload) return {};
  const Preload& p = *m_preload;
  status::DaemonRowStatus row;
  row.gpu = row.kind = "vllm-preload";
  row.pid = p.pid;
  row.state = p.exited && p.stopping ? "stopped" : p.failed ? "failed" : p.exited ? "dead" : p.ready ? "ready" : "loading";
  row.error = p.error;
  status::PreloadDetails details{"http://127.0.0.1:" + std::to_string(p.health_port) + "/health", redact_flags(p.argv), {}};
  for (const auto& id : p.checkpoint) details.watched_files.push_back(id.path);
  row.preload = std::move(details);
  return {std::move(row)};
}

}  // namespace

std::unique_ptr<DaemonSet> make_vllm_preload(DaemonHost& host) { return std::make_unique<VllmPreload>(host); }

}  // namespace fr::supervisor

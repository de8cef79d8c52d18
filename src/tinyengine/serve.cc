#include "tinyengine/serve.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string_view>
#include <thread>

#include <spdlog/spdlog.h>

#include "tinyengine/faults.h"
#include "tinyengine/kv_cache.h"
#include "tinyengine/kv_report.h"
#include "tinyengine/server.h"
#include "tinyengine/tp.h"

namespace fr::te {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// True while the main thread waits at a standby gate (the signal thread and die-parked-after read it).
std::atomic<bool> g_parked{false};
// When this process, started as a standby, was released (its readiness is timed from there).
std::optional<Clock::time_point> g_released_at;

// Written atomically so a reader never sees a partial number.
void write_port_file(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << port << "\n";
  }
  std::rename(tmp.c_str(), path.c_str());
}

// The signal thread: SIGTERM/SIGINT are blocked in every thread and taken here with sigwait.
// Before the model is ready a stop request exits at once (nothing is in flight); afterwards it asks the
// main thread to shut down gracefully. With the ignore-SIGTERM fault, the first request opens a window
// during which the engine keeps serving and ignores further signals.
class SignalWaiter {
 public:
  explicit SignalWaiter(double ignore_s) : m_ignore_s(ignore_s) {
    sigemptyset(&m_set);
    sigaddset(&m_set, SIGTERM);
    sigaddset(&m_set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &m_set, nullptr);
  }
  void start(EngineServer* server) {
    m_server = server;
    std::thread([this] { loop(); }).detach();
  }
  void wait_for_stop() {
    std::unique_lock lk(m_mutex);
    m_cv.wait(lk, [this] { return m_stop; });
  }

 private:
  void loop() {
    int sig = 0;
    sigwait(&m_set, &sig);
    if (m_ignore_s > 0) {
      spdlog::warn("fault: ignoring {} for {} s", strsignal(sig), m_ignore_s);
      const auto until = Clock::now() + std::chrono::duration<double>(m_ignore_s);
      while (Clock::now() < until) {
        const double left = std::chrono::duration<double>(until - Clock::now()).count();
        timespec ts{static_cast<time_t>(left), static_cast<long>((left - static_cast<double>(static_cast<time_t>(left))) * 1e9)};
        if (sigtimedwait(&m_set, nullptr, &ts) > 0) spdlog::warn("fault: signal ignored");
      }
    }
    // A parked standby is still loading (it has not been released): nothing is in flight either.
    if (m_server->state() == EngineServer::State::kLoading) {
      spdlog::info("{} while {}: exiting", strsignal(sig), g_parked ? "parked at the standby gate" : "loading");
      std::fflush(nullptr);
      std::_Exit(kExitOk);
    }
    spdlog::info("{}: shutting down", strsignal(sig));
    std::lock_guard lk(m_mutex);
    m_stop = true;
    m_cv.notify_all();
  }

  sigset_t m_set;
  double m_ignore_s;
  EngineServer* m_server = nullptr;
  std::mutex m_mutex;
  std::condition_variable m_cv;
  bool m_stop = false;
};

Status check_flags(const ServeOptions& o, const CheckpointInfo* info) {
  auto bad = [](const std::string& m) { return make_error(Errc::kInvalidArgument, m); };
  if (o.tensor_parallel_size < 1 || o.tensor_parallel_size > 8) return bad("--tensor-parallel-size must be 1..8");
  if (o.tensor_parallel_size > 1 && o.device != "cpu")
    return bad("--tensor-parallel-size " + std::to_string(o.tensor_parallel_size) +
               " runs on the CPU forward only: use --device cpu (the host backend's daemons, one per rank)");
  if (o.tp_rank < 0 || o.tp_rank >= o.tensor_parallel_size) return bad("--tp-rank must be below --tensor-parallel-size");
  if (!(o.tp_timeout_s > 0)) return bad("--tp-timeout must be > 0");
  if (o.gpu_memory_utilization <= 0 || o.gpu_memory_utilization > 1)
    return bad("--gpu-memory-utilization must be in (0, 1]");
  if (o.device != "cpu" && cuda_ordinal(o.device) < 0) return bad("--device must be 'cpu' or 'cuda:N'");
  if (!info) return {};
  if (o.max_model_len > info->config.max_seq)
    return bad("--max-model-len " + std::to_string(o.max_model_len) + " exceeds the checkpoint's " +
               std::to_string(info->config.max_seq));
  const bool f32 = info->config.dtype == DType::kF32;
  if ((o.dtype == "float32" && !f32) || (o.dtype == "bfloat16" && f32))
    return bad("--dtype " + o.dtype + " does not match the checkpoint (" + dtype_name(info->config.dtype) + ")");
  return {};
}

// The standby gate at `level` (docs/standby.md), with the standby faults. False: the gate failed (logged).
bool pass_gate(const char* level, const FaultOptions& f) {
  const char* configured = std::getenv("FASTRESTART_STANDBY_LEVEL");
  const bool parks = is_standby() && configured && std::string_view(configured) == level;
  if (parks) {
    spdlog::info("standby: parked at {}", level);
    g_parked = true;
    if (f.standby == StandbyFault::kDieParkedAfter) {
      const double s = f.standby_die_after_s;
      std::thread([s] {
        std::this_thread::sleep_for(std::chrono::duration<double>(s));
        if (!g_parked) return;
        spdlog::warn("fault: standby dying {} s after parking", s);
        std::fflush(nullptr);
        std::_Exit(kExitFailure);
      }).detach();
    }
  }
  auto r = standby_gate(level);
  g_parked = false;
  if (!r) {
    spdlog::error("standby gate: {}", r.error().message);
    return false;
  }
  if (*r) {
    g_released_at = Clock::now();
    spdlog::info("standby: released at {}", level);
    if (f.standby == StandbyFault::kExitAfterRelease) {
      spdlog::warn("fault: standby exiting with code 1 after its release");
      std::fflush(nullptr);
      std::_Exit(kExitFailure);
    }
  }
  return true;
}

// The CPU forward's prefix cache: on the leased host arena when there is one, else in private memory;
// null with --no-enable-prefix-caching or on the CUDA forward. An arena too small for one block falls back
// to private memory (logged). Logs one "kv cache:" line with what the recovery found.
Result<std::shared_ptr<KvCache>> open_kv_cache(const ServeOptions& o, const LoadedModel& m, const KvArenaLease* arena) {
  if (!o.enable_prefix_caching) {
    spdlog::info("kv cache: prefix caching off (--no-enable-prefix-caching)");
    return std::shared_ptr<KvCache>();
  }
  if (m.cuda) {
    spdlog::info("kv cache: the CUDA forward keeps its own per-request KV rows (no prefix caching)");
    return std::shared_ptr<KvCache>();
  }
  FR_ASSIGN(const uint64_t fp, kv_weights_fingerprint(m.info.config, m.set.lookup()));
  KvIdentity id{m.info.config, fp, o.block_size};
  std::unique_ptr<KvCache> c;
  if (arena && arena->host) {
    auto a = KvCache::open(id, arena->base, arena->bytes, arena->generation);
    if (a) c = std::move(*a);
    else spdlog::warn("kv cache: not on the arena ({}); in private memory", a.error().message);
  } else if (arena) {
    spdlog::warn("kv cache: the arena is device memory; the CPU forward's cache is in private memory");
  }
  if (!c) {
    FR_ASSIGN(c, KvCache::open_private(id, static_cast<uint64_t>(o.kv_cache_blocks)));
  }
  spdlog::info("kv cache: {}", c->summary());
  return std::shared_ptr<KvCache>(std::move(c));
}

}  // namespace

bool FaultOptions::any() const {
  return startup_delay_s > 0 || exit_after_startup || exit_after_requests > 0 || abort_after_requests > 0 ||
         cuda_oom || vllm_free_memory || hang_after_requests >= 0 || grow_memory || ignore_sigterm_s > 0 ||
         spawn_worker || token_delay_s > 0 || standby != StandbyFault::kNone || tp_hang_rank >= 0 || tp_linger_s > 0;
}

int run_serve(const ServeOptions& o) {
  const auto t0 = Clock::now();
  if (auto s = check_flags(o, nullptr); !s) {
    spdlog::error("{}", s.error().message);
    return kExitUsage;
  }
  if (o.tp_rank > 0) return run_tp_worker(o);  // a rank rank 0 started: no HTTP, no gates
  // A listening socket handed down by the supervisor (docs/listen-socket.md), taken before any child or
  // thread exists: the variables are gone and the descriptor close-on-exec for what this process starts.
  auto inherited = inherited_listen_sockets();
  if (!inherited) {
    spdlog::error("listening socket: {}", inherited.error().message);
    return kExitFailure;
  }
  const int passed_fd = inherited->serve;
  const int probe_fd = passed_fd >= 0 ? inherited->probe : -1;
  const auto& f = o.faults;
  if (f.any()) spdlog::warn("fault injection is on (test option)");
  int worker = 0;
  if (f.spawn_worker) {  // before any thread exists
    worker = spawn_worker();
    spdlog::info("fault: spawned worker pid {}", worker);
  }
  // Never freed: its detached thread may still be unlocking its mutex as run_serve returns.
  SignalWaiter& signals = *new SignalWaiter(f.ignore_sigterm_s);
  EngineServer server(o);
  server.set_worker_pid(worker);
  signals.start(&server);
  // A standby (docs/standby.md) binds its port only after its release, so it never answers for the live
  // engine; a normal engine binds first and answers /health 503 while it loads. never-park ignores the gates.
  const bool standby = is_standby() && f.standby != StandbyFault::kNeverPark;
  if (is_standby() && f.standby == StandbyFault::kNeverPark) spdlog::warn("fault: standby that never parks");
  // With a socket handed down, nothing is accepted before the model can serve: connections wait in the
  // kernel's queue instead of getting a 503 (the socket is adopted here, accepted on after set_ready).
  bool listening = false;
  const auto listen = [&](const char* what) {
    if (passed_fd >= 0) {
      if (auto s = server.adopt(passed_fd); !s) return s;
      if (probe_fd >= 0) {
        if (auto s = server.adopt_probe(probe_fd); !s) return s;
        spdlog::info("holding the private endpoint passed as fd {}: fastrestartd's checks, accepted once ready", probe_fd);
      }
      listening = true;
      if (!o.port_file.empty()) write_port_file(o.port_file, server.port());
      spdlog::info("holding the listening socket passed as fd {} (port {}; {}): accepting once ready", passed_fd,
                   server.port(), what);
      return Status{};
    }
    if (auto s = server.bind(); !s) return s;
    server.start();
    listening = true;
    if (!o.port_file.empty()) write_port_file(o.port_file, server.port());
    spdlog::info("listening on {}:{} ({})", o.host, server.port(), what);
    return Status{};
  };
  if (!standby) {
    if (auto s = listen("loading"); !s) {
      spdlog::error("{}", s.error().message);
      return kExitFailure;
    }
  } else if (f.standby == StandbyFault::kBindEarly && passed_fd >= 0) {
    // A socket of its own besides the one handed down: the supervisor holds host:port, so the second
    // loopback address stands in, as below.
    if (listen_socket(o.host, o.port) >= 0 || listen_socket("127.0.0.2", o.port) >= 0)
      spdlog::warn("fault: bind-early: listening on a socket of its own on port {}, waiting at the gate", o.port);
    else
      spdlog::warn("fault: bind-early: could not bind port {}; waiting at the gate without it", o.port);
  } else if (f.standby == StandbyFault::kBindEarly) {
    if (auto s = listen("fault: a standby bound before its release"); !s) {
      // The live engine holds host:port. Another loopback address on the same port is still free, and a
      // socket listening there is what fastrestartd's port check must find (docs/standby.md).
      if (listen_socket("127.0.0.2", o.port) >= 0)
        spdlog::warn("fault: bind-early: {}; listening on 127.0.0.2:{} instead, waiting at the gate", s.error().message, o.port);
      else
        spdlog::warn("fault: bind-early: {}; waiting at the gate without the port", s.error().message);
    }
  }

  if (f.startup_delay_s > 0) {
    spdlog::info("fault: startup delay {} s", f.startup_delay_s);
    std::this_thread::sleep_for(std::chrono::duration<double>(f.startup_delay_s));
    server.set_startup_delay(f.startup_delay_s);
  }
  // pre_gpu: the GPU-free startup work (the startup delay stands for it) is done; CUDA and the weights are next.
  if (standby && !pass_gate("pre_gpu", f)) {
    std::fflush(nullptr);
    std::_Exit(kExitFailure);
  }
  if (f.vllm_free_memory) {
    print_vllm_free_memory(o.gpu_memory_utilization);
    std::_Exit(kExitFailure);
  }
  // Tensor parallel: the other ranks start now (after a pre_gpu standby's release: a parked standby is
  // one process) and load their shards alongside this one.
  const int tp_size = o.tensor_parallel_size;
  std::unique_ptr<TpGroup> group;
  LoadOptions load = o.load;
  TpAgree agree;
  TpReduce reduce;
  if (tp_size > 1) {
    auto dev = rank_device(0, tp_size, load.device);
    if (!dev) {
      spdlog::error("{}", dev.error().message);
      std::_Exit(kExitUsage);
    }
    load.device = *dev;
    load.tp = {tp_size, 0};
    auto g = TpGroup::start(o.argv, tp_size, o.tp_timeout_s, f.tp_linger_s <= 0);
    if (!g) {
      spdlog::error("tensor parallel: {}", g.error().message);
      std::_Exit(kExitFailure);
    }
    group = std::move(*g);
    const double load_timeout = o.load.connect_timeout_s + o.load.state_timeout_s + 600;
    agree = [&group, load_timeout](bool hit, const std::string& reason) { return group->agree(hit, reason, load_timeout); };
    reduce = [g = group.get()](int block, const float* a, float* out, int d) { return g->reduce(block, a, out, d); };
  }
  auto loaded = load_model(o.model, load, agree, reduce);
  if (loaded && group) {
    if (auto s = group->collect_ready(o.load.connect_timeout_s + o.load.state_timeout_s + 600); !s) loaded = s.error();
  }
  if (!loaded) {
    spdlog::error("load {}: {}", o.model, loaded.error().to_string());
    std::fflush(nullptr);
    std::_Exit(kExitFailure);
  }
  if (auto s = check_flags(o, &loaded->info); !s) {
    spdlog::error("{}", s.error().message);
    std::_Exit(kExitUsage);
  }
  if (f.cuda_oom) {
    print_cuda_oom();
    std::_Exit(kExitFailure);
  }
  const auto& r = loaded->report;
  if (group) {
    group->set_rank0({{"rank", 0}, {"pid", ::getpid()}, {"device", load.device}, {"path", r.path}, {"reason", r.reason},
                      {"weight_bytes", r.weight_bytes}, {"published", r.published},
                      {"memory_utilization", rank_memory_utilization(0, o.gpu_memory_utilization)}});
    server.set_tp(group.get(), tp_size);
  }
  auto tw = Clock::now();
  if (auto g = loaded->generate(tokenize("warmup"), 1, 0); !g.error.empty()) {
    spdlog::error("warm-up forward failed: {}", g.error);
    std::_Exit(kExitFailure);
  }
  const double warmup_s = since(tw);
  std::string phases;
  for (const auto& [name, s] : r.phases) phases += " " + name + "=" + std::to_string(s) + "s";
  spdlog::info("load path={}{} weight_bytes={} disk_bytes_read={}{}{} warmup={}s", r.path,
               r.mode.empty() ? "" : " mode=" + r.mode, r.weight_bytes, r.disk_bytes_read,
               r.reason.empty() ? "" : " reason=\"" + r.reason + "\"", phases, warmup_s);
  double ready_s = since(t0);
  const std::string path = r.path;
  auto model = std::make_unique<LoadedModel>(std::move(*loaded));
  std::string graph_sum;  // the graph check's checksum before any snapshot
  std::shared_ptr<CudaModel> cuda = model->cuda;
  if (o.cuda_graph_check) {
    Result<std::string> sum = make_error(Errc::kInvalidArgument, "--cuda-graph-check needs --device cuda:N");
    if (cuda) {
      if (auto c = cuda->capture_weight_graph(); !c) sum = c.error();
      else sum = cuda->replay_weight_graph();
    }
    if (!sum) {
      spdlog::error("cuda graph check: {}", sum.error().message);
      std::_Exit(kExitFailure);
    }
    graph_sum = *sum;
    spdlog::info("cuda graph check: captured a graph over the weights, checksum {}", graph_sum);
  }
  // warmed: loaded, warm-up forward done; the port, the snapshot exchange and readiness come after the release.
  if (standby && !pass_gate("warmed", f)) {
    std::fflush(nullptr);
    std::_Exit(kExitFailure);
  }
  // --kv-arena-bytes: leased after the warmed gate (a standby at its release, once the engine before it is
  // gone; a live start at once) and before serving. Either way one fastrestart-arena: line says what came of
  // it (docs/supervisor.md, "KV arenas"); a lease that fails is a fallback, and the engine serves without.
  std::optional<KvArenaLease> kv_arena;
  if (o.kv_arena_bytes > 0) {
    LoadOptions al = o.load;
    if (auto dev = rank_device(0, 1, al.device)) al.device = *dev;  // host:<gpu> under fastrestartd
    if (auto l = lease_kv_arena(o.kv_arena_bytes, o.kv_arena_wait_s, al)) {
      if (const std::string line = kv_arena_line(*l); !line.empty()) spdlog::info("{}", line);
      kv_arena = std::move(*l);
      if (o.kv_arena_touch && kv_arena->host)
        std::memset(kv_arena->base, 0x6b, kv_arena->bytes);
    } else {
      if (const std::string line = kv_arena_fallback_line(l.error().message); !line.empty()) spdlog::warn("{}", line);
    }
  }
  // The prefix cache, built (and on an arena recovered) before anything is served (docs/kv-survival.md).
  if (auto kv = open_kv_cache(o, *model, kv_arena ? &*kv_arena : nullptr)) {
    model->kv_cache = std::move(*kv);
  } else {
    spdlog::error("kv cache: {}", kv.error().message);
    std::fflush(nullptr);
    std::_Exit(kExitFailure);
  }
  // Its survival and hits for fastrestartd's status (kv_report.h): the line now, the counters file as it serves.
  const std::shared_ptr<KvReport> kv_report = KvReport::start(model->kv_cache);
  if (!listening) {
    if (auto s = listen("released standby"); !s) {
      spdlog::error("{}", s.error().message);
      std::fflush(nullptr);
      std::_Exit(kExitFailure);
    }
  }
  std::shared_ptr<void> agent;
  if (o.snapshot_agent && group && std::getenv("FASTRESTART_SNAPSHOT_SOCKET"))
    spdlog::warn("snapshot exchange unavailable: snapshots are tensor-parallel 1 only");
  if (o.snapshot_agent && !group) {
    auto a = start_snapshot_agent(
        *model, kv_arena ? &*kv_arena : nullptr, [&server]() -> Status { server.pause_for_snapshot(); return {}; },
        [&server, cuda, graph_sum, kv = model->kv_cache, kv_report, arena = kv_arena ? &*kv_arena : nullptr]() -> Status {
          if (kv && kv->on_arena() && arena) {  // the arena was leased again: trust nothing from before
            kv->resync(kv_arena_generation(*arena));
            spdlog::info("kv cache after resume: {}", kv->summary());
            if (kv_report) kv_report->rebuilt();
          }
          if (!graph_sum.empty()) {
            auto now = cuda->replay_weight_graph();
            if (!now) return now.error();
            if (*now != graph_sum)
              return make_error(Errc::kCorrupt, "cuda graph check: the graph captured over the weights reads " + *now +
                                                    " after the resume, " + graph_sum + " before");
            spdlog::info("cuda graph check after resume: checksum {} (matches)", *now);
          }
          server.resume_after_snapshot();
          return {};
        });
    // Serving matters more than being snapshottable: without the exchange a create is refused, with this reason.
    if (!a) spdlog::warn("snapshot exchange unavailable: {}", a.error().message);
    else agent = std::move(*a);
    if (agent) spdlog::info("snapshot exchange on {}", std::getenv("FASTRESTART_SNAPSHOT_SOCKET"));
  }
  if (g_released_at) ready_s = since(*g_released_at);
  const std::shared_ptr<KvCache> kv = model->kv_cache;
  server.set_ready(std::move(model), warmup_s, ready_s);
  if (passed_fd >= 0) server.start();  // the adopted socket: the first connection accepted is served
  std::string kv_fields;
  if (kv) {
    kv_fields = " kv_recovered=" + std::to_string(kv->recovery().recovered) +
                " kv_dropped=" + std::to_string(kv->recovery().dropped_total());
  }
  spdlog::info("ready in {:.3f} s{} (path={}{})", ready_s, g_released_at ? " after the standby's release" : "", path,
               kv_fields);

  if (f.exit_after_startup) {
    spdlog::warn("fault: exiting with code {} after startup", f.exit_code);
    std::fflush(nullptr);
    std::_Exit(f.exit_code);
  }
  if (f.hang_after_requests == 0) spdlog::warn("fault: hanging");
  if (f.grow_memory) {
    spdlog::warn("fault: growing host memory at {} MiB/s", f.grow_memory_mib_per_s);
    start_memory_growth(f.grow_memory_mib_per_s);
  }

  signals.wait_for_stop();
  if (group) group->shutting_down();  // the ranks end when this process closes their sockets
  if (!server.stop(o.shutdown_grace_s)) {
    spdlog::warn("grace period of {} s ran out with requests in flight; exiting", o.shutdown_grace_s);
    std::fflush(nullptr);
    std::_Exit(kExitOk);
  }
  agent.reset();
  spdlog::info("stopped");
  return kExitOk;
}

int run_gen(const GenOptions& options, const std::string& out_dir) {
  auto files = generate_checkpoint(options, out_dir);
  if (!files) {
    spdlog::error("gen: {}", files.error().to_string());
    return kExitFailure;
  }
  for (const auto& f : *files) std::printf("%s\n", f.c_str());
  spdlog::info("gen: {} file(s), {} weight bytes, config {}", files->size(), total_weight_bytes(options.config),
               options.config.to_json());
  return kExitOk;
}

}  // namespace fr::te

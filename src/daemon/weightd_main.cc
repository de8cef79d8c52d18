// fastrestart-weightd: keeps one GPU's (or the host's) model weights resident across engine restarts.
// Usage and exit codes: docs/weightd.md. Protocol: docs/protocol.md.
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "daemon/server.h"
#include "protocol/arena.h"

namespace {

using namespace fr::daemon;

int run(int argc, char** argv) {
  CLI::App app{"fastrestart-weightd: per-GPU weight daemon (docs/weightd.md)"};
  std::string backend_name = "cuda", gpu = "0", socket_dir, group, log_level = "info", dtype;
  std::vector<std::string> preload_files, config_kv, tensors;
  int threads = 8, test_delay_ms = 0;
  double publish_timeout_s = 600, attach_wait_limit_s = 3600;
  int max_arenas = 4;
  int64_t arena_uid = -1;
  uint64_t max_arena_bytes = 0;
  std::vector<std::string> arena_names;
  // Tests only: the same delay from the environment, so a supervisor's tests can slow the daemons it starts.
  if (const char* e = std::getenv("FASTRESTART_TEST_READ_DELAY_MS"); e && *e) test_delay_ms = std::atoi(e);
  // Tests only: each read task waits until this file exists, so a test sees the load in progress for as
  // long as it needs and then releases it (no window to hit).
  const char* test_gate = std::getenv("FASTRESTART_TEST_READ_GATE");
  bool version = false;
  app.add_option("--backend", backend_name, "cuda (GPU memory, CUDA VMM) or host (memfd)")->check(CLI::IsMember({"cuda", "host"}));
  auto* gpu_opt = app.add_option("--gpu", gpu, "GPU index or UUID (GPU-...); host backend: a device name (daemon host-NAME)");
  app.add_option("--socket-dir", socket_dir, "directory for the socket and lock (default /run/fastrestart as root)");
  app.add_option("--group", group, "also allow members of this group (directory 0750, socket 0660)");
  app.add_option("--preload", preload_files, "safetensors file to load at start (repeat for shards)");
  app.add_option("--config", config_kv, "key=value config field of the preloaded entry's key (repeat)");
  app.add_option("--tensors", tensors, "only these tensors of the preload (repeat)");
  app.add_option("--dtype", dtype, "require this dtype of every preloaded tensor (e.g. BF16)");
  app.add_option("--reader-threads", threads, "parallel readers of the pipelined loader")->check(CLI::Range(1, 64));
  app.add_option("--publish-timeout-s", publish_timeout_s,
                 "abort a publish not committed this long after it began, closing its connection (default 600)")
      ->check(CLI::Range(1.0, 86400.0));
  app.add_option("--attach-wait-limit-s", attach_wait_limit_s,
                 "wait at most this long in an attach for a loading entry, whatever wait_s asks (default 3600)")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--max-arenas", max_arenas, "hold at most this many KV arenas (default 4)")->check(CLI::Range(0, 64));
  app.add_option("--arena-uid", arena_uid, "only processes of this uid (the engine's) lease or release KV arenas (default: the daemon's uid)")
      ->check(CLI::Range(int64_t{0}, int64_t{4294967294}));
  app.add_option("--arena-name", arena_names, "allow only this KV arena name (repeat; default: any valid name)");
  app.add_option("--max-arena-bytes", max_arena_bytes, "hold at most this many bytes in all KV arenas together (default: the machine's physical memory)");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error");
  app.add_flag("--version", version, "print the version and exit");
  app.add_option("--test-read-delay-ms", test_delay_ms, "tests only: sleep this long before each 64 MiB read task")
      ->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  if (version) {
    std::printf("fastrestart-weightd %s\n", FASTRESTART_VERSION);
    return kExitOk;
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [weightd] [%l] %v");

  PreloadRequest pre;
  pre.files = preload_files;
  pre.tensors = tensors;
  for (const auto& kv : config_kv) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      spdlog::error("--config {}: expected key=value", kv);
      return kExitUsage;
    }
    pre.config[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (!dtype.empty()) {
    pre.dtype = fr::dtype_from_name(dtype);
    if (!pre.dtype) {
      spdlog::error("--dtype {}: unknown dtype (use safetensors names: BF16, F16, F32, ...)", dtype);
      return kExitUsage;
    }
  }

  // Block the stop signals in every thread; Server::run() takes them through a signalfd.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<Backend> backend;
  if (backend_name == "host") {
    auto b = make_host_backend(gpu_opt->count() ? gpu : "");
    if (!b.ok()) {
      spdlog::error("--gpu: {}", b.error().message);
      return kExitUsage;
    }
    backend = std::move(*b);
  } else {
    auto b = make_cuda_backend(gpu);
    if (!b.ok()) {
      spdlog::error("{}", b.error().message);
      return kExitNoGpu;
    }
    backend = std::move(*b);
  }
  ServerOptions opts;
  opts.socket_dir = socket_dir;
  opts.reader_threads = threads;
  opts.test_read_hold = {test_delay_ms, test_gate ? test_gate : ""};
  opts.publish_timeout_s = publish_timeout_s;
  opts.attach_wait_limit_s = attach_wait_limit_s;
  opts.arenas.max_arenas = static_cast<size_t>(max_arenas);
  opts.arenas.uid = arena_uid >= 0 ? static_cast<uid_t>(arena_uid) : ::geteuid();
  for (const auto& n : arena_names) {
    if (auto s = fr::proto::check_arena_name(n, "--arena-name"); !s.ok()) {
      spdlog::error("{}", s.error().message);
      return kExitUsage;
    }
    opts.arenas.names.insert(n);
  }
  opts.arenas.max_bytes = max_arena_bytes ? max_arena_bytes
                                          : static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (!group.empty()) {
    auto g = fr::resolve_group(group);
    if (!g.ok()) {
      spdlog::error("--group: {}", g.error().message);
      return kExitUsage;
    }
    opts.group = *g;
  }
  auto server = Server::create(*backend, opts);
  if (!server.ok()) {
    spdlog::error("{}", server.error().message);
    return server.error().code == fr::Errc::kBusy ? kExitBusy : kExitUsage;
  }
  if (!pre.files.empty()) {
    auto fp = (*server)->preload(pre, false);
    if (!fp.ok()) {
      spdlog::error("--preload: {}", fp.error().message);
      return kExitUsage;
    }
  }
  auto s = (*server)->run();
  if (!s.ok()) {
    spdlog::error("{}", s.error().message);
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }

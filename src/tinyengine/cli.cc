// The command line: a table of subcommands, each a CLI11 subcommand filling one options struct.
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "tinyengine/faults.h"
#include "tinyengine/serve.h"

namespace fr::te {
namespace {

std::vector<std::string> g_argv;  // the command line, for the tensor-parallel ranks rank 0 starts

void add_serve_flags(CLI::App& app, ServeOptions& o, std::string& format, std::string& mode, std::string& fallback,
                     std::string& publish) {
  app.add_option("model", o.model, "checkpoint: a .safetensors file or a directory of them")->required();
  app.add_option("--served-model-name", o.served_model_name, "model id in the API (default: the model path)");
  app.add_option("--host", o.host, "address to listen on")->capture_default_str();
  app.add_option("--port", o.port, "port to listen on; 0 picks a free one (see --port-file)")->capture_default_str();
  app.add_option("--port-file", o.port_file, "write the bound port here once listening");
  app.add_option("--device", o.device, "cpu|cuda:N: where the forward runs and the weights live")
      ->capture_default_str();
  app.add_option("--gpu-memory-utilization", o.gpu_memory_utilization, "accepted and reported (0, 1]")
      ->capture_default_str();
  app.add_option("--max-model-len", o.max_model_len, "context limit (default: the checkpoint's)");
  app.add_option("--tensor-parallel-size", o.tensor_parallel_size, "ranks, one process each (1..8; --device cpu)")
      ->capture_default_str();
  app.add_option("--tp-timeout", o.tp_timeout_s, "seconds a rank may take to answer before the engine is broken")
      ->capture_default_str();
  app.add_option("--tp-rank", o.tp_rank, "set by rank 0 for the ranks it starts")->group("");
  app.add_option("--dtype", o.dtype, "auto|float32|bfloat16; must match the checkpoint")
      ->check(CLI::IsMember({"auto", "float32", "bfloat16"}));
  app.add_option("--shutdown-grace", o.shutdown_grace_s, "seconds in-flight requests get after SIGTERM")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "HTTP worker threads")->capture_default_str();
  app.add_flag_callback("--no-snapshot-exchange", [&o] { o.snapshot_agent = false; },
                        "do not serve the snapshot exchange on $FASTRESTART_SNAPSHOT_SOCKET (a zero_copy engine "
                        "then cannot be snapshotted)");
  app.add_flag_callback("--cuda-graph-check", [&o] { o.cuda_graph_check = true; },
                        "CUDA forward: capture a CUDA graph over the weights once ready, and check after every snapshot "
                        "resume that it reads the same (a test of re-mapping at the same address)");
  app.add_option("--kv-arena-bytes", o.kv_arena_bytes,
                 "lease a KV arena of N bytes from the weight daemon before serving; prints a fastrestart-arena: line")
      ->capture_default_str();
  app.add_flag("--kv-arena-touch", o.kv_arena_touch,
               "write every page of a leased host arena (as a KV cache in use would): what a snapshot must leave out");
  app.add_option("--kv-arena-wait", o.kv_arena_wait_s, "seconds the arena lease may wait for its previous holder's exit")
      ->capture_default_str();
  app.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", o.enable_prefix_caching,
               "the CPU forward's paged KV cache with automatic prefix caching (on by default; on a leased host "
               "KV arena its index survives the engine's death, docs/kv-survival.md)");
  app.add_option("--block-size", o.block_size, "tokens per KV cache block")->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--kv-cache-blocks", o.kv_cache_blocks,
                 "blocks of the KV cache in private memory (without a KV arena; with one, the arena's size decides)")
      ->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--load-format", format, "disk|fastrestart")->check(CLI::IsMember({"disk", "fastrestart"}))
      ->capture_default_str();
  app.add_option("--fastrestart-mode", mode, "zero_copy|copy")->check(CLI::IsMember({"zero_copy", "copy"}))
      ->capture_default_str();
  app.add_option("--fastrestart-fallback", fallback, "on|off")->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--fastrestart-publish", publish, "on|off: publish after a disk load on a miss")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  app.add_option("--fastrestart-socket-dir", o.load.socket_dir, "weight daemon socket directory");
  app.add_flag("--fastrestart-verify", o.load.verify, "rehash the attached weights against the daemon's digest");
  app.add_option("--fastrestart-connect-timeout", o.load.connect_timeout_s, "seconds")->capture_default_str();
  app.add_option("--fastrestart-state-timeout", o.load.state_timeout_s, "seconds to wait for a loading daemon")
      ->capture_default_str();

  auto& f = o.faults;
  const char* g = "Fault injection (tests only)";
  app.add_option("--fault-startup-delay", f.startup_delay_s, "sleep S seconds before loading")->group(g);
  app.add_flag("--fault-exit-after-startup", f.exit_after_startup, "exit with --fault-exit-code once ready")->group(g);
  app.add_option("--fault-exit-after-requests", f.exit_after_requests, "exit with --fault-exit-code after M completions")
      ->group(g);
  app.add_option("--fault-exit-code", f.exit_code, "exit code for the exit faults (default 1)")->group(g);
  app.add_option("--fault-abort-after-requests", f.abort_after_requests, "SIGABRT after M completions")->group(g);
  app.add_flag("--fault-cuda-oom", f.cuda_oom, "print PyTorch's CUDA OOM error after loading, exit 1")->group(g);
  app.add_flag("--fault-vllm-free-memory", f.vllm_free_memory, "print vLLM's free-memory error, exit 1")->group(g);
  app.add_option("--fault-hang-after-requests", f.hang_after_requests, "stop answering after M completions (0: at ready)")
      ->group(g);
  app.add_flag("--fault-grow-memory", f.grow_memory, "grow host memory once ready until killed")->group(g);
  app.add_option("--fault-grow-memory-rate", f.grow_memory_mib_per_s, "MiB/s for --fault-grow-memory")->group(g);
  app.add_option("--fault-ignore-sigterm", f.ignore_sigterm_s, "keep serving S seconds after the first SIGTERM")->group(g);
  app.add_option("--fault-token-delay", f.token_delay_s, "extra seconds per generated token")->group(g);
  app.add_flag("--fault-spawn-worker", f.spawn_worker, "fork a worker that survives the parent's SIGKILL")->group(g);
  app.add_option("--fault-tp-hang-rank", f.tp_hang_rank, "tensor parallel: rank R stops answering at its second /health ping")->group(g);
  app.add_option("--fault-tp-linger", f.tp_linger_s, "tensor parallel: the other ranks outlive rank 0 by S seconds")
      ->group(g);
  app.add_option_function<std::string>(
         "--fault-standby",
         [&f](const std::string& value) {
           if (auto s = parse_standby_fault(value, &f); !s) throw CLI::ValidationError(s.error().message);
         },
         "as a standby only: never-park | bind-early | exit-after-release | die-parked-after=S")
      ->group(g);
}

struct Subcommand {
  const char* name;
  const char* help;
  void (*define)(CLI::App& sub, std::function<int()>& run);
};

void define_serve(CLI::App& sub, std::function<int()>& run) {
  auto o = std::make_shared<ServeOptions>();
  auto format = std::make_shared<std::string>("disk"), mode = std::make_shared<std::string>("zero_copy");
  auto fallback = std::make_shared<std::string>("on"), publish = std::make_shared<std::string>("on");
  add_serve_flags(sub, *o, *format, *mode, *fallback, *publish);
  run = [=] {
    o->load.format = *format == "fastrestart" ? LoadFormat::kFastrestart : LoadFormat::kDisk;
    o->load.zero_copy = *mode == "zero_copy";
    o->load.fallback = *fallback == "on";
    o->load.publish = *publish == "on";
    o->load.device = o->device == "cpu" ? "host" : o->device;  // engine_loader's name for the same place
    o->argv = g_argv;
    return run_serve(*o);
  };
}

void define_gen(CLI::App& sub, std::function<int()>& run) {
  auto o = std::make_shared<GenOptions>();
  auto out = std::make_shared<std::string>();
  auto size = std::make_shared<std::string>();
  auto dtype = std::make_shared<std::string>("F32");
  auto shard = std::make_shared<std::string>("1G");
  auto& c = o->config;
  sub.add_option("--out", *out, "output directory")->required();
  sub.add_option("--seed", o->seed, "PRNG seed")->capture_default_str();
  sub.add_option("--size", *size, "approximate total weight bytes (e.g. 2G): adds wide extra blocks");
  sub.add_option("--dtype", *dtype, "F32|BF16")->check(CLI::IsMember({"F32", "BF16"}))->capture_default_str();
  sub.add_option("--shard-size", *shard, "largest shard file (e.g. 1G)")->capture_default_str();
  sub.add_flag("--printable", o->printable, "greedy output in printable ASCII (lm_head rows of other tokens scaled down)");
  sub.add_option("--d-model", c.d_model)->capture_default_str();
  sub.add_option("--n-heads", c.n_heads)->capture_default_str();
  sub.add_option("--n-layers", c.n_layers)->capture_default_str();
  sub.add_option("--d-ff", c.d_ff)->capture_default_str();
  sub.add_option("--max-seq", c.max_seq)->capture_default_str();
  sub.add_option("--extra-blocks", c.extra_blocks)->capture_default_str();
  sub.add_option("--extra-width", c.extra_width)->capture_default_str();
  run = [=] {
    o->config.dtype = *dtype == "BF16" ? DType::kBF16 : DType::kF32;
    auto sh = parse_size(*shard);
    if (!sh) {
      spdlog::error("--shard-size: {}", sh.error().message);
      return kExitUsage;
    }
    o->shard_bytes = *sh;
    if (!size->empty()) {
      auto sz = parse_size(*size);
      if (!sz) {
        spdlog::error("--size: {}", sz.error().message);
        return kExitUsage;
      }
      o->config = config_for_size(o->config, *sz);
    }
    if (auto s = o->config.validate(); !s) {
      spdlog::error("{}", s.error().message);
      return kExitUsage;
    }
    return run_gen(*o, *out);
  };
}

constexpr Subcommand kSubcommands[] = {
    {"serve", "serve a checkpoint over HTTP (OpenAI-compatible subset)", define_serve},
    {"gen", "write a deterministic checkpoint", define_gen},
};

}  // namespace

int cli_main(int argc, char** argv) {
  g_argv.assign(argv, argv + argc);
  spdlog::set_default_logger(spdlog::stderr_color_mt("tinyengine"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ tinyengine[%P]: %v");
  CLI::App app{"fastrestart-tinyengine: a small real inference engine (docs/tinyengine.md)"};
  app.require_subcommand(1);
  std::vector<std::function<int()>> runs(std::size(kSubcommands));
  std::vector<CLI::App*> subs;
  for (size_t i = 0; i < std::size(kSubcommands); ++i) {
    auto* sub = app.add_subcommand(kSubcommands[i].name, kSubcommands[i].help);
    kSubcommands[i].define(*sub, runs[i]);
    subs.push_back(sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  for (size_t i = 0; i < subs.size(); ++i)
    if (subs[i]->parsed()) return runs[i]();
  return kExitUsage;
}

}  // namespace fr::te

#include "supervisor/engine_launch.h"

#include <algorithm>
#include <cstdio>
#include <spdlog/spdlog.h>

#include "supervisor/listen_socket.h"
#include "supervisor/memory_share.h"

namespace fr::supervisor {

namespace {

std::string launch_join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

}  // namespace

std::vector<double> engine_gpu_fractions(const EngineLaunch& in, bool for_standby, bool warn) {
  std::vector<double> out;
  const Config& cfg = in.cfg;
  if (cfg.gpus.empty() || cfg.weights.backend == "host") return out;
  // In zero_copy the daemon's pool is already used memory, so the engine's fraction of a GPU is the
  // budget minus what that GPU's daemon holds; a warmed standby's memory on that GPU is set aside too
  // (docs/standby.md, "Memory"). Each GPU's own: the ranks of a tensor-parallel engine each get theirs.
  for (const GpuShare& s : in.shares) {
    out.push_back(s.share);
    auto m = in.gpus.memory(s.in.gpu);
    if (!m.ok() || m->total == 0 || !warn || !cfg.memory.check_free) continue;
    const std::string& gpu = s.in.gpu;
    const double held = static_cast<double>(s.in.held), reserve = static_cast<double>(s.in.reserve);
    // What the engine must allocate anew: its share but its KV arenas, which are allocated already (the
    // daemon's, mapped by the engine) and so not in the free memory (docs/supervisor.md, "KV arenas").
    const double need = static_cast<double>(s.own_bytes);
    if (for_standby) {
      if (reserve > static_cast<double>(m->free))
        spdlog::warn("GPU {}: the warmed standby's reserve {} does not fit in the free {} (used {})", gpu,
                     gb_text(reserve), gb_text(double(m->free)), gb_text(double(m->used)));
    } else if (need > static_cast<double>(m->free)) {
      spdlog::warn("GPU {}: the engine's share {}{} does not fit in the free {} (used {}, of which the weight daemon holds {})",
                   gpu, gb_text(need), s.in.arena ? " beyond its KV arenas' " + gb_text(double(s.in.arena)) : std::string(),
                   gb_text(double(m->free)), gb_text(double(m->used)), gb_text(held));
    }
  }
  return out;
}

std::vector<std::string> engine_launch_argv(const EngineLaunch& in, bool for_standby) {
  std::vector<std::string> argv = in.cfg.engine.command;
  FlagList flags = in.flags;
  if (in.preload) in.kind.flags_for_preload(flags, *in.preload);  // vLLM: --load-format ipc_cache, ...
  if (const auto fr = engine_gpu_fractions(in, for_standby, /*warn=*/true); !fr.empty()) {
    // One flag for every rank: the smallest share (each rank's own is in $FASTRESTART_GPU_MEMORY_UTILIZATION),
    // in place of the one the flags hold, however they spell it.
    const double frac = *std::min_element(fr.begin(), fr.end());
    const std::string flag = in.kind.memory_flag();
    flags = flags.without(canonical_flag_name(flag)).with({flag, {std::to_string(frac)}, false});
  }
  argv.insert(argv.end(), flags.words().begin(), flags.words().end());
  return argv;
}

std::map<std::string, std::string> engine_launch_env(const EngineLaunch& in, bool for_standby) {
  const Config& cfg = in.cfg;
  std::map<std::string, std::string> env = cfg.engine.env;
  if (!cfg.gpus.empty() && cfg.weights.backend != "host") env["CUDA_VISIBLE_DEVICES"] = launch_join(cfg.gpus);
  // The engine_loader device of each GPU, in gpus order: rank r of a tensor-parallel engine attaches
  // through entry r (docs/engine_loader.md, "Devices"). CUDA numbers the visible GPUs from 0; the host
  // backend's daemons stand for the listed GPUs by name.
  const bool host = cfg.weights.backend == "host";
  if (!cfg.gpus.empty() && (!host || in.loader_protocol)) {
    std::vector<std::string> devices;
    for (size_t i = 0; i < cfg.gpus.size(); ++i) devices.push_back(host ? "host:" + cfg.gpus[i] : "cuda:" + std::to_string(i));
    env["FASTRESTART_DEVICES"] = launch_join(devices);
  }
  if (const auto fr = engine_gpu_fractions(in, for_standby, /*warn=*/false); !fr.empty()) {
    std::vector<std::string> v;
    for (double f : fr) v.push_back(std::to_string(f));
    env["FASTRESTART_GPU_MEMORY_UTILIZATION"] = launch_join(v);
  }
  if (!cfg.weights.socket_dir.empty()) env["FASTRESTART_SOCKET_DIR"] = cfg.weights.socket_dir;
  env["FASTRESTART_WEIGHTS_MODE"] = weights_mode_name(cfg.weights.mode);
  return env;
}

SpawnSpec engine_spawn_spec(const Config& cfg, EngineCommand command, int listen_fd) {
  SpawnSpec spec;
  spec.argv = std::move(command.argv);
  spec.env = std::move(command.env);
  spec.listen_fd = listen_fd;
  spec.listen_fd_name = kListenFdName;
  // The socket's configured queue length, which the socket itself may no longer show (listen_names.h);
  // engine.env's own value wins.
  if (listen_fd >= 0) spec.env.try_emplace(fastrestart::kListenBacklogEnv, std::to_string(cfg.engine.listen_backlog));
  spec.working_dir = cfg.engine.working_dir;
  spec.new_pid_namespace = command.own_pid_namespace;
  if (!cfg.engine.cgroup.empty()) spec.cgroup_procs = cfg.engine.cgroup + "/cgroup.procs";
  return spec;
}

}  // namespace fr::supervisor

// What an engine (or a standby) is started with: its command line and environment, from the config, the
// engine's current flags, the engine kind, what the weight daemons say (vllm preload's flags, whether
// they speak the loader protocol) and each GPU's share now (memory_share.h). Changes nothing: the caller
// spawns. docs/supervisor.md, "Memory"; docs/engine_loader.md, "Devices".
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/child.h"
#include "supervisor/config.h"
#include "supervisor/engines/engine_kind.h"
#include "supervisor/flags.h"
#include "supervisor/host_probe.h"
#include "supervisor/memory_share.h"

namespace fr::supervisor {

struct EngineLaunch {
  const Config& cfg;
  const FlagList& flags;             // the engine's current flags
  const EngineAdapter& kind;
  GpuProbe& gpus;
  std::optional<PreloadUse> preload;  // DaemonSet::preload_use()
  bool loader_protocol = false;       // DaemonSet::loader_protocol()
  std::vector<GpuShare> shares;       // each GPU's share now, in gpus order (empty without GPUs)
};

// What a start runs now: the command line, its environment, and whether the engine starts as PID 1 of a
// PID namespace of its own (snapshots.wanted(): only such an engine can be dumped).
struct EngineCommand {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  bool own_pid_namespace = false;
};

// The engine's memory fraction of each GPU of gpus, in order; empty without GPUs (or the host backend).
// `warn`: log a share (for_standby: a warmed standby's reserve) that does not fit in the GPU's free memory
// (memory.check_free). for_standby: the share is allocated after the release, once the engine is gone, so
// only a warmed standby's reserve is checked against free memory.
std::vector<double> engine_gpu_fractions(const EngineLaunch& in, bool for_standby, bool warn);
// engine.command and the flags (the kind's for vllm preload, its memory flag set to the smallest share).
std::vector<std::string> engine_launch_argv(const EngineLaunch& in, bool for_standby);
// engine.env and fastrestartd's own variables (CUDA_VISIBLE_DEVICES, FASTRESTART_*).
std::map<std::string, std::string> engine_launch_env(const EngineLaunch& in, bool for_standby);

// The spawn of an engine or a standby running `command`: its argv, environment and PID namespace, the
// listening socket `listen_fd` (fd 3 in the child, LISTEN_FDNAMES fastrestart-engine, and FASTRESTART_LISTEN_BACKLOG =
// engine.listen_backlog unless engine.env sets it; -1: none; docs/listen-socket.md),
// engine.working_dir and engine.cgroup. The caller adds what is its own (a standby's gate, the private endpoint).
SpawnSpec engine_spawn_spec(const Config& cfg, EngineCommand command, int listen_fd);

}  // namespace fr::supervisor

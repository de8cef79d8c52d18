// The native weight daemons' layout (native.cc): which fastrestart-weightd processes a config runs, their
// sockets and their command lines. Pure functions of the config, so tests can check them without spawning.
#pragma once

#include <string>
#include <vector>

#include "supervisor/config.h"
#include "supervisor/host_probe.h"

namespace fr::supervisor {

struct NativeDaemonSpec {
  std::string gpu;     // as configured in gpus ("" for the host backend's single daemon and the host-arena daemon)
  std::string socket;  // <socket_dir>/weightd-<uuid>.sock
  bool arenas_only = false;  // the host-arena daemon beside the CUDA ones: never attached to for weights
};

// One daemon per entry of gpus; with the host backend one daemon "host" without gpus, else one
// "host-<gpu>" per entry (host daemons standing for GPUs: tensor-parallel tests). A CUDA GPU given by
// index is named by its UUID (from `gpus`) when the probe knows it. With the CUDA backend and
// weights.host_arenas, one more: the host-memory daemon "host" (weightd-host.sock), last.
std::vector<NativeDaemonSpec> native_daemon_layout(const Config& c, GpuProbe& gpus);

// fastrestart-weightd's command line for the daemon of `gpu`; with the CUDA backend, `gpu` empty is the
// host-arena daemon (the host backend, no preload).
std::vector<std::string> native_daemon_argv(const Config& c, const std::string& gpu);

}  // namespace fr::supervisor

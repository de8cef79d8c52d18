// What an exited engine left in GPU memory (ARCHITECTURE.md, "Memory accounting"): its drain waits until
// each GPU's used memory falls back to what is expected of it without the engine (what was used before
// the engine started, the daemons' weights and KV arenas, a standby's processes), and names the GPUs
// where it does not within memory.settle_timeout_s (a leak: orphaned workers?).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "supervisor/host_probe.h"

namespace fr::supervisor {

struct GpuLeftover {
  std::string gpu;
  double bytes = 0;  // used beyond what is expected
};

// Each GPU of `gpus` whose used memory can be read now: its used bytes. What an engine or a standby is
// measured against at its spawn (both subtract what they must from it).
std::map<std::string, double> gpus_used_now(GpuProbe& probe, const std::vector<std::string>& gpus);

// Each GPU of `gpus`, in order, whose used memory exceeds `expected(gpu)` by more than `tolerance_bytes`,
// with the excess. A GPU whose memory cannot be read now is left out (no figure, no leak).
std::vector<GpuLeftover> gpu_leftovers(GpuProbe& probe, const std::vector<std::string>& gpus,
                                       const std::function<double(const std::string&)>& expected, double tolerance_bytes);

}  // namespace fr::supervisor

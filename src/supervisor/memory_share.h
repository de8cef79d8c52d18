// The engine's share of each GPU (ARCHITECTURE.md, "Memory accounting"; docs/supervisor.md, "Memory"):
// pure arithmetic over one GPU's figures, so that every figure subtracted is that GPU's own and the
// result is checked against a floor before an engine is started on it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fr::supervisor {

// One GPU's figures, all read for this GPU alone and now (not summed over GPUs, not remembered).
struct GpuShareInput {
  std::string gpu;
  uint64_t total = 0;    // the GPU's memory
  uint64_t held = 0;     // what this GPU's weight daemon holds (counted only when it is already used memory)
  uint64_t reserve = 0;  // what a warmed standby holds, or is set aside for it, on this GPU
};

struct GpuShare {
  GpuShareInput in;
  // utilization - (held + reserve) / total, rounded down to 1e-4 and at most utilization; may be negative.
  double share = 0;
};

// `held_is_used`: zero_copy, where the daemon's pool is memory the engine maps rather than allocates.
GpuShare engine_share(const GpuShareInput& in, double utilization, bool held_is_used);

// Why no engine may start on these shares: each GPU below `min_share`, with its figures
// ("GPU 1: share 0.0213 is below memory.min_share 0.05 (total 80.0 GB, budget 72.0 GB at
// memory.utilization 0.9, weight daemon holds 40.0 GB, standby reserve 30.3 GB)"); "" when all are at least
// `min_share`.
std::string share_refusal(const std::vector<GpuShare>& shares, double utilization, double min_share,
                          bool held_is_used);

}  // namespace fr::supervisor

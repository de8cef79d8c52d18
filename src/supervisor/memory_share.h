// The engine's share of each GPU (ARCHITECTURE.md, "Memory accounting"; docs/supervisor.md, "Memory"):
// pure arithmetic over one GPU's figures, so that every figure subtracted is that GPU's own and the
// result is checked against a floor before an engine is started on it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fr::supervisor {

// One GPU's figures, all read for this GPU alone and now (not summed over GPUs, not remembered).
// Bytes as the supervisor's messages and fastrestartctl show them: "12.34 GB" (decimal, two places).
std::string gb_text(double bytes);

struct GpuShareInput {
  std::string gpu;
  uint64_t total = 0;    // the GPU's memory
  // What this GPU's weight daemon holds outside the engine: its GPU memory minus its KV arenas
  // (held_outside()), i.e. the daemon status's held_bytes. Counted only when it is already used memory.
  uint64_t held = 0;
  uint64_t reserve = 0;  // what a warmed standby holds, or is set aside for it, on this GPU
  // The daemon's KV arenas on this GPU (their pool_bytes): the engine's own memory, its KV cache. Inside
  // the engine's share, so never subtracted from it; carried for the figures (own_bytes, the refusal).
  uint64_t arena = 0;
};

struct GpuShare {
  GpuShareInput in;
  // utilization - (held + reserve) / total, rounded down to 1e-4 and at most utilization; may be negative.
  // The arena is not in it: an engine whose KV cache is an arena gets the same share as one that
  // allocates its KV cache itself.
  double share = 0;
  // The share in bytes, exactly: floor(total x share), from the share rounded to 1e-4 (as the engine is
  // told it), in integers; 0 when the share is not positive or total is unknown.
  uint64_t share_bytes = 0;
  // What the share leaves the engine beyond its arenas (activations, graphs, its own allocations):
  // share_bytes - arena, 0 when the arenas alone fill or exceed the share.
  uint64_t own_bytes = 0;
};

// The part of a daemon's GPU memory that is held outside the engine: all of it but its arenas (which are
// the engine's KV cache). 0 if the figures are inconsistent (arenas above the whole).
uint64_t held_outside(uint64_t daemon_bytes, uint64_t arena_bytes);

// `held_is_used`: zero_copy, where the daemon's pool is memory the engine maps rather than allocates.
GpuShare engine_share(const GpuShareInput& in, double utilization, bool held_is_used);

// Why no engine may start on these shares: each GPU below `min_share`, with its figures
// ("GPU 1: share 0.0213 is below memory.min_share 0.05 (total 80.0 GB, budget 72.0 GB at
// memory.utilization 0.9, weight daemon holds 40.0 GB, standby reserve 30.3 GB)", and ", KV arena
// 20.0 GB (inside the share)" when the GPU has arenas); "" when all are at least `min_share`.
std::string share_refusal(const std::vector<GpuShare>& shares, double utilization, double min_share,
                          bool held_is_used);

}  // namespace fr::supervisor

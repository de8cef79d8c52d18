// The supervisor's memory accounting (docs/supervisor.md, "Memory"): each GPU's share from that GPU's
// own, current figures, less a warmed standby's reserve (the standby's own, standby/standby_memory.cc),
// and the floor below which no engine is started.
#include "supervisor/supervisor.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

namespace fr::supervisor {

std::vector<GpuShare> Supervisor::gpu_shares() const {
  std::vector<GpuShare> out;
  if (m_cfg.gpus.empty() || m_cfg.weights.backend == "host") return out;
  for (const auto& gpu : m_cfg.gpus) {
    GpuShareInput in;
    in.gpu = gpu;
    if (auto m = m_gpus->memory(gpu); m.ok()) in.total = m->total;
    // The daemon's GPU memory is its weights (held_bytes) and its KV arenas: only the weights are held
    // outside the engine; an arena is the engine's KV cache, inside its share (docs/supervisor.md, "KV arenas").
    in.held = held_bytes(gpu);
    in.arena = m_daemons->arena_bytes(gpu);
    in.reserve = m_standby->reserve_bytes(gpu);
    out.push_back(engine_share(in, m_cfg.memory.utilization, m_cfg.weights.mode == WeightsMode::kZeroCopy));
  }
  return out;
}

std::string Supervisor::engine_share_refusal() {
  const std::string why = share_refusal(gpu_shares(), m_cfg.memory.utilization, m_cfg.memory.min_share,
                                        m_cfg.weights.mode == WeightsMode::kZeroCopy);
  if (why != m_share_refused) {
    if (!why.empty()) spdlog::error("memory: no engine is started: {}", why);
    else if (!m_share_refused.empty()) spdlog::info("memory: every GPU's share is at least memory.min_share again");
  }
  m_share_refused = why;
  return why;
}

}  // namespace fr::supervisor

// The supervisor's memory accounting (docs/supervisor.md, "Memory"): each GPU's share from that GPU's
// own, current figures, a warmed standby's reserve measured per GPU at every park, and the floor below
// which no engine is started.
#include "supervisor/supervisor.h"
#include "supervisor/supervisor_internal.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

namespace fr::supervisor {

namespace {

constexpr uint64_t kBytesPerMiB = 1048576;

}  // namespace

uint64_t Supervisor::standby_reserve_bytes(const std::string& gpu) const {
  if (!standby_wanted() || m_cfg.standby.level != StandbyLevel::kWarmed) return 0;
  if (m_cfg.standby.reserve_mib > 0) return m_cfg.standby.reserve_mib * kBytesPerMiB;
  if (!m_standby) return 0;
  auto it = m_standby->held_by_gpu.find(gpu);
  return it == m_standby->held_by_gpu.end() ? 0 : it->second;
}

void Supervisor::measure_standby_memory(bool at_park) {
  if (!m_standby || !standby_alive() || m_standby->phase != StandbyPhase::kParked) return;
  if (m_cfg.gpus.empty() || m_cfg.weights.backend == "host") return;
  Standby& s = *m_standby;
  const pid_t group = s.proc->pid;
  uint64_t sum = 0;
  for (const auto& gpu : m_cfg.gpus) {
    // Its own processes' memory, as the driver accounts it: not used memory now minus at its spawn, which
    // also counts whatever else started or ended on the GPU while it warmed up.
    std::optional<uint64_t> bytes;
    if (auto ps = m_gpus->processes(gpu); ps.ok()) {
      uint64_t n = 0;
      bool foreign = false;  // pids of another PID namespace (NVML in a container lists the host's)
      for (const GpuProcess& p : *ps) {
        const pid_t pgid = p.pid > 0 ? ::getpgid(static_cast<pid_t>(p.pid)) : -1;
        if (p.pid == group || pgid == group) n += p.used;
        else if (pgid < 0) foreign = true;
      }
      if (n > 0 || !foreign) bytes = n;
    }
    if (auto before = s.used_before.find(gpu); !bytes && at_park && before != s.used_before.end()) {
      if (auto m = m_gpus->memory(gpu); m.ok())
        bytes = static_cast<uint64_t>(std::max(0.0, static_cast<double>(m->used) - before->second));
    }
    if (!bytes) continue;  // unreadable now: the last figure stands
    const uint64_t was = s.held_by_gpu.count(gpu) ? s.held_by_gpu[gpu] : 0;
    if (*bytes != was && m_cfg.standby.level == StandbyLevel::kWarmed && m_cfg.standby.reserve_mib == 0)
      spdlog::info("standby: GPU {}: reserving {} MiB for it (was {} MiB)", gpu, *bytes / kBytesPerMiB, was / kBytesPerMiB);
    s.held_by_gpu[gpu] = *bytes;
    sum += *bytes;
  }
  s.gpu_bytes = sum;
}

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
    in.reserve = standby_reserve_bytes(gpu);
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

// The standby's memory (docs/standby.md, "Memory"; docs/supervisor.md, "Memory"): what its processes hold
// on each GPU, measured at every park and status, and the reserve a warmed standby leaves in each GPU's
// share from then on.
#include <unistd.h>

#include <algorithm>
#include <spdlog/spdlog.h>

#include "supervisor/standby/standby.h"

namespace fr::supervisor {

namespace {

constexpr uint64_t kReserveBytesPerMiB = 1048576;

}  // namespace

uint64_t Standby::reserve_bytes(const std::string& gpu) const {
  const Config& cfg = m_cfg;
  if (!wanted() || cfg.standby.level != StandbyLevel::kWarmed) return 0;
  if (cfg.standby.reserve_mib > 0) return cfg.standby.reserve_mib * kReserveBytesPerMiB;
  auto it = m_held_by_gpu.find(gpu);
  return it == m_held_by_gpu.end() ? 0 : it->second;
}

uint64_t Standby::present_bytes(const std::string& gpu) const {
  if (!alive()) return 0;
  auto h = m_held_by_gpu.find(gpu);
  return std::max(h == m_held_by_gpu.end() ? uint64_t{0} : h->second, reserve_bytes(gpu));
}

void Standby::measure_memory(bool at_park) {
  const Config& cfg = m_cfg;
  if (!alive() || m_phase != Phase::kParked) return;
  if (cfg.gpus.empty() || cfg.weights.backend == "host") return;
  const pid_t group = m_proc->pid;
  uint64_t sum = 0;
  for (const auto& gpu : cfg.gpus) {
    // Its own processes' memory, as the driver accounts it: not used memory now minus at its spawn, which
    // also counts whatever else started or ended on the GPU while it warmed up.
    std::optional<uint64_t> bytes;
    if (auto ps = m_gpus.processes(gpu); ps.ok()) {
      uint64_t n = 0;
      bool foreign = false;  // pids of another PID namespace (NVML in a container lists the host's)
      for (const GpuProcess& p : *ps) {
        const pid_t pgid = p.pid > 0 ? ::getpgid(static_cast<pid_t>(p.pid)) : -1;
        if (p.pid == group || pgid == group) n += p.used;
        else if (pgid < 0) foreign = true;
      }
      if (n > 0 || !foreign) bytes = n;
    }
    if (auto before = m_used_before.find(gpu); !bytes && at_park && before != m_used_before.end()) {
      if (auto m = m_gpus.memory(gpu); m.ok())
        bytes = static_cast<uint64_t>(std::max(0.0, static_cast<double>(m->used) - before->second));
    }
    if (!bytes) continue;  // unreadable now: the last figure stands
    const uint64_t was = m_held_by_gpu.count(gpu) ? m_held_by_gpu[gpu] : 0;
    if (*bytes != was && cfg.standby.level == StandbyLevel::kWarmed && cfg.standby.reserve_mib == 0)
      spdlog::info("standby: GPU {}: reserving {} MiB for it (was {} MiB)", gpu, *bytes / kReserveBytesPerMiB, was / kReserveBytesPerMiB);
    m_held_by_gpu[gpu] = *bytes;
    sum += *bytes;
  }
  m_gpu_bytes = sum;
}

}  // namespace fr::supervisor

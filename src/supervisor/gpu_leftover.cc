#include "supervisor/gpu_leftover.h"

namespace fr::supervisor {

std::map<std::string, double> gpus_used_now(GpuProbe& probe, const std::vector<std::string>& gpus) {
  std::map<std::string, double> out;
  for (const auto& gpu : gpus)
    if (auto m = probe.memory(gpu); m.ok()) out[gpu] = static_cast<double>(m->used);
  return out;
}

std::vector<GpuLeftover> gpu_leftovers(GpuProbe& probe, const std::vector<std::string>& gpus,
                                       const std::function<double(const std::string&)>& expected, double tolerance_bytes) {
  std::vector<GpuLeftover> out;
  for (const auto& gpu : gpus) {
    auto m = probe.memory(gpu);
    if (!m.ok()) continue;
    const double extra = static_cast<double>(m->used) - expected(gpu);
    if (extra > tolerance_bytes) out.push_back({gpu, extra});
  }
  return out;
}

}  // namespace fr::supervisor

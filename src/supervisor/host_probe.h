// What the supervisor reads about the machine: GPU memory (NVML via dlopen: never a CUDA context,
// ARCHITECTURE.md "The supervisor never creates a CUDA context") and the kernel OOM killer's count for the engine's cgroup. Interfaces, because tests
// replace them (a fake GPU from a JSON file: FASTRESTART_FAKE_NVML, docs/supervisor.md).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "fastrestart/result.h"

namespace fr::supervisor {

struct GpuMemory {
  uint64_t total = 0;
  uint64_t used = 0;
  uint64_t free = 0;
  std::string uuid;
  std::string name;
};

class GpuProbe {
 public:
  virtual ~GpuProbe() = default;
  // `gpu`: an index or a "GPU-..." UUID.
  virtual Result<GpuMemory> memory(const std::string& gpu) = 0;
};

// NVML from libnvidia-ml.so.1 (dlopen); Errc::kCuda "NVML not available" without a driver.
std::unique_ptr<GpuProbe> make_nvml_probe();
// Reads {"GPU-x": {"total":..,"used":..,"name":..}, "0": {...}} from `path` at every call.
std::unique_ptr<GpuProbe> make_file_probe(const std::string& path);

// The kernel OOM-kill counter of a memory cgroup: cgroup v2 memory.events "oom_kill", v1
// memory.oom_control "oom_kill". `cgroup_dir` empty: this process's own memory cgroup.
class OomCounter {
 public:
  explicit OomCounter(std::string cgroup_dir = {});
  std::optional<uint64_t> read() const;
  const std::string& file() const { return m_file; }

 private:
  std::string m_file;
};

}  // namespace fr::supervisor

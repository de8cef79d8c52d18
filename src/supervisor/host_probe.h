// What the supervisor reads about the machine: GPU memory (NVML via dlopen: never a CUDA context,
// ARCHITECTURE.md "The supervisor never creates a CUDA context") and the kernel OOM killer's count for the engine's cgroup. Interfaces, because tests
// replace them (a fake GPU from a JSON file: FASTRESTART_FAKE_NVML, docs/supervisor.md).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fastrestart/result.h"

namespace fr::supervisor {

struct GpuMemory {
  uint64_t total = 0;
  uint64_t used = 0;
  uint64_t free = 0;
  std::string uuid;
  std::string name;
};

// One process's memory on one GPU, as the driver accounts it (pids of fastrestartd's PID namespace).
struct GpuProcess {
  int64_t pid = 0;
  uint64_t used = 0;
};

class GpuProbe {
 public:
  virtual ~GpuProbe() = default;
  // `gpu`: an index or a "GPU-..." UUID.
  virtual Result<GpuMemory> memory(const std::string& gpu) = 0;
  // The compute processes on `gpu` and what each holds; Errc::kUnsupported where the probe cannot tell
  // (the caller falls back to differences of used memory).
  virtual Result<std::vector<GpuProcess>> processes(const std::string& gpu) {
    return make_error(Errc::kUnsupported, "GPU " + gpu + ": per-process memory is not available");
  }
};

// NVML from libnvidia-ml.so.1 (dlopen); Errc::kCuda "NVML not available" without a driver.
std::unique_ptr<GpuProbe> make_nvml_probe();
// Reads {"GPU-x": {"total":..,"used":..,"name":..}, "0": {...}} from `path` at every call; a GPU's
// "processes": [{"pid":..,"used":..}] answers processes() (absent: unsupported, as without NVML's).
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

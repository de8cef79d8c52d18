#include "supervisor/host_probe.h"

#include <dlfcn.h>

#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/io.h"

namespace fr::supervisor {
namespace {

// The few NVML functions we use, declared here: Debian ships no nvml.h. Their ABI has been stable since
// the _v2 entry points; the supervisor never links the CUDA toolkit.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
using InitFn = nvmlReturn_t (*)();
using ByIndexFn = nvmlReturn_t (*)(unsigned, nvmlDevice_t*);
using ByUuidFn = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
using MemFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using StrFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned);
using ErrFn = const char* (*)(nvmlReturn_t);
// nvmlProcessInfo_v2_t, the element of the _v2 and _v3 process lists.
struct nvmlProcessInfo_t {
  unsigned pid;
  unsigned long long usedGpuMemory;
  unsigned gpuInstanceId, computeInstanceId;
};
using ProcsFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*);
constexpr nvmlReturn_t kNvmlInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ULL;  // usedGpuMemory without the permission to read it

class NvmlProbe final : public GpuProbe {
 public:
  Result<GpuMemory> memory(const std::string& gpu) override {
    std::lock_guard lk(m_mu);
    FR_ASSIGN(nvmlDevice_t dev, device(gpu));
    nvmlReturn_t r;
    nvmlMemory_t m{};
    if ((r = m_mem(dev, &m)) != 0) return make_error(Errc::kCuda, "NVML memory info of GPU " + gpu + ": " + m_err(r));
    char buf[96] = {};
    GpuMemory g{m.total, m.used, m.free, "", ""};
    if (m_uuid(dev, buf, sizeof buf) == 0) g.uuid = buf;
    if (m_name(dev, buf, sizeof buf) == 0) g.name = buf;
    return g;
  }

  Result<std::vector<GpuProcess>> processes(const std::string& gpu) override {
    std::lock_guard lk(m_mu);
    FR_ASSIGN(nvmlDevice_t dev, device(gpu));
    if (!m_procs) return make_error(Errc::kUnsupported, "NVML: this driver lists no compute processes");
    // The list may grow between the two calls: ask with room to spare, again when it still does not fit.
    std::vector<nvmlProcessInfo_t> infos(64);
    for (int attempt = 0;; ++attempt) {
      unsigned n = static_cast<unsigned>(infos.size());
      nvmlReturn_t r = m_procs(dev, &n, infos.data());
      if (r == kNvmlInsufficientSize && attempt < 3) {
        infos.resize(static_cast<size_t>(n) + 16);
        continue;
      }
      if (r != 0) return make_error(Errc::kCuda, "NVML compute processes of GPU " + gpu + ": " + m_err(r));
      std::vector<GpuProcess> out;
      for (unsigned i = 0; i < n && i < infos.size(); ++i) {
        if (infos[i].usedGpuMemory == kNvmlValueNotAvailable)
          return make_error(Errc::kUnsupported, "NVML: the memory of pid " + std::to_string(infos[i].pid) + " on GPU " + gpu + " is not available");
        out.push_back({infos[i].pid, infos[i].usedGpuMemory});
      }
      return out;
    }
  }

 private:
  Result<nvmlDevice_t> device(const std::string& gpu) {
    FR_TRY(open());
    nvmlDevice_t dev{};
    nvmlReturn_t r;
    if (gpu.rfind("GPU-", 0) == 0) {
      r = m_by_uuid(gpu.c_str(), &dev);
    } else {
      if (gpu.empty() || gpu.find_first_not_of("0123456789") != std::string::npos)
        return make_error(Errc::kInvalidArgument, "GPU '" + gpu + "': expected an index or GPU-<uuid>");
      r = m_by_index(static_cast<unsigned>(std::stoul(gpu)), &dev);
    }
    if (r != 0) return make_error(Errc::kNotFound, "NVML: no GPU " + gpu + ": " + m_err(r));
    return dev;
  }

  Status open() {
    if (m_lib) return {};
    void* h = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return make_error(Errc::kCuda, "NVML not available (libnvidia-ml.so.1 not found): no NVIDIA driver on this machine");
    auto sym = [&](const char* n) { return ::dlsym(h, n); };
    auto init = reinterpret_cast<InitFn>(sym("nvmlInit_v2"));
    m_by_index = reinterpret_cast<ByIndexFn>(sym("nvmlDeviceGetHandleByIndex_v2"));
    m_by_uuid = reinterpret_cast<ByUuidFn>(sym("nvmlDeviceGetHandleByUUID"));
    m_mem = reinterpret_cast<MemFn>(sym("nvmlDeviceGetMemoryInfo"));
    m_uuid = reinterpret_cast<StrFn>(sym("nvmlDeviceGetUUID"));
    m_name = reinterpret_cast<StrFn>(sym("nvmlDeviceGetName"));
    m_err = reinterpret_cast<ErrFn>(sym("nvmlErrorString"));
    // Optional: _v3 (drivers from 510 on), else _v2; both fill nvmlProcessInfo_v2_t.
    m_procs = reinterpret_cast<ProcsFn>(sym("nvmlDeviceGetComputeRunningProcesses_v3"));
    if (!m_procs) m_procs = reinterpret_cast<ProcsFn>(sym("nvmlDeviceGetComputeRunningProcesses_v2"));
    if (!init || !m_by_index || !m_by_uuid || !m_mem || !m_uuid || !m_name || !m_err) {
      ::dlclose(h);
      return make_error(Errc::kCuda, "libnvidia-ml.so.1 lacks the functions we need");
    }
    if (nvmlReturn_t r = init(); r != 0) {
      ::dlclose(h);
      return make_error(Errc::kCuda, "nvmlInit failed with code " + std::to_string(r));
    }
    m_lib = h;
    return {};
  }

  std::mutex m_mu;
  void* m_lib = nullptr;
  ByIndexFn m_by_index = nullptr;
  ByUuidFn m_by_uuid = nullptr;
  MemFn m_mem = nullptr;
  StrFn m_uuid = nullptr, m_name = nullptr;
  ErrFn m_err = nullptr;
  ProcsFn m_procs = nullptr;
};

class FileProbe final : public GpuProbe {
 public:
  explicit FileProbe(std::string path) : m_path(std::move(path)) {}
  Result<GpuMemory> memory(const std::string& gpu) override {
    FR_ASSIGN(std::string text, read_file(m_path, 1 << 20));
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return make_error(Errc::kInvalidArgument, m_path + ": not a JSON object");
    auto it = j.find(gpu);
    if (it == j.end() || !it->is_object()) return make_error(Errc::kNotFound, m_path + ": no GPU " + gpu);
    GpuMemory g;
    g.total = it->value("total", uint64_t{0});
    g.used = it->value("used", uint64_t{0});
    g.free = g.total > g.used ? g.total - g.used : 0;
    g.uuid = it->value("uuid", gpu);
    g.name = it->value("name", std::string("fake GPU"));
    return g;
  }
  Result<std::vector<GpuProcess>> processes(const std::string& gpu) override {
    FR_ASSIGN(std::string text, read_file(m_path, 1 << 20));
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return make_error(Errc::kInvalidArgument, m_path + ": not a JSON object");
    auto it = j.find(gpu);
    if (it == j.end() || !it->is_object()) return make_error(Errc::kNotFound, m_path + ": no GPU " + gpu);
    auto ps = it->find("processes");
    if (ps == it->end()) return make_error(Errc::kUnsupported, m_path + ": GPU " + gpu + " lists no processes");
    if (!ps->is_array()) return make_error(Errc::kInvalidArgument, m_path + ": GPU " + gpu + ": processes is not an array");
    std::vector<GpuProcess> out;
    for (const auto& p : *ps) {
      if (!p.is_object()) return make_error(Errc::kInvalidArgument, m_path + ": GPU " + gpu + ": a process is not an object");
      out.push_back({p.value("pid", int64_t{0}), p.value("used", uint64_t{0})});
    }
    return out;
  }

 private:
  std::string m_path;
};

std::string own_memory_cgroup() {
  std::ifstream f("/proc/self/cgroup");
  std::string line, v2;
  while (std::getline(f, line)) {
    // v1: "N:memory:/path" (also "N:memory,xyz:/path"); v2: "0::/path"
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string ctrls = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::stringstream ss(ctrls);
    std::string c;
    while (std::getline(ss, c, ','))
      if (c == "memory") return "/sys/fs/cgroup/memory" + path;
    if (ctrls.empty()) v2 = "/sys/fs/cgroup" + path;
  }
  return v2;
}

}  // namespace

std::unique_ptr<GpuProbe> make_nvml_probe() { return std::make_unique<NvmlProbe>(); }
std::unique_ptr<GpuProbe> make_file_probe(const std::string& path) { return std::make_unique<FileProbe>(path); }

OomCounter::OomCounter(std::string dir) {
  if (dir.empty()) dir = own_memory_cgroup();
  if (dir.empty()) return;
  std::ifstream v2(dir + "/memory.events");
  m_file = v2.good() ? dir + "/memory.events" : dir + "/memory.oom_control";
}

std::optional<uint64_t> OomCounter::read() const {
  if (m_file.empty()) return std::nullopt;
  std::ifstream f(m_file);
  std::string key;
  uint64_t v;
  while (f >> key >> v)
    if (key == "oom_kill") return v;
  return std::nullopt;
}

}  // namespace fr::supervisor

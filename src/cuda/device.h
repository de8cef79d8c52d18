// One CUDA device as this process sees it, with its retained primary context.
//
// The primary context is the one the CUDA runtime (and so PyTorch) uses, so device pointers handed to us
// by an engine are valid in it and ours are valid for the engine. Every call into the driver made on the
// device's behalf runs under ScopedContext(context()), which leaves the caller's current context alone.
//
// Thread-safety: a Device is immutable after open(), except kernels(), which loads the module once
// under a lock. Share it with std::shared_ptr; everything allocated on it keeps it alive.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "cuda/driver.h"

namespace fr::cuda {

class Kernels;

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L and NVML print it.
std::string format_uuid(const CUuuid& u);

class Device {
 public:
  // `spec` is an ordinal ("0") or a UUID ("GPU-..."; matched case-insensitively). Errc::kCuda for no
  // driver, no GPU, or no device matching; Errc::kInvalidArgument for a malformed spec.
  static Result<std::shared_ptr<Device>> open(const std::string& spec);
  static Result<std::shared_ptr<Device>> open_ordinal(int ordinal);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const Driver& driver() const { return *m_driver; }
  int ordinal() const { return m_ordinal; }
  CUdevice handle() const { return m_dev; }
  CUcontext context() const { return m_ctx; }
  const std::string& uuid() const { return m_uuid; }
  const std::string& name() const { return m_name; }
  uint64_t total_memory() const { return m_total; }
  // Minimum VMM granularity of a shareable (POSIX fd) allocation on this device.
  uint64_t vmm_granularity() const { return m_granularity; }

  // The digest/test kernels, loaded into this device's context on first use.
  Result<const Kernels*> kernels();

 private:
  Device() = default;
  const Driver* m_driver = nullptr;
  int m_ordinal = -1;
  CUdevice m_dev = 0;
  CUcontext m_ctx = nullptr;
  std::string m_uuid, m_name;
  uint64_t m_total = 0;
  uint64_t m_granularity = 0;
  std::mutex m_mu;
  std::unique_ptr<Kernels> m_kernels;  // GUARDED_BY(m_mu)
};

}  // namespace fr::cuda

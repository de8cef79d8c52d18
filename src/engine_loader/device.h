// The device side of engine_loader: how a pool descriptor becomes memory this process can use.
// Internal (not installed). "host" maps memfds; "cuda:<ordinal>" imports CUDA VMM handles (cuda_device.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/fd.h"
#include "fastrestart/result.h"

namespace fr::loader {

// A pool (or a private copy of one) mapped into this process. Releases it on destruction.
class MappedPool {
 public:
  virtual ~MappedPool() = default;
  virtual std::byte* base() const = 0;  // host pointer, or CUDA device pointer
  virtual uint64_t size() const = 0;
  // Snapshots without the weights (docs/snapshot.md): release() unmaps the memory but keeps the address
  // range reserved (nothing else can be placed there, and nothing may read it until remap()); remap()
  // maps `fd`, a pool of the same size, at the same address again, so every pointer into the pool, a CUDA
  // graph's included, stays valid. Only imported pools (zero_copy) do this; others say kUnsupported.
  virtual Status release() { return make_error(Errc::kUnsupported, "this pool is not an imported mapping"); }
  virtual Status remap(UniqueFd) { return make_error(Errc::kUnsupported, "this pool is not an imported mapping"); }
  virtual bool released() const { return false; }
};

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;
  virtual bool is_cuda() const = 0;
  virtual std::string gpu_uuid() const = 0;  // "host" for the host backend
  // Maps a pool read-only (zero_copy). A write through the mapping faults (SIGSEGV on the host, an
  // illegal-address error in a CUDA kernel), in this process only.
  virtual Result<std::unique_ptr<MappedPool>> map_read_only(UniqueFd fd, uint64_t pool_bytes) = 0;
  // Maps a pool writable (publish, before the daemon seals it).
  virtual Result<std::unique_ptr<MappedPool>> map_writable(UniqueFd fd, uint64_t pool_bytes) = 0;
  // Memory this process owns holding a copy of src's first `data_bytes` (copy mode).
  virtual Result<std::unique_ptr<MappedPool>> copy_of(const MappedPool& src, uint64_t data_bytes) = 0;
  // The content digest (common/digest.h) of the first `data_bytes` of `p`.
  virtual Result<uint64_t> digest(const MappedPool& p, uint64_t data_bytes) = 0;
  // Copies `n` bytes from `src` (a pointer on this device: host memory for "host", device memory for CUDA)
  // to `dst` + offset.
  virtual Status copy_in(MappedPool& dst, uint64_t offset, const void* src, uint64_t n) = 0;
  // Waits until copies issued by copy_in are complete.
  virtual Status sync() = 0;
};

// "host", "host:<name>" (common/host_device.h) or "cuda:<ordinal>". Errc::kInvalidArgument for a malformed string; Errc::kCuda when the CUDA
// driver or the device is absent; Errc::kUnsupported when built without CUDA.
Result<std::unique_ptr<DeviceApi>> open_device(const std::string& device);

// The socket of the daemon serving `dev` (docs/protocol.md: named from the GPU UUID, "host" otherwise).
std::string daemon_socket(const DeviceApi& dev, const std::string& socket_dir);

std::unique_ptr<DeviceApi> make_host_device();
Result<std::unique_ptr<DeviceApi>> make_cuda_device(int ordinal);  // cuda_device.cc / cuda_device_none.cc

}  // namespace fr::loader

// The device side of engine_loader: how a pool descriptor becomes memory this process can use.
// Internal (not installed). "host" maps memfds; "cuda:<ordinal>" imports CUDA VMM handles (cuda_device.cc).
#pragma once

#include <algorithm>
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

// A KV arena's address range in this process (docs/engine_loader.md, "KV arenas"). Reserved once; first
// backed by a placeholder (one small allocation mapped again and again over the whole range, so kernels
// and graphs captured over the range touch real memory), then by the leased arena, mapped read-write
// over the whole range at the same address. The destructor unmaps whatever is mapped and frees the range.
class ArenaRange {
 public:
  virtual ~ArenaRange() = default;
  virtual std::byte* base() const = 0;
  virtual uint64_t size() const = 0;              // the range: the asked size rounded up to the page/granule
  virtual uint64_t placeholder_bytes() const = 0;  // the placeholder's own memory (0 once swapped)
  // Replaces the placeholder by the arena `fd` (a pool of pool_bytes >= size()). Waits for this process's
  // queued device work first (CUDA): nothing in flight may still touch the placeholder.
  // Also from the unmapped state (after unmap()): the arena is mapped again at the same address.
  virtual Status swap_in(UniqueFd fd, uint64_t pool_bytes) = 0;
  virtual bool swapped() const = 0;
  // Unmaps what backs the range (the arena or the placeholder) and keeps the range reserved with nothing
  // behind it, for a snapshot (docs/snapshot.md, "Snapshots without the KV cache"). Waits for this
  // process's queued device work first (CUDA). swapped() is false afterwards; swap_in() maps again.
  virtual Status unmap() = 0;
  virtual bool unmapped() const = 0;
};

// At most this many placeholder mappings per range: the placeholder grows with the range (range/1024,
// at least one page or granule) rather than the number of mappings (vm.max_map_count, driver tables).
inline constexpr uint64_t kMaxPlaceholderMaps = 1024;

// The placeholder's size for a range of `range` bytes in units of `unit` (page or VMM granule).
inline uint64_t placeholder_size(uint64_t range, uint64_t unit) {
  const uint64_t per = (range + kMaxPlaceholderMaps - 1) / kMaxPlaceholderMaps;
  return std::max<uint64_t>(unit, (per + unit - 1) / unit * unit);
}

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
  // Reserves a KV arena's range of at least `bytes` and backs it with a placeholder.
  virtual Result<std::unique_ptr<ArenaRange>> reserve_arena(uint64_t bytes) = 0;
};

// "host", "host:<name>" (common/host_device.h) or "cuda:<ordinal>". Errc::kInvalidArgument for a malformed string; Errc::kCuda when the CUDA
// driver or the device is absent; Errc::kUnsupported when built without CUDA.
Result<std::unique_ptr<DeviceApi>> open_device(const std::string& device);

// The socket of the daemon serving `dev` (docs/protocol.md: named from the GPU UUID, "host" otherwise).
std::string daemon_socket(const DeviceApi& dev, const std::string& socket_dir);

std::unique_ptr<DeviceApi> make_host_device();
Result<std::unique_ptr<DeviceApi>> make_cuda_device(int ordinal);  // cuda_device.cc / cuda_device_none.cc

}  // namespace fr::loader

// RAII owners for CUDA driver handles. Each owner remembers the context its handle belongs to and makes
// it current (push/pop, so the calling thread's own current context is left as it was) to release it.
// Move-only. Destruction ignores release errors: a dying context reports them once, at the call that
// failed, and there is nothing left to do with a handle that cannot be released.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <utility>

#include "cuda/driver.h"

namespace fr::cuda {

// Makes `ctx` current on this thread for the scope, restoring the previous one after.
class ScopedContext {
 public:
  explicit ScopedContext(CUcontext ctx);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;
  const Status& status() const { return m_status; }

 private:
  Status m_status;
  bool m_pushed = false;
};

template <typename Traits>
class Owner {
 public:
  using Value = typename Traits::Value;
  Owner() = default;
  Owner(CUcontext ctx, Value v) : m_ctx(ctx), m_v(v), m_live(true) {}
  Owner(Owner&& o) noexcept : m_ctx(o.m_ctx), m_v(o.m_v), m_live(std::exchange(o.m_live, false)) {}
  Owner& operator=(Owner&& o) noexcept {
    if (this != &o) {
      reset();
      m_ctx = o.m_ctx;
      m_v = o.m_v;
      m_live = std::exchange(o.m_live, false);
    }
    return *this;
  }
  Owner(const Owner&) = delete;
  Owner& operator=(const Owner&) = delete;
  ~Owner() { reset(); }

  const Value& get() const { return m_v; }
  bool valid() const { return m_live; }
  void reset() {
    if (!m_live) return;
    m_live = false;
    auto d = load_driver();
    if (!d.ok()) return;
    ScopedContext scope(m_ctx);
    Traits::release(**d, m_v);
  }

 private:
  CUcontext m_ctx = nullptr;
  Value m_v{};
  bool m_live = false;
};

struct Range {
  CUdeviceptr ptr = 0;
  size_t size = 0;
};

struct StreamTraits {
  using Value = CUstream;
  static void release(const Driver& d, CUstream s) { d.cuStreamDestroy(s); }
};
struct EventTraits {
  using Value = CUevent;
  static void release(const Driver& d, CUevent e) { d.cuEventDestroy(e); }
};
struct ModuleTraits {
  using Value = CUmodule;
  static void release(const Driver& d, CUmodule m) { d.cuModuleUnload(m); }
};
struct PinnedTraits {  // cuMemHostAlloc
  using Value = void*;
  static void release(const Driver& d, void* p) { d.cuMemFreeHost(p); }
};
struct DeviceMemoryTraits {  // cuMemAlloc
  using Value = CUdeviceptr;
  static void release(const Driver& d, CUdeviceptr p) { d.cuMemFree(p); }
};
struct AllocationTraits {  // cuMemCreate / cuMemImportFromShareableHandle
  using Value = CUmemGenericAllocationHandle;
  static void release(const Driver& d, CUmemGenericAllocationHandle h) { d.cuMemRelease(h); }
};
struct AddressRangeTraits {  // cuMemAddressReserve
  using Value = Range;
  static void release(const Driver& d, Range r) { d.cuMemAddressFree(r.ptr, r.size); }
};
struct MappingTraits {  // cuMemMap
  using Value = Range;
  static void release(const Driver& d, Range r) { d.cuMemUnmap(r.ptr, r.size); }
};

using Stream = Owner<StreamTraits>;
using Event = Owner<EventTraits>;
using Module = Owner<ModuleTraits>;
using PinnedBuffer = Owner<PinnedTraits>;
using DeviceMemory = Owner<DeviceMemoryTraits>;
using Allocation = Owner<AllocationTraits>;
using AddressRange = Owner<AddressRangeTraits>;
using Mapping = Owner<MappingTraits>;

// Creation helpers; each expects `ctx` to be the device's primary context.
Result<Stream> create_stream(CUcontext ctx);  // non-blocking with respect to the legacy default stream
Result<Event> create_event(CUcontext ctx);    // timing disabled: used for ordering only
Result<PinnedBuffer> alloc_pinned(CUcontext ctx, size_t bytes);
Result<DeviceMemory> alloc_device(CUcontext ctx, size_t bytes);

}  // namespace fr::cuda

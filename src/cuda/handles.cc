// Creation of the simple owned handles, and ScopedContext.
#include "cuda/handles.h"

namespace fr::cuda {

ScopedContext::ScopedContext(CUcontext ctx) {
  auto d = load_driver();
  if (!d.ok()) {
    m_status = d.error();
    return;
  }
  m_status = check((*d)->cuCtxPushCurrent(ctx), "cuCtxPushCurrent");
  m_pushed = m_status.ok();
}

ScopedContext::~ScopedContext() {
  if (!m_pushed) return;
  CUcontext popped = nullptr;
  (*load_driver())->cuCtxPopCurrent(&popped);
}

namespace {

// The one way a handle is made: `make(driver, &raw)` (a driver call, named `what` in its error) with `ctx`
// current, its result owned by a Handle bound to `ctx`.
template <class Handle, class Raw, class Make>
Result<Handle> create_in(CUcontext ctx, const char* what, Make make) {
  FR_ASSIGN(const Driver* d, load_driver());
  ScopedContext scope(ctx);
  FR_TRY(scope.status());
  Raw raw{};
  FR_TRY(check(make(d, &raw), what));
  return Handle(ctx, raw);
}

}  // namespace

Result<Stream> create_stream(CUcontext ctx) {
  return create_in<Stream, CUstream>(ctx, "cuStreamCreate",
                                     [](const Driver* d, CUstream* s) { return d->cuStreamCreate(s, CU_STREAM_NON_BLOCKING); });
}

Result<Event> create_event(CUcontext ctx) {
  return create_in<Event, CUevent>(ctx, "cuEventCreate",
                                   [](const Driver* d, CUevent* e) { return d->cuEventCreate(e, CU_EVENT_DISABLE_TIMING); });
}

Result<PinnedBuffer> alloc_pinned(CUcontext ctx, size_t bytes) {
  return create_in<PinnedBuffer, void*>(ctx, "cuMemHostAlloc",
                                        [bytes](const Driver* d, void** p) { return d->cuMemHostAlloc(p, bytes, 0); });
}

Result<DeviceMemory> alloc_device(CUcontext ctx, size_t bytes) {
  return create_in<DeviceMemory, CUdeviceptr>(ctx, "cuMemAlloc",
                                              [bytes](const Driver* d, CUdeviceptr* p) { return d->cuMemAlloc(p, bytes); });
}

}  // namespace fr::cuda

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

Result<Stream> create_stream(CUcontext ctx) {
  FR_ASSIGN(const Driver* d, load_driver());
  ScopedContext scope(ctx);
  FR_TRY(scope.status());
  CUstream s = nullptr;
  FR_TRY(check(d->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate"));
  return Stream(ctx, s);
}

Result<Event> create_event(CUcontext ctx) {
  FR_ASSIGN(const Driver* d, load_driver());
  ScopedContext scope(ctx);
  FR_TRY(scope.status());
  CUevent e = nullptr;
  FR_TRY(check(d->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate"));
  return Event(ctx, e);
}

Result<PinnedBuffer> alloc_pinned(CUcontext ctx, size_t bytes) {
  FR_ASSIGN(const Driver* d, load_driver());
  ScopedContext scope(ctx);
  FR_TRY(scope.status());
  void* p = nullptr;
  FR_TRY(check(d->cuMemHostAlloc(&p, bytes, 0), "cuMemHostAlloc"));
  return PinnedBuffer(ctx, p);
}

Result<DeviceMemory> alloc_device(CUcontext ctx, size_t bytes) {
  FR_ASSIGN(const Driver* d, load_driver());
  ScopedContext scope(ctx);
  FR_TRY(scope.status());
  CUdeviceptr p = 0;
  FR_TRY(check(d->cuMemAlloc(&p, bytes), "cuMemAlloc"));
  return DeviceMemory(ctx, p);
}

}  // namespace fr::cuda

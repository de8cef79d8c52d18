// The CUDA driver API, loaded at run time (ARCHITECTURE.md, "The CUDA driver is
// loaded at run time").
//
// Nothing links libcuda: load_driver() dlopen()s libcuda.so.1 on first use and resolves every entry point
// below through cuGetProcAddress at the toolkit's CUDA_VERSION, so each pointer has exactly the signature
// <cuda.h> declares (the _v2/_v3 variant the header's macros select). A machine without the driver gets
// Errc::kCuda "no CUDA driver (libcuda.so.1 not found)", never a crash or a loader error at start-up.
// <cuda.h> is included for types only.
//
// Thread-safety: load_driver() is safe to call from any thread; the table is immutable once loaded.
#pragma once

#include <cuda.h>

#include <string>

#include "common/result.h"

namespace fr::cuda {

// X-macro list of the entry points we use; the names are the API's base names (no _v2 suffix).
#define FR_CUDA_DRIVER_FUNCTIONS(X)                                                                       \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGet)                   \
  X(cuDeviceGetCount) X(cuDeviceGetUuid) X(cuDeviceGetName) X(cuDeviceTotalMem) X(cuDeviceGetAttribute)  \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxPushCurrent)        \
  X(cuCtxPopCurrent)        \
  X(cuMemCreate) X(cuMemRelease) X(cuMemExportToShareableHandle) X(cuMemImportFromShareableHandle)       \
  X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap) X(cuMemSetAccess)                 \
  X(cuMemGetAllocationGranularity) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemAlloc) X(cuMemFree)         \
  X(cuMemcpyHtoD) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemcpyAsync) X(cuMemsetD8)   \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuEventCreate) X(cuEventDestroy)         \
  X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuModuleLoadData) X(cuModuleUnload)     \
  X(cuModuleGetFunction) X(cuLaunchKernel) X(cuPointerGetAttribute) X(cuMemHostRegister) X(cuMemHostUnregister)

// Entry points only some drivers have: left nullptr when the driver lacks them, so that the weight daemon
// and the engines still load on an older driver; their users check (the checkpoint API: driver r570+,
// src/snapshot/gpu_cuda.cc).
#define FR_CUDA_DRIVER_FUNCTIONS_OPTIONAL(X)                                                              \
  X(cuCheckpointProcessGetState) X(cuCheckpointProcessLock) X(cuCheckpointProcessCheckpoint)              \
  X(cuCheckpointProcessRestore) X(cuCheckpointProcessUnlock) X(cuStreamBeginCapture) X(cuStreamEndCapture)      \
  X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy)

// Entry points whose unsuffixed declaration in <cuda.h> is older than the variant cuGetProcAddress returns
// at CUDA_VERSION, because the toolkit added a new ABI without a #define to it: these are resolved at the
// version given here, the one whose signature <cuda.h> declares. (cuCtxSynchronize: at 13000 the driver
// hands out cuCtxSynchronize_v2(CUcontext), while <cuda.h> declares cuCtxSynchronize(void).) Checked
// against cudaTypedefs.h for every function above when the toolkit changes.
#define FR_CUDA_DRIVER_FUNCTIONS_AT_VERSION(X) X(cuCtxSynchronize, 2000)

struct Driver {
#define FR_CUDA_DECLARE_FN(name) decltype(&::name) name = nullptr;
#define FR_CUDA_DECLARE_FN_AT(name, version) decltype(&::name) name = nullptr;
  FR_CUDA_DRIVER_FUNCTIONS(FR_CUDA_DECLARE_FN)
  FR_CUDA_DRIVER_FUNCTIONS_OPTIONAL(FR_CUDA_DECLARE_FN)
  FR_CUDA_DRIVER_FUNCTIONS_AT_VERSION(FR_CUDA_DECLARE_FN_AT)
#undef FR_CUDA_DECLARE_FN
#undef FR_CUDA_DECLARE_FN_AT
  int version = 0;  // cuDriverGetVersion, e.g. 13000
};

// The loaded, initialised (cuInit) driver. Errc::kCuda "no CUDA driver ..." without libcuda.so.1,
// "no GPU ..." when cuInit finds no device. The outcome of the first call is remembered.
Result<const Driver*> load_driver();

// An Error for a failed call: "cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
Error cuda_error(const char* call, CUresult r);
// Status of a driver call: `FR_TRY(check(d->cuMemFree(p), "cuMemFree"))`.
inline Status check(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return {};
  return cuda_error(call, r);
}

}  // namespace fr::cuda

// Loads libcuda.so.1 once and resolves the table in driver.h.
#include "cuda/driver.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace fr::cuda {
namespace {

Result<Driver> open_driver() {
  // Never closed: the driver must outlive every handle and static destructor that may still call it.
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return make_error(Errc::kCuda, "no CUDA driver (libcuda.so.1 not found)");
  // cuGetProcAddress returns the variant of each function that matches the header we compiled against,
  // which a plain dlsym of the base name would not (it yields the oldest ABI, e.g. cuMemAlloc v1).
  using GetProc = decltype(&::cuGetProcAddress);
  auto get_proc = reinterpret_cast<GetProc>(::dlsym(lib, "cuGetProcAddress_v2"));
  if (get_proc == nullptr)
    return make_error(Errc::kCuda, "CUDA driver too old: libcuda.so.1 has no cuGetProcAddress_v2 (need CUDA 12+)");
  Driver d;
// `#name` must be taken in the first macro that sees the name: <cuda.h> #defines many base names to their
// versioned symbols (cuDeviceGetUuid -> cuDeviceGetUuid_v2), and an argument passed on to another macro is
// expanded first, while cuGetProcAddress wants the base name.
#define FR_CUDA_RESOLVE(member, symbol, version)                                                     \
  {                                                                                                  \
    void* fn = nullptr;                                                                              \
    CUdriverProcAddressQueryResult q{};                                                              \
    CUresult r = get_proc(symbol, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &q);                    \
    if (r != CUDA_SUCCESS || fn == nullptr || q != CU_GET_PROC_ADDRESS_SUCCESS)                      \
      return make_error(Errc::kCuda, std::string("CUDA driver lacks ") + symbol + " (driver older than the toolkit?)"); \
    d.member = reinterpret_cast<decltype(d.member)>(fn);                                             \
  }
#define FR_CUDA_RESOLVE_OPTIONAL(name)                                                               \
  {                                                                                                  \
    void* fn = nullptr;                                                                              \
    CUdriverProcAddressQueryResult q{};                                                              \
    if (get_proc(#name, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q) == CUDA_SUCCESS &&       \
        q == CU_GET_PROC_ADDRESS_SUCCESS)                                                            \
      d.name = reinterpret_cast<decltype(d.name)>(fn);                                               \
  }
#define FR_CUDA_RESOLVE_FN(name) FR_CUDA_RESOLVE(name, #name, CUDA_VERSION)
#define FR_CUDA_RESOLVE_AT(name, version) FR_CUDA_RESOLVE(name, #name, version)
  FR_CUDA_DRIVER_FUNCTIONS(FR_CUDA_RESOLVE_FN)
  FR_CUDA_DRIVER_FUNCTIONS_AT_VERSION(FR_CUDA_RESOLVE_AT)
  FR_CUDA_DRIVER_FUNCTIONS_OPTIONAL(FR_CUDA_RESOLVE_OPTIONAL)
#undef FR_CUDA_RESOLVE_FN
#undef FR_CUDA_RESOLVE_AT
#undef FR_CUDA_RESOLVE_OPTIONAL
#undef FR_CUDA_RESOLVE
  CUresult r = d.cuInit(0);
  if (r == CUDA_ERROR_NO_DEVICE) return make_error(Errc::kCuda, "no GPU (cuInit: CUDA_ERROR_NO_DEVICE)");
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    d.cuGetErrorName(r, &name);
    return make_error(Errc::kCuda, std::string("cuInit failed: ") + (name ? name : "unknown error"));
  }
  d.cuDriverGetVersion(&d.version);
  return d;
}

std::once_flag g_once;
Result<Driver>* g_driver = nullptr;  // leaked on purpose, like the library handle

}  // namespace

Result<const Driver*> load_driver() {
  std::call_once(g_once, [] { g_driver = new Result<Driver>(open_driver()); });
  if (!g_driver->ok()) return g_driver->error();
  return &g_driver->value();
}

Error cuda_error(const char* call, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  auto d = load_driver();
  if (d.ok()) {
    (*d)->cuGetErrorName(r, &name);
    (*d)->cuGetErrorString(r, &text);
  }
  std::string msg = std::string(call) + ": " + (name ? name : "CUresult " + std::to_string(static_cast<int>(r)));
  if (text != nullptr) msg += std::string(" (") + text + ")";
  return make_error(Errc::kCuda, msg);
}

}  // namespace fr::cuda

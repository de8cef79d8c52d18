// make_cuda_backend for builds without the CUDA toolkit (cmake/Cuda.cmake).
#include "daemon/backend.h"

namespace fr::daemon {

Result<std::unique_ptr<Backend>> make_cuda_backend(const std::string&) {
  return make_error(Errc::kUnsupported, "built without CUDA: the cuda backend is unavailable (use --backend host)");
}

}  // namespace fr::daemon

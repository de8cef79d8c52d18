// make_cuda_device for builds without the CUDA toolkit (cmake/Cuda.cmake).
#include "engine_loader/device.h"

namespace fr::loader {

Result<std::unique_ptr<DeviceApi>> make_cuda_device(int) {
  return make_error(Errc::kUnsupported, "built without CUDA: device cuda:N is unavailable (use device host)");
}

}  // namespace fr::loader

// Built without the CUDA toolkit: --device cuda:N reports that.
#include "tinyengine/checkpoint.h"
#include "tinyengine/cuda_model.h"

namespace fr::te {

Result<std::shared_ptr<CudaModel>> bind_cuda_model(const ModelConfig&, const TensorLookup&, int) {
  return make_error(Errc::kUnsupported, "this build has no CUDA forward (built without the CUDA toolkit)");
}

Result<TensorSet> upload_to_cuda(const TensorSet&, int) {
  return make_error(Errc::kUnsupported, "this build has no CUDA forward (built without the CUDA toolkit)");
}

}  // namespace fr::te

// The CUDA forward: the same model as model.h computed on a GPU, on weights in device memory (uploaded
// from disk, or attached from a fastrestart-weightd pool in zero_copy mode).
//
// Kernels are embedded (forward_kernels.cu) and launched through the driver API loaded at run time
// (src/cuda/driver.h), so the binary needs neither cudart nor cuBLAS and starts on a machine without a GPU.
// Results are deterministic run to run on one GPU; they match the CPU forward's tokens, with
// log-probabilities equal to about 1e-4 (different summation order).
// Thread-safety: generate() may be called from many threads; launches are serialized on one stream.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fastrestart/result.h"
#include "tinyengine/model.h"

namespace fr::te {

class CudaModel {
 public:
  virtual ~CudaModel() = default;
  virtual Generation generate(const std::vector<int>& prompt, int max_tokens, int top_k) const = 0;
  virtual std::string device_name() const = 0;
  // The snapshot graph check (--cuda-graph-check, docs/snapshot.md): captures a CUDA graph of the lm_head
  // GEMV on a fixed input, reading the weights where they are now; replay runs it and returns a checksum
  // of its output. A graph captured before a weightless snapshot must replay the same after the restore:
  // the pool is re-mapped at the same address, so the graph needs no rebinding.
  virtual Status capture_weight_graph() { return make_error(Errc::kUnsupported, "no CUDA graph support"); }
  virtual Result<std::string> replay_weight_graph() const { return make_error(Errc::kUnsupported, "no CUDA graph"); }
};

// Binds device pointers (valid in `ordinal`'s primary context) found through `lookup`; checks as
// Model::bind does. Errc::kUnsupported when built without CUDA, Errc::kCuda without a driver or GPU.
Result<std::shared_ptr<CudaModel>> bind_cuda_model(const ModelConfig& config, const TensorLookup& lookup, int ordinal);

// Device memory holding a copy of host tensors: returns a TensorSet of device pointers (its owner keeps
// the memory). Used after a disk load when computing on the GPU.
struct TensorSet;
Result<TensorSet> upload_to_cuda(const TensorSet& host, int ordinal);

// "cuda:N" -> N; -1 for anything else.
int cuda_ordinal(const std::string& device);

}  // namespace fr::te

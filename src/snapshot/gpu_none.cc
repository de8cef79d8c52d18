// Builds without the CUDA toolkit: no GPU snapshots (CPU engines never reach these calls).
#include "snapshot/gpu.h"

namespace fr::snapshot {
namespace {

Error none() { return make_error(Errc::kUnsupported, "built without CUDA: cannot checkpoint a GPU process"); }

class NoGpu final : public GpuCheckpointer {
 public:
  Result<GpuIdentity> identity() override { return none(); }
  Status lock(pid_t, unsigned) override { return none(); }
  Status checkpoint(pid_t) override { return none(); }
  Status restore(pid_t) override { return none(); }
  Status unlock(pid_t) override { return none(); }
  Result<std::string> state(pid_t) override { return none(); }
};

}  // namespace

std::unique_ptr<GpuCheckpointer> make_gpu_checkpointer() { return std::make_unique<NoGpu>(); }

}  // namespace fr::snapshot

// The driver's checkpoint API (CUDA 12.8+, driver r570+), resolved with the rest of the driver table.
#include "cuda/device.h"
#include "cuda/driver.h"
#include "snapshot/gpu.h"

namespace fr::snapshot {
namespace {

// The driver, once it is known to have the checkpoint API (optional in the table: driver.h).
Result<const cuda::Driver*> checkpoint_driver() {
  FR_ASSIGN(const cuda::Driver* d, cuda::load_driver());
  if (d->cuCheckpointProcessLock == nullptr || d->cuCheckpointProcessCheckpoint == nullptr ||
      d->cuCheckpointProcessRestore == nullptr || d->cuCheckpointProcessUnlock == nullptr ||
      d->cuCheckpointProcessGetState == nullptr)
    return make_error(Errc::kCuda, "the CUDA driver (version " + std::to_string(d->version) +
                                       ") has no checkpoint API (cuCheckpointProcess*: driver r570 or newer)");
  return d;
}

class CudaCheckpointer final : public GpuCheckpointer {
 public:
  Result<GpuIdentity> identity() override {
    FR_ASSIGN(const cuda::Driver* d, cuda::load_driver());
    CUdevice dev = 0;
    FR_TRY(cuda::check(d->cuDeviceGet(&dev, 0), "cuDeviceGet"));
    CUuuid u{};
    FR_TRY(cuda::check(d->cuDeviceGetUuid(&u, dev), "cuDeviceGetUuid"));
    char name[256] = {};
    FR_TRY(cuda::check(d->cuDeviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName"));
    return GpuIdentity{std::to_string(d->version), cuda::format_uuid(u), name};
  }
  Status lock(pid_t pid, unsigned timeout_ms) override {
    FR_ASSIGN(const cuda::Driver* d, checkpoint_driver());
    CUcheckpointLockArgs args{};
    args.timeoutMs = timeout_ms;
    return cuda::check(d->cuCheckpointProcessLock(pid, &args), "cuCheckpointProcessLock");
  }
  Status checkpoint(pid_t pid) override {
    FR_ASSIGN(const cuda::Driver* d, checkpoint_driver());
    CUcheckpointCheckpointArgs args{};
    return cuda::check(d->cuCheckpointProcessCheckpoint(pid, &args), "cuCheckpointProcessCheckpoint");
  }
  Status restore(pid_t pid) override {
    FR_ASSIGN(const cuda::Driver* d, checkpoint_driver());
    CUcheckpointRestoreArgs args{};
    return cuda::check(d->cuCheckpointProcessRestore(pid, &args), "cuCheckpointProcessRestore");
  }
  Status unlock(pid_t pid) override {
    FR_ASSIGN(const cuda::Driver* d, checkpoint_driver());
    CUcheckpointUnlockArgs args{};
    return cuda::check(d->cuCheckpointProcessUnlock(pid, &args), "cuCheckpointProcessUnlock");
  }
  Result<std::string> state(pid_t pid) override {
    FR_ASSIGN(const cuda::Driver* d, checkpoint_driver());
    CUprocessState s{};
    FR_TRY(cuda::check(d->cuCheckpointProcessGetState(pid, &s), "cuCheckpointProcessGetState"));
    switch (s) {
      case CU_PROCESS_STATE_RUNNING: return std::string("running");
      case CU_PROCESS_STATE_LOCKED: return std::string("locked");
      case CU_PROCESS_STATE_CHECKPOINTED: return std::string("checkpointed");
      case CU_PROCESS_STATE_FAILED: return std::string("failed");
    }
    return std::string("unknown");
  }
};

}  // namespace

std::unique_ptr<GpuCheckpointer> make_gpu_checkpointer() { return std::make_unique<CudaCheckpointer>(); }

}  // namespace fr::snapshot

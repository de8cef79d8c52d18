// The GPU side of a snapshot: the CUDA driver's checkpoint API, called by pid from the helper process
// (fastrestart-snapshot), never from fastrestartd, which never creates a CUDA context
// (ARCHITECTURE.md). A seam: gpu_cuda.cc in
// builds with the CUDA toolkit, gpu_none.cc otherwise.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "fastrestart/result.h"
#include "snapshot/identity.h"

namespace fr::snapshot {

class GpuCheckpointer {
 public:
  virtual ~GpuCheckpointer() = default;
  // Driver version, UUID and name of CUDA device 0 as this process sees it (CUDA_VISIBLE_DEVICES is the
  // engine's). No context is created.
  virtual Result<GpuIdentity> identity() = 0;
  virtual Status lock(pid_t pid, unsigned timeout_ms) = 0;  // further CUDA calls of pid block
  virtual Status checkpoint(pid_t pid) = 0;                 // GPU memory to host; device handles released
  virtual Status restore(pid_t pid) = 0;
  virtual Status unlock(pid_t pid) = 0;
  // "running", "locked", "checkpointed" or "failed".
  virtual Result<std::string> state(pid_t pid) = 0;
};

std::unique_ptr<GpuCheckpointer> make_gpu_checkpointer();

// `root` and its descendants (through /proc/<pid>/task/*/children), root first.
std::vector<pid_t> process_tree(pid_t root);
// Whether `pid` has the NVIDIA device nodes open or mapped: a process without a CUDA context has neither,
// so CPU engines skip every CUDA step (detected, not configured).
bool holds_gpu(pid_t pid);

}  // namespace fr::snapshot

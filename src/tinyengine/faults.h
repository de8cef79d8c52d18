// The fault injection actions (docs/tinyengine.md, "Faults"). Each mimics how a production engine fails.
#pragma once

#include <sys/types.h>

#include <string>

#include "fastrestart/result.h"
#include "tinyengine/options.h"

namespace fr::te {

// --fault-standby MODE: never-park | bind-early | exit-after-release | die-parked-after=S.
Status parse_standby_fault(const std::string& mode, FaultOptions* f);

// PyTorch's CUDA out-of-memory error as torch prints it on an uncaught exception (to stderr).
void print_cuda_oom();
// vLLM's startup check failure (vllm/v1/worker/gpu_worker.py) for `utilization`, to stderr.
void print_vllm_free_memory(double utilization);
// Forks a worker that sleeps until signalled and is not tied to the parent's life (no PDEATHSIG, same
// process group), as vLLM's EngineCore. REQUIRES: no other threads yet. Returns its pid, or -1.
pid_t spawn_worker();
// Starts a detached thread that allocates and touches host memory at `mib_per_s` until the process dies.
void start_memory_growth(double mib_per_s);

}  // namespace fr::te

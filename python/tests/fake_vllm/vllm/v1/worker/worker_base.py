"""vllm.v1.worker.worker_base reduced to `WorkerWrapperBase.init_worker`.

vllm-project/vllm vllm/v1/worker/worker_base.py (checked at 09aa6b34bf7bd7f309464cefb570552144db41c3):
`init_worker` calls `load_general_plugins()` before it builds the worker class; `WorkerProc.__init__`
(vllm/v1/executor/multiproc_executor.py) calls it, then `self.worker.init_device()` and `load_model()`.
The rest of the start is the engine core's calls into the worker (vllm/v1/engine/core.py
`_initialize_kv_caches`), reproduced in order by run_worker.
"""

import repro
from vllm.plugins import load_general_plugins


class WorkerWrapperBase:
    def init_worker(self, args, role):
        load_general_plugins()
        if role == "worker":
            repro.step("plugins", role)
            if args.processes:
                repro.role_line("worker")
        from vllm.v1.worker.gpu_worker import Worker
        self.worker = Worker(args, role)
        return self.worker


def run_worker(args, role="worker"):
    """A worker's start, in vLLM's order: init_device, load_model, the profile, the KV cache allocation,
    the graph capture; then the reproduction's first request (one forward pass) and its JSON summary."""
    w = WorkerWrapperBase().init_worker(args, role)
    w.init_device()
    if not w.load_model():
        return 1
    w.determine_available_memory()
    w.initialize_from_config()
    w.compile_or_warm_up_model()
    return w.first_request()

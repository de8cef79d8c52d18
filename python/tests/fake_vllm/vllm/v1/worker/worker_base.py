"""vllm.v1.worker.worker_base reduced to `WorkerWrapperBase.init_worker`.

vllm-project/vllm vllm/v1/worker/worker_base.py (checked at 09aa6b34bf7bd7f309464cefb570552144db41c3):
`init_worker` calls `load_general_plugins()`, then builds the worker class named by
`parallel_config.worker_cls` (`resolve_obj_by_qualname`; "auto" is the platform's GPU worker; checked at
0243225317f5e0a05eb29485ac0810644409eedf); `WorkerProc.__init__`
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
        self.worker = resolve_worker_cls(getattr(args, "worker_cls", "auto"))(args, role)
        return self.worker


def resolve_worker_cls(qualname):
    """vllm/utils resolve_obj_by_qualname over ParallelConfig.worker_cls ("auto": the GPU worker, which
    vLLM's CUDA platform substitutes in check_and_update_config)."""
    if qualname in (None, "auto"):
        qualname = "vllm.v1.worker.gpu_worker.Worker"
    import importlib
    module, _, name = qualname.rpartition(".")
    return getattr(importlib.import_module(module), name)


def run_worker(args, role="worker"):
    """A worker process's start (the multiprocess executor), in vLLM's order: init_device, load_model, the
    profile, the KV cache allocation, the graph capture; then the reproduction's first request (one forward
    pass) and its JSON summary. The reproduction's worker process does the engine core's KV sizing itself
    (vLLM's engine core drives it over collective_rpc, which is not reproduced: no warmed standby with
    the multiprocess executor, docs/vllm.md)."""
    w = WorkerWrapperBase().init_worker(args, role)
    w.init_device()
    if not w.load_model():
        return 1
    from vllm.v1.core.kv_cache_utils import get_kv_cache_configs
    available = w.determine_available_memory()
    w.initialize_from_config(get_kv_cache_configs(w.vllm_config, [w.get_kv_cache_spec()], [available])[0])
    w.compile_or_warm_up_model()
    return w.first_request()

"""vllm.v1.engine.core reduced to the engine core process's start.

vllm-project/vllm vllm/v1/engine/core.py (checked at ac3cb2e2eca80290181abb9365d572af6d287473)
`EngineCore.__init__`: "plugins need to be loaded at the engine/scheduler level too":
`load_general_plugins()`, then the executor (`executor_class(vllm_config)`), which starts the workers
(MultiprocExecutor: one WorkerProc per rank; with one GPU the uniproc executor runs the worker in this
process). Then `_initialize_kv_caches`: the workers' profile (`determine_available_memory`), the KV cache
config (`get_kv_cache_configs`), `initialize_from_config` (allocation) and `compile_or_warm_up_model`
(graph capture), in the worker (vllm/v1/worker/gpu_worker.py).
"""

import repro
from vllm.plugins import load_general_plugins


class EngineCore:
    def __init__(self, args):
        load_general_plugins()
        repro.step("plugins", "engine_core")
        if args.processes:
            repro.role_line("engine_core")
        self.args = args

    def run(self):
        """The executor's start: the worker (a process of its own with --processes, as MultiprocExecutor)."""
        if self.args.processes:
            repro.step("worker_spawn", "engine_core")
            return repro.spawn("worker", self.args)
        from vllm.v1.worker.worker_base import run_worker
        return run_worker(self.args, role="engine_core")


def run_engine_core(args):
    """EngineCoreProc's process entry (vllm/v1/engine/core.py run_engine_core)."""
    return EngineCore(args).run()

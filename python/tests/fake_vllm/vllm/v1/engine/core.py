"""vllm.v1.engine.core reduced to the engine core process's start.

vllm-project/vllm vllm/v1/engine/core.py (checked at ac3cb2e2eca80290181abb9365d572af6d287473 and
00080ee13c7a451fce071ccb8d0e94d395acf5a7) `EngineCore.__init__`: "plugins need to be loaded at the
engine/scheduler level too": `load_general_plugins()`, then the executor (`executor_class(vllm_config)`),
which builds the workers (MultiprocExecutor: one WorkerProc process per rank; UniProcExecutor, vLLM's choice
for one GPU: the worker in this process), then `self._initialize_kv_caches(vllm_config)`, looked up on the
instance: `model_executor.get_kv_cache_specs()`, `determine_available_memory()` (the workers' profile),
`get_kv_cache_configs(vllm_config, kv_cache_specs, available_gpu_memory)`,
`model_executor.initialize_from_config(kv_cache_configs)` (the allocation) and
`model_executor.compile_or_warm_up_model()` (graph capture), in that order; then the scheduler.

The reproduction runs that order with the worker in this process (`--distributed-executor-backend uni`, or
no `--processes` at all); with `--processes` and `mp` (the reproduction's default) the worker is a process of
its own that runs its start itself (worker_base.run_worker).
"""

import repro
from vllm.plugins import load_general_plugins


class UniProcExecutor:
    """vllm/v1/executor/uniproc_executor.py: the driver worker in this process; collective_rpc calls it."""

    def __init__(self, args, role):
        from vllm.v1.worker.worker_base import WorkerWrapperBase
        self.driver_worker = WorkerWrapperBase().init_worker(args, role)
        self.driver_worker.init_device()
        self.loaded = self.driver_worker.load_model()

    def collective_rpc(self, method, args=()):
        return [getattr(self.driver_worker, method)(*args)]

    def get_kv_cache_specs(self):
        return self.collective_rpc("get_kv_cache_spec")

    def determine_available_memory(self):
        return self.collective_rpc("determine_available_memory")

    def initialize_from_config(self, kv_cache_configs):
        self.collective_rpc("initialize_from_config", args=(kv_cache_configs[0],))

    def compile_or_warm_up_model(self):
        self.collective_rpc("compile_or_warm_up_model")


class EngineCore:
    def __init__(self, args):
        load_general_plugins()
        repro.step("plugins", "engine_core")
        if args.processes:
            repro.role_line("engine_core")
        self.args = args
        # EngineCore keeps its VllmConfig (self.vllm_config); the gate reads parallel_config.worker_cls there
        from vllm.config import ParallelConfig
        import types
        self.vllm_config = types.SimpleNamespace(parallel_config=ParallelConfig(
            tensor_parallel_size=args.tensor_parallel_size, worker_cls=getattr(args, "worker_cls", "auto")))
        self.model_executor = None
        if not args.processes or getattr(args, "distributed_executor_backend", "mp") == "uni":
            self.model_executor = UniProcExecutor(args, "engine_core")
            if self.model_executor.loaded:
                self._initialize_kv_caches(args)

    def _initialize_kv_caches(self, vllm_config):
        from vllm.v1.core.kv_cache_utils import get_kv_cache_configs
        specs = self.model_executor.get_kv_cache_specs()
        available = self.model_executor.determine_available_memory()
        configs = get_kv_cache_configs(vllm_config, specs, available)
        self.model_executor.initialize_from_config(configs)
        self.model_executor.compile_or_warm_up_model()
        return configs[0]

    def run(self):
        """Serving: the reproduction's first request (uniproc), or the worker process's start (mp)."""
        if self.model_executor is not None:
            if not self.model_executor.loaded:
                return 1
            return self.model_executor.driver_worker.first_request()
        repro.step("worker_spawn", "engine_core")
        return repro.spawn("worker", self.args)


def run_engine_core(args):
    """EngineCoreProc's process entry (vllm/v1/engine/core.py run_engine_core)."""
    return EngineCore(args).run()

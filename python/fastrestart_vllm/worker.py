"""fastrestart_vllm.worker.Worker: vLLM's GPU worker with its KV cache in a KV arena of fastrestart's weight
daemon (docs/vllm.md, "A warmed standby over the KV arena").

    vllm serve MODEL --worker-cls fastrestart_vllm.worker.Worker      # with FASTRESTART_KV_ARENA=NAME
    python3 -m fastrestart_vllm.launch serve MODEL --kv-arena NAME    # the launcher sets both

vLLM builds the class named by `--worker-cls` (ParallelConfig.worker_cls) in each worker process, after it
loaded the general plugins (vllm/v1/worker/worker_base.py `WorkerWrapperBase.init_worker`,
`resolve_obj_by_qualname`). This subclass changes three calls of the engine core's
`_initialize_kv_caches` (vllm/v1/engine/core.py) and adds one:

- `determine_available_memory()`: the KV cache's budget is the daemon's arena when it holds one (vLLM then
  sizes the blocks from it in `get_kv_cache_configs`), else the profile's figure;
- `initialize_from_config(kv_cache_config)`: vLLM's own, with V2's `_allocate_kv_cache` handing out views
  into the arena's reserved range (kv_arena.allocation_through). A live engine leases the arena at once; a
  warmed standby keeps the placeholder under the range;
- `compile_or_warm_up_model()`: untouched: the graphs are captured over the range, placeholder or arena;
- `fastrestart_kv_swap_in()`: called by the engine core after a warmed standby's release
  (`collective_rpc`, standby.py): leases the arena and maps it at the same address, so the captured graphs
  write the arena. A lease that fails there ends the engine (its graphs read the range, which holds only the
  placeholder): fastrestartd counts a failed standby and starts a fresh engine.
"""

import os

from vllm.v1.worker.gpu_worker import Worker as _GpuWorker

from . import kv_arena, standby

__all__ = ["Worker", "QUALNAME"]

QUALNAME = __name__ + ".Worker"  # launch.WORKER_CLS, which the launcher adds as --worker-cls


class Worker(_GpuWorker):
    _fr_kv = None       # kv_arena.KvArena, or None without FASTRESTART_KV_ARENA
    _fr_outcome = ()    # "arena" / "own" once the KV cache was allocated

    def _fr_device(self):
        # vLLM's Worker sets .device in init_device (torch.device("cuda:N")); the model runner has it too.
        return getattr(self, "device", None) or self.model_runner.device

    def determine_available_memory(self):
        own = super().determine_available_memory()
        try:
            self._fr_kv = kv_arena.from_env(self._fr_device())
            if self._fr_kv is None:
                return own
            return self._fr_kv.budget(int(own))
        except kv_arena.ArenaUnusable as e:
            kv_arena.fallback_line(os.environ.get(kv_arena.ARENA_ENV, ""), str(e))
            self._fr_kv = None
            return own

    def initialize_from_config(self, kv_cache_config):
        if self._fr_kv is None:
            return super().initialize_from_config(kv_cache_config)
        live = not standby.pending()
        with kv_arena.allocation_through(self._fr_kv, live) as outcome:
            out = super().initialize_from_config(kv_cache_config)
        if not outcome:
            # The runner allocated without V2's _allocate_kv_cache (the V1 runner): its own KV cache.
            kv_arena.fallback_line(self._fr_kv.name, "this vLLM's model runner did not allocate through "
                                   "vllm/v1/worker/gpu/attn_utils._allocate_kv_cache (the V1 runner is not "
                                   "wrapped yet)")
            self._fr_kv.arena = None
        self._fr_outcome = tuple(outcome) or ("own",)
        return out

    def fastrestart_kv_swap_in(self):
        """After a warmed standby's release: the lease. Returns "arena", or "own" when the KV cache is the
        worker's own (nothing to swap)."""
        if self._fr_kv is None or self._fr_kv.arena is None or self._fr_kv.arena.leased:
            return "own"
        try:
            self._fr_kv.swap_in()
        except (RuntimeError, OSError) as e:
            raise RuntimeError("fastrestart: the released standby could not lease KV arena '%s' (%s); its KV "
                               "cache and captured graphs are over the arena's range, which holds only the "
                               "placeholder, so it must not serve" % (self._fr_kv.name, e)) from None
        return "arena"

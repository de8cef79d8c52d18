"""fastrestart_vllm.worker.Worker: vLLM's GPU worker with its KV cache in a KV arena of fastrestart's weight
daemon (docs/vllm.md, "A warmed standby over the KV arena").

    vllm serve MODEL --worker-cls fastrestart_vllm.worker.Worker      # with FASTRESTART_KV_ARENA=NAME
    python3 -m fastrestart_vllm.launch serve MODEL --kv-arena NAME    # the launcher sets both

vLLM builds the class named by `--worker-cls` (ParallelConfig.worker_cls) in each worker process, after it
loaded the general plugins (vllm/v1/worker/worker_base.py `WorkerWrapperBase.init_worker`,
`resolve_obj_by_qualname`). This subclass changes three calls of the engine core's
`_initialize_kv_caches` (vllm/v1/engine/core.py) and adds one:

- `determine_available_memory()`: the KV cache's budget is the daemon's arena when it holds one (vLLM then
  sizes the blocks from it in `get_kv_cache_configs`), else the profile's figure. An arena larger than the
  engine's whole share of its device (vLLM's `requested_memory`, total x --gpu-memory-utilization) ends the
  start with one line naming the arena and its size;
- `initialize_from_config(kv_cache_config)`: vLLM's own, with the raw KV allocation (V2's
  `_allocate_kv_cache`, or the V1 runner's `_allocate_kv_cache_tensors`) handing out views into the arena's
  reserved range (kv_arena.allocation_through). A live engine leases the arena at once; a warmed standby
  keeps the placeholder under the range;
- `compile_or_warm_up_model()`: untouched: the graphs are captured over the range, placeholder or arena;
- `fastrestart_kv_swap_in()`: called by the engine core after a warmed standby's release
  (`collective_rpc`, standby.py): leases the arena and maps it at the same address, so the captured graphs
  write the arena, then runs what vLLM's `Worker.wake_up` runs once the KV cache's memory is back (the
  runner's `post_kv_cache_wake_up`). A lease that fails there ends the engine (its graphs read the range, which holds only the
  placeholder): fastrestartd counts a failed standby and starts a fresh engine.
"""

import os

from vllm.v1.worker.gpu_worker import Worker as _GpuWorker

from . import kv_arena, standby

__all__ = ["Worker", "QUALNAME", "ArenaTooLarge"]

QUALNAME = __name__ + ".Worker"  # launch.WORKER_CLS, which the launcher adds as --worker-cls


class ArenaTooLarge(RuntimeError):
    """The daemon's arena is larger than this engine's share of its device: the start ends (no fallback to an
    own KV cache of that size, which would not fit either)."""


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
            budget = self._fr_kv.budget(int(own))
        except kv_arena.ArenaUnusable as e:
            kv_arena.fallback_line(os.environ.get(kv_arena.ARENA_ENV, ""), str(e))
            self._fr_kv = None
            return own
        # vLLM's request_memory (init_device): the whole share of the device this engine may use; fastrestartd
        # counts the arena inside it (docs/supervisor.md, "KV arenas").
        share = getattr(self, "requested_memory", None)
        if self._fr_kv.held is not None and share is not None and budget > share:
            raise ArenaTooLarge(
                "fastrestart: kv arena '%s' on the daemon of %s holds %d bytes, more than this engine's whole "
                "share of its device (%d bytes, vLLM's requested_memory: total x --gpu-memory-utilization); "
                "its KV cache cannot be that arena: give the engine a larger share or let the daemon drop the "
                "arena (it is made again at this engine's size by its first lease)"
                % (self._fr_kv.name, self._fr_kv.device, budget, int(share)))
        return budget

    def initialize_from_config(self, kv_cache_config):
        if self._fr_kv is None:
            return super().initialize_from_config(kv_cache_config)
        live = not standby.pending()
        with kv_arena.allocation_through(self._fr_kv, live, self.model_runner) as outcome:
            out = super().initialize_from_config(kv_cache_config)
        if not outcome:
            # Neither wrapped site ran: the V1 runner of trees that allocate through the module-level
            # allocate_kv_cache (vllm/v1/worker/utils.py), or a KV connector's allocate_uniform_kv_caches.
            kv_arena.fallback_line(self._fr_kv.name, "this vLLM allocated its KV cache through neither "
                                   "vllm/v1/worker/gpu/attn_utils._allocate_kv_cache (Model Runner V2) nor "
                                   "GPUModelRunner._allocate_kv_cache_tensors (V1): its module-level "
                                   "allocate_kv_cache and a KV connector's allocate_uniform_kv_caches are not "
                                   "wrapped")
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
        self._fr_post_wake_up()
        return "arena"

    def _fr_post_wake_up(self):
        """What vLLM's Worker.wake_up runs once the KV cache's memory is back (tags None or "kv_cache"): the
        runner's post_kv_cache_wake_up (V1: init_fp8_kv_scales; V2: its block tables' layout tensors); trees
        without that hook reset the FP8 scales in wake_up itself when the KV cache is fp8. The allocator's
        wake_up is not called: the arena, not vLLM's sleep allocator, holds this memory."""
        runner = self.model_runner
        hook = getattr(runner, "post_kv_cache_wake_up", None)
        if callable(hook):
            hook()
            return
        cache_dtype = str(getattr(getattr(self, "cache_config", None), "cache_dtype", "auto"))
        if cache_dtype.startswith("fp8") and callable(getattr(runner, "init_fp8_kv_scales", None)):
            runner.init_fp8_kv_scales()

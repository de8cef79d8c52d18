"""fastrestart_vllm.worker.Worker: vLLM's GPU worker with its KV cache in a KV arena of fastrestart's weight
daemon (docs/vllm.md, "A warmed standby over the KV arena").

    vllm serve MODEL --worker-cls fastrestart_vllm.worker.Worker      # with FASTRESTART_KV_ARENA=NAME
    python3 -m fastrestart_vllm.launch serve MODEL --kv-arena NAME    # the launcher sets both

vLLM builds the class named by `--worker-cls` (ParallelConfig.worker_cls) in each worker process, after it
loaded the general plugins (vllm/v1/worker/worker_base.py `WorkerWrapperBase.init_worker`,
`resolve_obj_by_qualname`). This subclass changes `init_device` (called by the executor when it builds the
worker), three calls of the engine core's `_initialize_kv_caches` (vllm/v1/engine/core.py), and adds one:

- `init_device()`: vLLM's own, except that the free-memory check of `request_memory` (vllm/v1/worker/utils.py,
  called through gpu_worker's module global on vLLM's `MemorySnapshot`) counts the arena the daemon holds
  under this engine's arena name on its device as free: that arena is this engine's KV cache-to-be, counted
  inside its share (total x --gpu-memory-utilization) by fastrestartd but already allocated by the daemon,
  so beside it vLLM would refuse to start ("Free memory on device ... is less than desired GPU memory
  utilization"; --kv-cache-memory-bytes does not get past that check). At most the arena's bytes are
  added, on a copy of the snapshot that only the check sees: `init_snapshot`, `requested_memory` and
  everything vLLM computes from them stay vLLM's. No arena under that name, or no daemon: nothing is
  added, and vLLM's check is as without this class;
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

import contextlib
import copy
import inspect
import os

from vllm.v1.worker.gpu_worker import Worker as _GpuWorker

from . import kv_arena, standby

__all__ = ["Worker", "QUALNAME", "ArenaTooLarge"]

QUALNAME = __name__ + ".Worker"  # launch.WORKER_CLS, which the launcher adds as --worker-cls
# vllm/v1/worker/utils.py's free-memory check, imported by name into vllm/v1/worker/gpu_worker.py
REQUEST_MEMORY = "request_memory"


class ArenaTooLarge(RuntimeError):
    """The daemon's arena is larger than this engine's share of its device: the start ends (no fallback to an
    own KV cache of that size, which would not fit either)."""


class Worker(_GpuWorker):
    _fr_kv = None       # kv_arena.KvArena, or None without FASTRESTART_KV_ARENA
    _fr_outcome = ()    # "arena" / "own" once the KV cache was allocated

    def _fr_device(self):
        # vLLM's Worker sets .device in init_device (torch.device("cuda:N")); the model runner has it too.
        return getattr(self, "device", None) or self.model_runner.device

    def init_device(self):
        if not os.environ.get(kv_arena.ARENA_ENV):
            return super().init_device()
        with self._fr_arena_counted_as_free():
            return super().init_device()

    @contextlib.contextmanager
    def _fr_arena_counted_as_free(self):
        """While inside, vLLM's request_memory, as init_device calls it, sees the daemon's arena as free."""
        # The globals init_device runs with (under decorators such as vllm.tracing's instrument, which keep
        # the function in __wrapped__): request_memory is looked up there at each call.
        names = inspect.unwrap(_GpuWorker.init_device).__globals__
        inner = names.get(REQUEST_MEMORY)
        if not callable(inner):
            kv_arena.say("kv arena '%s': not counted as free memory: this vLLM's init_device calls no %s (its "
                         "free-memory check counts the arena as used)"
                         % (os.environ.get(kv_arena.ARENA_ENV), REQUEST_MEMORY))
            yield
            return

        def request_memory(init_snapshot, *args, **kwargs):
            return inner(self._fr_snapshot_with_arena_free(init_snapshot), *args, **kwargs)

        names[REQUEST_MEMORY] = request_memory
        try:
            yield
        finally:
            names[REQUEST_MEMORY] = inner

    def _fr_snapshot_with_arena_free(self, snapshot):
        """`snapshot`, or a copy whose free memory counts the daemon's arena of this engine (at most its
        bytes, at most the device's total)."""
        name = os.environ.get(kv_arena.ARENA_ENV)
        try:
            kv = kv_arena.from_env(self._fr_device())
            held = kv.find()
        except kv_arena.ArenaUnusable as e:
            kv_arena.say("kv arena '%s': not counted as free memory: %s" % (name, e))
            return snapshot
        if held is None:
            kv_arena.say("kv arena '%s': the daemon of %s holds none; nothing counted as free memory"
                         % (name, kv.device))
            return snapshot
        # A copy (no __init__, so no new measurement): the snapshot init_device keeps is vLLM's own.
        seen = copy.copy(snapshot)
        seen.free_memory = min(int(snapshot.total_memory), int(snapshot.free_memory) + int(held["bytes"]))
        kv_arena.say("kv arena '%s': its %d bytes on the daemon of %s counted as free memory for vLLM's "
                     "request_memory (free %d of %d bytes measured, %d with the arena)"
                     % (name, held["bytes"], kv.device, snapshot.free_memory, snapshot.total_memory,
                        seen.free_memory))
        return seen

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

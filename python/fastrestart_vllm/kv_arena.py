"""vLLM's KV cache in a KV arena of fastrestart's weight daemon (docs/vllm.md, "A warmed standby over the KV
arena"; the arena itself: docs/weightd.md, "The arena's representations").

The worker class (worker.py) sizes the KV cache from the arena the daemon holds and has vLLM's allocation
(Model Runner V2: `vllm/v1/worker/gpu/attn_utils.py` `_allocate_kv_cache`; the V1 runner:
`GPUModelRunner._allocate_kv_cache_tensors` in vllm/v1/worker/gpu_model_runner.py; each one raw int8 buffer
per `KVCacheTensor`) hand out views into the arena's reserved address range instead of fresh buffers. A live
engine leases the arena at once; a `warmed` standby allocates and captures its graphs over the range while
the placeholder backs it, parks, and leases (swap_in) only once released, at the same address, so that the
graphs it captured write the arena.

Everything here is framework-neutral: tensors come from the TensorOps seam (tensors.py), so the same code
runs under torch in vLLM and under numpy in the reproduction (python/tests/fake_vllm).
"""

import contextlib
import os

from . import tensors

__all__ = ["ARENA_ENV", "WAIT_ENV", "KvArena", "ArenaUnusable", "from_env", "say"]

ARENA_ENV = "FASTRESTART_KV_ARENA"          # the arena's name (--kv-arena NAME of the launcher)
WAIT_ENV = "FASTRESTART_KV_ARENA_WAIT"      # seconds a lease may wait for the previous holder's exit
SOCKET_DIR_ENV = "FASTRESTART_SOCKET_DIR"   # the daemons' socket directory (fastrestartd sets it)
# Each KVCacheTensor starts at a multiple of this within the range: attention kernels read 16-byte vectors,
# and vLLM's own buffers come from the caching allocator at 512-byte alignment.
ALIGN = 512


class ArenaUnusable(RuntimeError):
    """The arena cannot hold this engine's KV cache; the message says why (the KV cache is then the engine's
    own, as without --kv-arena, and the engine says so in its arena fallback line)."""


def say(msg):
    # Straight to fd 2, like the result line and the standby's lines: vLLM's logging may not reach it.
    os.write(2, ("fastrestart-kv: %s (pid %d)\n" % (msg, os.getpid())).encode())


def _align(n):
    return -(-n // ALIGN) * ALIGN


def layout(kv_cache_config):
    """[(offset, size, shared_by)] of each KVCacheTensor in the range, and the bytes they take together."""
    out, end = [], 0
    for t in kv_cache_config.kv_cache_tensors:
        out.append((end, int(t.size), list(t.shared_by)))
        end = _align(end + int(t.size))
    return out, end


class KvArena:
    """One worker's arena: `name` on the daemon of `device` ("host" or "cuda:N")."""

    def __init__(self, name, device, wait_s=30.0, socket_dir=None):
        self.name, self.device, self.wait_s, self.socket_dir = name, device, wait_s, socket_dir
        self.arena = None   # fastrestart.Arena once reserved
        self.held = None    # the daemon's record of the arena (find_arena), None when it holds none

    def _fastrestart(self):
        try:
            import fastrestart
            fastrestart.reserve_arena  # noqa: B018 -- a binding without arenas is an older build
        except (ImportError, AttributeError) as e:
            raise ArenaUnusable("the fastrestart binding has no KV arenas: %s" % e) from None
        return fastrestart

    def find(self):
        """The daemon's record of the arena under this name on this device (its "bytes": the size), or None
        when it holds none; also kept as self.held. Raises ArenaUnusable when the daemon does not answer."""
        fr = self._fastrestart()
        try:
            self.held = fr.find_arena(self.name, device=self.device, socket_dir=self.socket_dir)
        except (RuntimeError, ValueError) as e:
            raise ArenaUnusable("asking the daemon for the arena: %s" % e) from None
        return self.held

    def budget(self, own_bytes):
        """The bytes the KV cache may take: the daemon's arena when it holds one (the KV cache is sized from
        the arena, so the lease never resizes it and the next engine finds the same layout), else this
        engine's own budget (the first lease then makes the arena that size)."""
        if self.find() is None:
            say("kv arena '%s': the daemon holds none yet; sized from this engine's budget (%d bytes)"
                 % (self.name, own_bytes))
            return own_bytes
        say("kv arena '%s': sized from the daemon's arena (%d bytes; this engine's own budget: %d)"
             % (self.name, self.held["bytes"], own_bytes))
        return int(self.held["bytes"])

    def allocate(self, kv_cache_config):
        """vLLM's `_allocate_kv_cache` over the arena: {layer name: int8 tensor}, each KVCacheTensor a view
        at its offset in the reserved range (the placeholder backs it until swap_in). Raises ArenaUnusable."""
        fr = self._fastrestart()
        parts, need = layout(kv_cache_config)
        nbytes = max(need, int(self.held["bytes"])) if self.held else need
        try:
            self.arena = fr.reserve_arena(self.name, nbytes, wait_s=self.wait_s, device=self.device,
                                          socket_dir=self.socket_dir)
        except (RuntimeError, ValueError) as e:
            raise ArenaUnusable("reserving %d bytes: %s" % (nbytes, e)) from None
        ops = tensors.current()
        out = {}
        for offset, size, shared_by in parts:
            t = ops.import_tensor(self.arena.view(offset, (size,), "I8"))
            for layer in shared_by:
                out[layer] = t
        say("kv arena '%s': %d bytes reserved at 0x%x (placeholder %d bytes), %d KV tensors in it"
             % (self.name, self.arena.bytes, self.arena.base, self.arena.placeholder_bytes, len(parts)))
        return out

    def swap_in(self):
        """Leases the arena (waiting for the previous holder's exit) and maps it over the range; prints
        fastrestartd's arena line. Returns the lease's dict; raises RuntimeError or TimeoutError."""
        import fastrestart
        lease = self.arena.swap_in()
        prev = lease.get("previous_holder_pid")
        say("kv arena '%s': leased (%s)%s; swap_in %.3f s" % (
            self.name, "new, zero-filled" if lease["created"] else "generation %d" % lease["generation"],
            "; waited %.3f s for pid %d to exit" % (lease["waited_s"], prev) if prev is not None else "",
            lease["seconds"]))
        # fastrestartd's record of the lease (docs/supervisor.md, "The engine's arena line"), on stdout as
        # the reference engine prints it
        print(fastrestart.arena_line(self.arena), flush=True)
        return lease


def fallback_line(name, why):
    """Says, once, that the KV cache is the engine's own: on fd 2 and as fastrestartd's arena fallback line."""
    say("kv arena '%s': not used, the KV cache is this engine's own: %s" % (name, why))
    try:
        import fastrestart
        print(fastrestart.arena_fallback_line(why), flush=True)
    except (ImportError, AttributeError) as e:
        say("no fastrestart-arena: line (the fastrestart binding cannot write it: %s)" % e)


def from_env(framework_device):
    """The KvArena FASTRESTART_KV_ARENA names for a worker on `framework_device`, or None without one."""
    name = os.environ.get(ARENA_ENV)
    if not name:
        return None
    try:
        wait_s = float(os.environ.get(WAIT_ENV, "30"))
    except ValueError:
        raise ArenaUnusable("%s=%r: expected seconds" % (WAIT_ENV, os.environ.get(WAIT_ENV))) from None
    _, device = tensors.current().target(framework_device)
    return KvArena(name, device, wait_s, os.environ.get(SOCKET_DIR_ENV) or None)


# Where vLLM makes the KV cache's raw int8 buffers, one per KVCacheTensor (docs/vllm.md, "What of vLLM the
# launcher and the gate rely on"): Model Runner V2 through this module global, called by init_kv_cache; the
# V1 runner through this method, looked up on the runner by initialize_kv_cache_tensors.
V2_MODULE, V2_FUNCTION = "vllm.v1.worker.gpu.attn_utils", "_allocate_kv_cache"
V1_METHOD = "_allocate_kv_cache_tensors"


@contextlib.contextmanager
def allocation_through(arena, live, runner=None):
    """While inside, vLLM's raw KV allocation, V2's `_allocate_kv_cache(kv_cache_config, device)` or the V1
    `runner`'s `_allocate_kv_cache_tensors(kv_cache_config)`, allocates over `arena`; `live`: lease at once
    (an engine that is no standby), else keep the placeholder until swap_in. An arena that cannot hold the
    KV cache is said in the fallback line and vLLM's own allocation runs instead, before anything is
    written. Yields a list that gets "arena" or "own" once vLLM allocated (empty: this vLLM allocated
    elsewhere). The originals are back afterwards."""
    outcome = []

    def over_arena(inner):
        def allocate(kv_cache_config, *args, **kwargs):
            try:
                out = arena.allocate(kv_cache_config)
                if live:
                    try:
                        arena.swap_in()
                    except (RuntimeError, OSError) as e:  # OSError: TimeoutError, a lease that waited its wait_s
                        raise ArenaUnusable("leasing the arena: %s" % e) from None
            except ArenaUnusable as e:
                arena.arena = None  # the range is unmapped once no view over it is left
                fallback_line(arena.name, str(e))
                outcome.append("own")
                return inner(kv_cache_config, *args, **kwargs)
            outcome.append("arena")
            return out
        return allocate

    undo = []
    try:
        import importlib
        mod = importlib.import_module(V2_MODULE)
    except ImportError:
        mod = None
    inner = getattr(mod, V2_FUNCTION, None)
    if callable(inner):
        setattr(mod, V2_FUNCTION, over_arena(inner))
        undo.append(lambda: setattr(mod, V2_FUNCTION, inner))
    method = getattr(runner, V1_METHOD, None)
    if callable(method):
        # On the instance, for this call only: the class (and any other runner) keeps vLLM's own.
        setattr(runner, V1_METHOD, over_arena(method))
        undo.append(lambda: delattr(runner, V1_METHOD))
    try:
        yield outcome
    finally:
        for u in undo:
            u()

"""The standby gate of a vLLM engine (docs/vllm.md, "Standby engines"; the protocol: docs/standby.md).

register() runs in every process vLLM starts, and calls gate(). fastrestartd passes one descriptor
(FASTRESTART_STANDBY_FD) to the first process, the one `vllm serve` runs in (the API server). It loads the
plugins while it builds its CLI parser (vllm/entrypoints/cli/main.py -> make_arg_parser ->
AsyncEngineArgs.add_cli_args, vllm/engine/arg_utils.py), before it parses the arguments, binds the port or
starts the engine core process.

`pre_gpu`: the API server parks right there, before any process of the engine initializes CUDA; the release
removes FASTRESTART_STANDBY_FD and FASTRESTART_STANDBY_LEVEL from its environment, so none of the processes
it starts afterwards parks: their gate passes at once.

`warmed` (with the KV cache in an arena, FASTRESTART_KV_ARENA, and the worker class of worker.py): the
engine-core process parks, after `EngineCore._initialize_kv_caches` (vllm/v1/engine/core.py: profile, KV
cache configs, allocation over the arena's placeholder, graph capture), and once released has its workers
lease the arena (`collective_rpc("fastrestart_kv_swap_in")`) before the engine core goes on to build its
scheduler and serve. The descriptor has to get there: vLLM starts the engine core with multiprocessing,
whose `spawn` start closes every descriptor it was not told about. So the API server keeps the descriptor
and hands it over once, through a Unix socket in a private directory (FASTRESTART_STANDBY_RELAY, inherited
through the environment, which spawn passes on) with SCM_RIGHTS, to the process that parks; it closes its
own copy then, so that fastrestartd sees the gate's end of file when the parked process goes.
"""

import os
import socket
import sys
import tempfile
import threading
import time

__all__ = ["gate", "pending", "LEVELS", "StandbyError", "RELAY_ENV"]

LEVELS = ("pre_gpu", "warmed")
FD_ENV = "FASTRESTART_STANDBY_FD"
LEVEL_ENV = "FASTRESTART_STANDBY_LEVEL"
RELAY_ENV = "FASTRESTART_STANDBY_RELAY"   # the relay socket's path, while the warmed gate is ahead
ENGINE_CORE = "vllm.v1.engine.core"
READY_TIMEOUT_ENV = "VLLM_ENGINE_READY_TIMEOUT_S"
READY_TIMEOUT_S = 30 * 86400


class StandbyError(RuntimeError):
    """fastrestartd asked for a standby this plugin cannot be (the engine must not start serving instead)."""


def _say(msg):
    # Straight to fd 2, like the result line (result_line.py): vLLM's logging may not reach it.
    os.write(2, f"fastrestart-standby: {msg} (pid {os.getpid()})\n".encode())


def pending():
    """True in every process of a warmed standby that has not been released yet (the worker then reserves
    the KV arena without leasing it)."""
    return bool(os.environ.get(RELAY_ENV))


def _standby_module():
    try:
        import fastrestart.standby as standby
    except ImportError as e:
        raise StandbyError(f"FASTRESTART_STANDBY_FD is set but the fastrestart binding is missing: {e}") from None
    return standby


def gate():
    """Parks this process when fastrestartd started it as a `pre_gpu` standby: returns True once released,
    False when it is no standby (every process vLLM starts after a release) or a `warmed` one, whose gate
    is the engine core's (arranged here). On `exit`, or when fastrestartd goes away, fastrestart.standby
    ends the process with status 0 and this never returns."""
    if os.environ.get(RELAY_ENV):
        # A process of a warmed standby started by the API server: the engine core (or a worker, where the
        # patch is never called). Its gate is the one after _initialize_kv_caches.
        _patch_engine_core()
        return False
    if not os.environ.get(FD_ENV):
        return False
    level = os.environ.get(LEVEL_ENV, "")
    if level not in LEVELS:
        # Passing the gate would let a standby load, bind and serve: refuse, so fastrestartd counts a failure.
        raise StandbyError(f"FASTRESTART_STANDBY_LEVEL={level!r}: the vLLM plugin has the gates "
                           f"{', '.join(LEVELS)} (docs/vllm.md)")
    if level == "warmed":
        _start_relay()
        _patch_engine_core()
        return False
    standby = _standby_module()
    _say(f"parked at {level}")
    t = time.monotonic()
    released = standby.gate(level)
    if released:
        _say(f"released at {level} after {time.monotonic() - t:.3f} s parked")
    return released


def _start_relay():
    """The API server of a warmed standby: checks it can be one, then hands its descriptor to the process
    that will park (once), from a thread, and removes FASTRESTART_STANDBY_FD from its environment so that no
    process started later mistakes the number for its own descriptor."""
    from . import kv_arena
    if not os.environ.get(kv_arena.ARENA_ENV):
        # Without the arena a warmed standby would hold a second KV cache, the engine's whole share, beside
        # the live engine's: refuse rather than park where it cannot fit.
        raise StandbyError(f"FASTRESTART_STANDBY_LEVEL=warmed needs the KV cache in an arena: "
                           f"{kv_arena.ARENA_ENV} is not set (python3 -m fastrestart_vllm.launch serve ... "
                           f"--kv-arena NAME; docs/vllm.md), or use [standby] level = \"pre_gpu\"")
    _standby_module()  # the binding must be there before anything starts
    try:
        fd = int(os.environ[FD_ENV])
        # No process this one starts gets a copy (an engine core exec'd later would hold the gate open).
        os.set_inheritable(fd, False)
    except (ValueError, OSError) as e:
        raise StandbyError(f"{FD_ENV}={os.environ[FD_ENV]!r}: not an open descriptor ({e})") from None
    folder = tempfile.mkdtemp(prefix="fastrestart-standby-")  # 0700: only this user may take the descriptor
    path = os.path.join(folder, "relay.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def serve():
        try:
            conn, _ = listener.accept()
            with conn:
                socket.send_fds(conn, [b"g"], [fd])
                conn.recv(1)  # the receiver's byte: it holds its copy now
        except OSError as e:
            _say(f"the warmed gate's relay failed: {e}")
        finally:
            os.close(fd)  # ours: fastrestartd must see the gate close when the parked process ends
            listener.close()
            try:
                os.unlink(path)
                os.rmdir(folder)
            except OSError:
                pass

    threading.Thread(target=serve, name="fastrestart-standby-relay", daemon=True).start()
    os.environ.pop(FD_ENV, None)
    os.environ[RELAY_ENV] = path
    # The API server gives up on an engine core that is not ready within VLLM_ENGINE_READY_TIMEOUT_S (600 s
    # by default), and a parked engine core is not ready until its release, which may be days away: unless
    # the operator chose a value, this process waits as long as fastrestartd keeps the standby (vLLM reads
    # its variables lazily from os.environ; fastrestartd's own timeouts end a standby that never parks).
    os.environ.setdefault(READY_TIMEOUT_ENV, str(READY_TIMEOUT_S))
    _say("warmed: the engine core will park after its KV cache and graphs (relay for the gate started)")


def _fetch_fd(path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        _, fds, _, _ = socket.recv_fds(s, 1, 1)
        if not fds:
            raise StandbyError(f"{RELAY_ENV}={path}: no descriptor came from the API server")
        s.sendall(b"k")
    os.set_inheritable(fds[0], False)  # SCM_RIGHTS descriptors come without close-on-exec
    return fds[0]


def _parallel(obj, name):
    """obj.vllm_config.parallel_config.<name> (vLLM's EngineCore keeps its VllmConfig), or None."""
    return getattr(getattr(getattr(obj, "vllm_config", None), "parallel_config", None), name, None)


def check_worker_cls(core):
    """Before anything is allocated: only fastrestart_vllm.worker.Worker puts the KV cache in the arena and
    leases it after the release; with another worker class a warmed standby would park holding a second
    KV cache and have nothing to swap in."""
    # The name, not the class: importing worker.py would import vLLM's GPU worker into the engine core.
    from .launch import WORKER_CLS as QUALNAME
    worker_cls = _parallel(core, "worker_cls")
    if worker_cls is not None and worker_cls != QUALNAME:
        raise StandbyError(f"a warmed vLLM standby needs --worker-cls {QUALNAME} (it has {worker_cls!r}): "
                           f"nothing else puts the KV cache in the arena")


def park_warmed(core):
    """The warmed gate, in the engine core after _initialize_kv_caches: takes the descriptor from the API
    server, parks, and once released has the workers lease the KV arena."""
    standby = _standby_module()
    fd = _fetch_fd(os.environ[RELAY_ENV])
    os.environ[FD_ENV] = str(fd)  # fastrestart.standby reads the process environment (putenv)
    _say("parked at warmed (KV cache over the arena's placeholder, graphs captured)")
    t = time.monotonic()
    # vLLM's engine core installs a Python SIGTERM handler (it raises SystemExit), which cannot run while
    # the gate blocks in C: SIGTERM's default action while parked, as the reference engine does.
    import signal
    try:
        old = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:  # not the main thread: leave the handlers alone
        old = None
    try:
        released = standby.gate("warmed")  # "exit" or fastrestartd gone: exits 0 inside
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)
    os.environ.pop(RELAY_ENV, None)
    if not released:  # fastrestart.standby returns False only for a process that is no standby
        raise StandbyError("the warmed gate passed without a release")
    parked = time.monotonic() - t
    t = time.monotonic()
    outcome = core.model_executor.collective_rpc("fastrestart_kv_swap_in")
    _say(f"released at warmed after {parked:.3f} s parked; KV cache: {', '.join(map(str, outcome))} "
         f"(swap_in {time.monotonic() - t:.3f} s)")


def _patch_engine_core():
    """Wraps EngineCore._initialize_kv_caches (vllm/v1/engine/core.py) so the warmed gate follows it: at
    once when the module is loaded (the engine core process loads it before EngineCore.__init__ loads the
    plugins), else as it gets imported (the API server, when the engine core runs in it)."""
    def patch(mod):
        cls = getattr(mod, "EngineCore", None)
        inner = getattr(cls, "_initialize_kv_caches", None)
        if inner is None or getattr(inner, "_fastrestart_warmed", False):
            return None

        def _initialize_kv_caches(self, *args, **kwargs):
            if pending():
                check_worker_cls(self)
            out = inner(self, *args, **kwargs)
            if pending():
                park_warmed(self)
            return out

        _initialize_kv_caches._fastrestart_warmed = True
        cls._initialize_kv_caches = _initialize_kv_caches
        return "EngineCore._initialize_kv_caches"

    if ENGINE_CORE in sys.modules:
        patch(sys.modules[ENGINE_CORE])
        return
    from .launch import _Patcher
    if not any(isinstance(f, _Patcher) and ENGINE_CORE in f.patches for f in sys.meta_path):
        sys.meta_path.insert(0, _Patcher({ENGINE_CORE: patch}))

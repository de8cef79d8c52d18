"""Tensor parallelism of the reference engine (docs/refengine.md, "Tensor parallel"): the parts that need no
torch. fastrestart_refengine.py imports it from its own directory.

- plan(): which device and memory budget each rank gets, from the flags and fastrestartd's environment
  (FASTRESTART_DEVICES, FASTRESTART_GPU_MEMORY_UTILIZATION), and the startup errors for what cannot work.
- check_shardable(): the config.json fields that must divide by the number of ranks.
- shard_dim(): the Megatron-style split of a checkpoint tensor (column parallel on dim 0, row parallel on
  dim 1, everything else replicated).
- Workers: rank 0 starts ranks 1..N-1 as child processes of the same script (spawn_workers), talks to them
  over their stdin (one JSON line per message), and exits at once when one of them dies (watch_workers);
  a worker dies with rank 0 (die_with_parent).

Every error is a SystemExit whose message names the flag, variable or config field at fault.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

# Set for ranks 1..N-1 only: the pid of rank 0, which started them. Its presence is the worker mode.
PARENT_ENV = "FASTRESTART_REFENGINE_TP_PARENT"
DEVICES_ENV = "FASTRESTART_DEVICES"
MEMORY_ENV = "FASTRESTART_GPU_MEMORY_UTILIZATION"
# What a worker must not inherit from rank 0: the standby gate and the snapshot exchange are rank 0's,
# and so is systemd's notify socket.
NOT_INHERITED = ("FASTRESTART_STANDBY_FD", "FASTRESTART_STANDBY_LEVEL", "FASTRESTART_SNAPSHOT_SOCKET",
                 "NOTIFY_SOCKET")

COLUMN_PARALLEL = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")  # split on dim 0 (output features)
ROW_PARALLEL = ("o_proj", "down_proj")  # split on dim 1 (input features); their outputs are all-reduced


def this_rank(environ=None):
    """0 for the process fastrestartd started; RANK for a worker that rank 0 started."""
    environ = os.environ if environ is None else environ
    if not environ.get(PARENT_ENV):
        return 0
    try:
        return int(environ["RANK"])
    except (KeyError, ValueError):
        raise SystemExit(f"refengine: {PARENT_ENV} is set but RANK is not a number: {environ.get('RANK')!r}")


def parse_devices(value):
    """FASTRESTART_DEVICES: comma-separated engine_loader device strings, one per GPU of fastrestartd's
    `gpus` list, in its order ("cuda:0,cuda:1")."""
    out = []
    for i, d in enumerate(value.split(",")):
        d = d.strip()
        if not re.fullmatch(r"cuda:[0-9]+", d):
            raise SystemExit(f"refengine: {DEVICES_ENV}={value!r}: entry {i} ({d!r}) is not cuda:N "
                             "(the reference engine runs on GPUs only)")
        out.append(d)
    return out


def parse_fractions(value, count):
    """FASTRESTART_GPU_MEMORY_UTILIZATION: comma-separated fractions in (0, 1], one per GPU, in the order
    of FASTRESTART_DEVICES; at least `count` of them."""
    out = []
    for i, v in enumerate(value.split(",")):
        try:
            f = float(v)
        except ValueError:
            f = None
        if f is None or not 0 < f <= 1:
            raise SystemExit(f"refengine: {MEMORY_ENV}={value!r}: entry {i} ({v.strip()!r}) is not a fraction "
                             "in (0, 1]")
        out.append(f)
    if len(out) < count:
        raise SystemExit(f"refengine: {MEMORY_ENV}={value!r} names {len(out)} GPUs, the ranks use {count}")
    return out


def plan(args, environ=None):
    """[{"device", "memory_utilization"}] for ranks 0..N-1 (N = --tensor-parallel-size).

    Rank r's device: entry r of FASTRESTART_DEVICES when fastrestartd set it, else cuda:r (--device for a
    single rank); with --share-device every rank takes entry 0 (or --device). Its memory budget: entry r
    of FASTRESTART_GPU_MEMORY_UTILIZATION (the same index as its device), else --gpu-memory-utilization."""
    environ = os.environ if environ is None else environ
    n = args.tensor_parallel_size
    env_devices = environ.get(DEVICES_ENV, "").strip()
    devices = parse_devices(env_devices) if env_devices else None
    if args.share_device or n == 1:
        index = [0] * n
    else:
        index = list(range(n))
    if devices is not None and max(index) >= len(devices):
        raise SystemExit(f"refengine: --tensor-parallel-size {n} needs {n} GPUs, {DEVICES_ENV} names "
                         f"{len(devices)} ({env_devices}); give fastrestartd {n} gpus, or --share-device "
                         "to put every rank on the first")
    if devices is None:
        devices = [args.device] if (args.share_device or n == 1) else [f"cuda:{r}" for r in range(n)]
    env_fractions = environ.get(MEMORY_ENV, "").strip()
    fractions = parse_fractions(env_fractions, max(index) + 1) if env_fractions else None
    return [{"device": devices[i], "memory_utilization": fractions[i] if fractions else args.gpu_memory_utilization}
            for i in index]


def check_shardable(model_dir, n):
    """Refuses (SystemExit naming config.json and the field) a model whose head counts or MLP width do not
    divide by n, or whose sharded projections have biases (a row-parallel bias would be added n times).
    Returns the config dict."""
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"refengine: {path}: {e}")
    if not isinstance(config, dict):
        raise SystemExit(f"refengine: {path}: not a JSON object")
    fields = {"num_attention_heads": config.get("num_attention_heads"),
              "num_key_value_heads": config.get("num_key_value_heads", config.get("num_attention_heads")),
              "intermediate_size": config.get("intermediate_size"), "hidden_size": config.get("hidden_size")}
    for name, v in fields.items():
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise SystemExit(f"refengine: {path}: {name}: --tensor-parallel-size {n} needs a positive integer, "
                             f"got {v!r}")
    for name in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
        if fields[name] % n:
            raise SystemExit(f"refengine: {path}: {name} = {fields[name]} does not divide by "
                             f"--tensor-parallel-size {n}")
    for name in ("attention_bias", "mlp_bias"):
        if config.get(name):
            raise SystemExit(f"refengine: {path}: {name} = true: the reference engine shards bias-free "
                             f"projections only (--tensor-parallel-size {n})")
    return config


def shard_dim(name):
    """The dimension a checkpoint tensor is split on across ranks, or None when every rank holds all of it
    (embeddings, norms, lm_head)."""
    parts = name.split(".")
    if len(parts) < 2 or parts[-1] != "weight":
        return None
    if parts[-2] in COLUMN_PARALLEL:
        return 0
    if parts[-2] in ROW_PARALLEL:
        return 1
    return None


def shard_range(name, size, dim, rank, n):
    """[lo, hi) of rank's part of `size` elements on `dim` of tensor `name`."""
    if size % n:
        raise SystemExit(f"refengine: {name}: dim {dim} has {size} elements, which do not divide by "
                         f"--tensor-parallel-size {n}")
    k = size // n
    return rank * k, (rank + 1) * k


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- rank 0's side ------------------------------------------------------------------------------------
class Workers:
    """Ranks 1..N-1 as child processes of rank 0, in its process group (fastrestartd signals the group).

    Messages go down each worker's stdin, one JSON line each: first {"op": "go", "master_port": P} (the
    workers wait for it before they touch the GPU), then one {"op": "generate", ...} per request. A pipe
    and not a collective: a worker waiting for the next request inside a collective would hit the process
    group's timeout on an idle server; a pipe has none, and its end of file tells a worker rank 0 is gone."""

    def __init__(self, script, argv, n, log):
        self.log = log
        self.stopping = False
        self.procs = {}
        env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
        env.update({PARENT_ENV: str(os.getpid()), "WORLD_SIZE": str(n), "MASTER_ADDR": "127.0.0.1"})
        # From the main thread: PR_SET_PDEATHSIG fires when the thread that forked a child ends, so a
        # worker started from a short-lived thread would be killed with it.
        assert threading.current_thread() is threading.main_thread()
        for r in range(1, n):
            p = subprocess.Popen([sys.executable, script, *argv], stdin=subprocess.PIPE,
                                 env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
            self.procs[r] = p
            log(f"tensor parallel: started rank {r} (pid {p.pid})")
        for r, p in self.procs.items():
            threading.Thread(target=self._watch, args=(r, p), name=f"watch-rank-{r}", daemon=True).start()

    def _watch(self, rank, p):
        """A worker that ends ends rank 0 at once, non-zero, naming it: the others would otherwise wait in
        their next collective until the process group's timeout."""
        status = p.wait()
        if self.stopping:
            return
        how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
        self.log(f"tensor parallel: rank {rank} (pid {p.pid}) {how}: exiting")
        self.kill()
        os._exit(1)

    def send(self, msg):
        line = (json.dumps(msg) + "\n").encode()
        for p in self.procs.values():
            p.stdin.write(line)
            p.stdin.flush()

    def go(self):
        """After rank 0's pre_gpu gate: a fresh MASTER_PORT (picked now, not at spawn: a standby may park
        for hours), which rank 0 takes too."""
        port = free_port()
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(len(self.procs) + 1), MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(port))
        self.send({"op": "go", "master_port": port})
        return port

    def pids(self):
        return {r: p.pid for r, p in self.procs.items()}

    def stop(self, timeout_s=10.0):
        """Rank 0 is stopping: its workers end first (their stdin closes, they exit; SIGKILL after
        timeout_s), so that rank 0's exit means the whole engine is gone."""
        self.stopping = True
        for p in self.procs.values():
            try:
                p.stdin.close()
            except OSError:
                pass
        deadline = time.monotonic() + timeout_s
        for r, p in self.procs.items():
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.log(f"tensor parallel: rank {r} (pid {p.pid}) did not stop in {timeout_s:.0f} s: SIGKILL")
                p.kill()
                p.wait()

    def kill(self):
        self.stopping = True
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    p.kill()
                except OSError:
                    pass


# --- a worker's side ----------------------------------------------------------------------------------
def die_with_parent(log):
    """A worker ends with rank 0: SIGKILL when its parent dies (PR_SET_PDEATHSIG), and a watch on its
    parent pid for the case prctl cannot cover (rank 0 gone before the prctl). SIGTERM and SIGINT are
    ignored: fastrestartd signals the whole process group on a stop, and the workers stop when rank 0
    has (rather than racing it, which would look like a worker that died)."""
    import ctypes
    parent = int(os.environ[PARENT_ENV])
    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) != 0:
        log(f"prctl(PR_SET_PDEATHSIG): errno {ctypes.get_errno()}; relying on the parent pid watch")
    if os.getppid() != parent:
        os._exit(1)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def read_message():
    """The next message from rank 0 (stdin), or None at end of file: rank 0 is gone."""
    line = sys.stdin.buffer.readline()
    if not line:
        return None
    return json.loads(line)

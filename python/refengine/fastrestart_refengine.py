#!/usr/bin/env python3
"""fastrestart-refengine: a PyTorch reference engine for the end-to-end restart benchmark (docs/refengine.md).

A transformers LlamaForCausalLM served over the same OpenAI-compatible subset as fastrestart-tinyengine
(/health, /v1/models, /v1/completions, /stats). Startup is the part of a vLLM start that fastrestart
changes, and nothing else:

    import torch + transformers -> config -> build the model on the meta device -> [gate pre_gpu]
    -> CUDA context -> weights: read from safetensors (disk) | attach from fastrestart-weightd (fastrestart)
    | torch.empty (dummy) -> bind them with load_state_dict(assign=True) -> first forward (the oracle)
    -> [--cuda-graph: capture the decode step] -> [gate warmed] -> /health 200

The default engine is shaped like vLLM's (refengine_runner.py; docs/refengine.md, "Batched serving"): after
the oracle and the warmed gate it profiles a forward of --max-num-batched-tokens tokens, sizes its KV cache
from what is left of --gpu-memory-utilization, allocates it once, captures a CUDA graph per batch size and
decodes up to --max-num-seqs concurrent requests together. --max-num-seqs 1 --enforce-eager is the
single-request engine described above.

The gates are the standby protocol's (docs/standby.md): they pass at once unless fastrestartd started this
process as a standby, which then parks at its level and binds its port only after the release.

With engine.listen = "supervisor" fastrestartd passes the listening socket (LISTEN_FDS, descriptor 3):
the engine serves on it instead of binding --host:--port, and accepts only once it is ready (a standby:
once released and ready), so connections made while it starts wait in the kernel's queue instead of
getting a 503 (docs/refengine.md, "The socket fastrestartd passes").

It leaves out vLLM's tokenizer, paged attention and chunked prefill (docs/refengine.md says why).

Tokens: the synthetic checkpoints ship no tokenizer, so a prompt string is its UTF-8 bytes as token ids
(valid ids of any Llama vocabulary), and an id's text is the byte for printable ASCII, else "<id>".
Decoding is greedy. Usage: fastrestart_refengine.py serve MODEL_DIR [--port P] [--load-format ...] (--help).

--tensor-parallel-size N: this process is rank 0 (it serves HTTP) and starts ranks 1..N-1 as child processes
of this script (refengine_tp.py); every rank loads or attaches its own shard (docs/refengine.md, "Tensor
parallel").
"""
import time

T0 = time.monotonic()  # before the heavy imports: the phases below are measured from here

import os  # noqa: E402

# A local directory never needs the Hugging Face Hub; without this, transformers may spend seconds
# trying to reach it from a machine that has no network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import copy  # noqa: E402
import glob  # noqa: E402
import ctypes  # noqa: E402
import gc  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402

import refengine_batch as rb  # noqa: E402 -- next to this script: sys.path[0]
import refengine_prefix as rp  # noqa: E402
import refengine_stream as rs  # noqa: E402
import refengine_tp as tp  # noqa: E402

VERSION = "0.1.0"
ENGINE = f"fastrestart-refengine {VERSION}"
ORACLE_PROMPT = "The capital of France is"


RANK = tp.this_rank()


def log(msg):
    who = f"refengine[{os.getpid()}]" + (f" rank {RANK}" if RANK else "")
    print(f"{who}: {msg}", flush=True)


def since_exec_s():
    """Seconds from this process's exec to T0, from /proc (clock ticks since boot; None when unknown)."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - (time.monotonic() - T0) - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


class Engine:
    """The model and what its startup did. Generation is serialized by a lock (one CUDA stream)."""

    def __init__(self, args):
        self.args = args
        # Tensor parallel: this process's rank, and every rank's device and memory budget (refengine_tp.plan)
        self.rank, self.tp = RANK, args.tensor_parallel_size
        self.ranks = tp.plan(args)
        self.device_name = self.ranks[self.rank]["device"]
        if self.tp > 1:
            tp.check_shardable(args.model, self.tp)
            if os.environ.get("FASTRESTART_SNAPSHOT_SOCKET"):
                raise SystemExit("refengine: FASTRESTART_SNAPSHOT_SOCKET is set: snapshots are for "
                                 f"--tensor-parallel-size 1 only (this engine has {self.tp} ranks)")
        self.workers = None  # rank 0 of N > 1: tp.Workers
        self.dist = None  # torch.distributed once the process group is up (N > 1)
        self.tp_info = None  # every rank's load, gathered on rank 0 (N > 1)
        self.state = "loading"
        self.phases = {}  # name -> seconds, in order
        self.load = {"format": args.load_format}
        self.lock = threading.Lock()
        self.attached = None
        self.snapshot_agent = None
        self.model = None
        self.ready_s = None
        self.oracle = None
        self.requests = {"completions": 0, "errors": 0}
        self.graph = None  # the captured decode step (--cuda-graph)
        self.graph_info = {"enabled": bool(args.cuda_graph)}
        self.runner = None  # the batched engine (refengine_runner.Runner), unless single-request
        self.batch_info = {"enabled": args.batched}
        self.mem_init = None  # device memory right after the CUDA context: the profile's baseline
        self.arena = None  # fastrestart.Arena holding the KV cache (--kv-arena)
        # fastrestart.standby when fastrestartd started this process as a standby (docs/standby.md); the
        # gates are rank 0's: the workers inherit no standby socket.
        self.standby = standby_module() if self.rank == 0 else None
        self.standby_info = {}
        self.on_release = None  # called after a release: opens the port

    def phase(self, name, fn):
        t = time.monotonic()
        out = fn()
        self.phases[name] = round(time.monotonic() - t, 6)
        return out

    # --- startup -------------------------------------------------------------------------------------
    def start(self):
        a = self.args
        self.phases["interpreter_s"] = since_exec_s()
        if self.tp > 1 and self.rank == 0:
            # First, so that the workers import torch while this process does; they wait for the "go"
            # below before they touch the GPU, so a pre_gpu standby parks GPU-free with all its ranks.
            self.workers = self.phase("spawn_s", lambda: tp.Workers(os.path.abspath(__file__), a.argv, self.tp, log))
        torch = self.phase("import_s", self._imports)
        self.device = torch.device(self.device_name)
        self.files = sorted(glob.glob(os.path.join(a.model, "*.safetensors")))
        if not self.files:
            raise SystemExit(f"refengine: {a.model}: no *.safetensors files")
        self.hf_config = self.phase("config_s", self._config)
        self.model = self.phase("build_meta_s", self._build_meta)
        # Everything above is GPU-free: a pre_gpu standby waits here with no CUDA context.
        self.gate("pre_gpu")
        if self.tp > 1:
            self.phase("go_s", self._go)
        self.phase("cuda_init_s", self._cuda_init)
        if self.tp > 1:
            self.phase("dist_init_s", self._init_dist)
        state = self.phase("load_s", self._load_weights)
        self.phase("bind_s", lambda: self._bind(state))
        del state
        self.oracle = self.phase("first_token_s", self._oracle)
        self._gather_ranks()
        if a.batched:
            # vLLM's KV cache fills the engine's share and its graphs are captured over it: a second copy
            # of either does not fit beside a live engine, so a warmed standby parks before them and does
            # them after its release (docs/refengine.md, "As a standby"). With --kv-arena it need not: it
            # profiles, captures its graphs over the arena's placeholder and parks after them
            # (_start_batched), unless the daemon's arena does not fit it.
            over_arena = bool(a.kv_arena) and self.standby is not None and \
                os.environ.get("FASTRESTART_STANDBY_LEVEL") == "warmed"
            if not over_arena:
                self.gate("warmed")
            self._start_batched(over_arena)
        elif a.cuda_graph:
            # Before the warmed gate: the graph reads the weights and its own static KV cache, both
            # allocated by now; nothing it depends on is allocated after the gate (docs/refengine.md).
            self.phase("graph_capture_s", self._capture_graph)
        if not a.batched:
            self.gate("warmed")
        self._start_snapshot_agent()
        self.ready_s = round(time.monotonic() - T0, 6)
        if self.standby_info.get("released_at") is not None:
            self.standby_info["release_to_ready_s"] = round(time.monotonic() - self.standby_info["released_at"], 6)
        self.state = "ready"
        p = self.phases
        log(f"load path={self.load['path']} weight_bytes={self.load['weight_bytes']} "
            + " ".join(f"{k}={v:.4f}s" for k, v in p.items() if v is not None)
            + (f" reason=\"{self.load['reason']}\"" if self.load.get("reason") else ""))
        log(f"ready in {self.ready_s:.3f} s (path={self.load['path']}) logits_sha256={self.oracle['logits_sha256'][:16]}"
            + (f" release_to_ready={self.standby_info['release_to_ready_s']:.3f}s"
               if "release_to_ready_s" in self.standby_info else "")
            + "".join(f" {k}={self.standby_info[k]:.3f}s" for k in ("kv_arena_wait_s", "kv_arena_swap_in_s")
                      if k in self.standby_info))

    # --- the standby gates (docs/standby.md, "The gate protocol") --------------------------------------
    def gate(self, level):
        """Parks here when this process is a standby for `level`; returns once released (then opens the
        port, which a standby must not bind before). fastrestart.standby.gate exits the process on "exit"
        or when fastrestartd goes away."""
        if self.standby is None:
            return False
        parks = os.environ.get("FASTRESTART_STANDBY_LEVEL") == level
        if parks:
            self.standby_info.update(level=level, parked_after_s=round(time.monotonic() - T0, 6))
            log(f"standby: parked at {level} after {self.standby_info['parked_after_s']:.3f} s (pid {os.getpid()})")
        # While parked, SIGTERM must end the process wherever the gate blocks (our handler would wait for
        # a server that is not running yet).
        old = signal.signal(signal.SIGTERM, signal.SIG_DFL)
        t = time.monotonic()
        try:
            released = self.standby.gate(level)
        finally:
            signal.signal(signal.SIGTERM, old)
        if released:
            now = time.monotonic()
            self.standby_info.update(level=level, parked_s=round(now - t, 6), released_at=now)
            log(f"standby: released at {level} after {now - t:.3f} s parked")
            if self.on_release is not None:
                self.on_release()
        return released

    # --- tensor parallel: the workers, the process group (docs/refengine.md, "Tensor parallel") ----------
    def _go(self):
        """Rank 0 lets its workers on to the GPU (after its own pre_gpu gate); a worker waits for that."""
        if self.rank == 0:
            self.workers.go()
            return
        log("waiting for rank 0's go before touching the GPU")
        msg = tp.read_message()
        if msg is None:  # rank 0 ended before it let us go
            os._exit(0)
        if msg.get("op") != "go":
            raise SystemExit(f"refengine: rank {self.rank}: expected go from rank 0, got {msg!r}")
        os.environ["MASTER_PORT"] = str(msg["master_port"])

    def _cuda_init(self):
        torch = self.torch
        count = torch.cuda.device_count()
        if self.device.index is not None and self.device.index >= count:
            raise SystemExit(f"refengine: rank {self.rank}: {self.device} does not exist: torch sees {count} "
                             "CUDA devices")
        torch.cuda.set_device(self.device)
        torch.empty(1, device=self.device)
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info(self.device)
        self.mem_init = {"free": free, "total": total, "torch_reserved": torch.cuda.memory_reserved(self.device)}

    def _init_dist(self):
        import torch.distributed as dist
        backend = self.args.dist_backend
        extra = {"device_id": self.device} if backend == "nccl" else {}
        dist.init_process_group(backend=backend, init_method="env://", rank=self.rank, world_size=self.tp, **extra)
        self.dist = dist

    def _all_gather(self, obj):
        """Every rank's obj, in rank order (a collective: every rank calls it at the same point)."""
        out = [None] * self.tp
        self.dist.all_gather_object(out, obj)
        return out

    def _gather_ranks(self):
        """/stats tensor_parallel.ranks: each rank's device, load path and bytes (and its oracle, which must
        be that of rank 0: the logits are replicated)."""
        mine = {"rank": self.rank, "pid": os.getpid(), "device": str(self.device),
                "path": self.load.get("path"), "memory_utilization": self.ranks[self.rank]["memory_utilization"],
                "weight_bytes": self.load.get("weight_bytes"), "logits_sha256": self.oracle["logits_sha256"]}
        for k in ("reason", "fingerprint"):
            if self.load.get(k):
                mine[k] = self.load[k]
        self.tp_info = self._all_gather(mine) if self.tp > 1 else [mine]
        if self.rank == 0 and self.tp > 1:
            shas = {r["logits_sha256"] for r in self.tp_info}
            log(f"tensor parallel: {self.tp} ranks: " + "; ".join(
                f"rank {r['rank']} pid {r['pid']} {r['device']} {r['path']} {r['weight_bytes']} bytes"
                for r in self.tp_info) + ("" if len(shas) == 1 else " (the ranks' oracle logits DIFFER)"))

    def _imports(self):
        import torch
        import transformers
        self.torch, self.transformers = torch, transformers
        torch.set_grad_enabled(False)
        return torch

    def _config(self):
        try:
            config = self.transformers.AutoConfig.from_pretrained(self.args.model)
        except (OSError, ValueError) as e:
            raise SystemExit(f"refengine: {os.path.join(self.args.model, 'config.json')}: {e}")
        self.model_config = config
        if self.tp > 1:
            # The rank's model: 1/N of the heads and of the MLP width, the head width of the full model
            # (LlamaAttention reshapes to (-1, head_dim), so q/k/v/o shrink with the head counts only).
            self.model_config = copy.deepcopy(config)
            self.model_config.head_dim = getattr(config, "head_dim", None) or (
                config.hidden_size // config.num_attention_heads)
            self.model_config.num_attention_heads = config.num_attention_heads // self.tp
            self.model_config.num_key_value_heads = (
                getattr(config, "num_key_value_heads", None) or config.num_attention_heads) // self.tp
            self.model_config.intermediate_size = config.intermediate_size // self.tp
        return config

    def _build_meta(self):
        torch = self.torch
        dtype = getattr(self.hf_config, "torch_dtype", None) or getattr(self.hf_config, "dtype", None)
        self.dtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype or "bfloat16"))
        with torch.device("meta"):  # no memory, no initialisation: shapes only
            model = self.transformers.AutoModelForCausalLM.from_config(self.model_config)
        if self.tp > 1:
            self._check_rank_shapes(model)
        return model.to(self.dtype).eval()

    def _check_rank_shapes(self, model):
        """The rank's attention must be 1/N of the heads at the full model's head width: a transformers
        whose LlamaAttention derives head_dim from hidden_size / heads (before 4.48) would build other shapes."""
        c = self.model_config
        want = {"q_proj": (c.num_attention_heads * c.head_dim, c.hidden_size),
                "o_proj": (c.hidden_size, c.num_attention_heads * c.head_dim)}
        for name, mod in model.named_modules():
            leaf = name.rpartition(".")[2]
            if leaf in want and tuple(mod.weight.shape) != want[leaf]:
                raise SystemExit(f"refengine: --tensor-parallel-size {self.tp}: {name} of transformers "
                                 f"{self.transformers.__version__} has shape {tuple(mod.weight.shape)}, a rank "
                                 f"needs {want[leaf]} (this transformers does not take head_dim from the config)")

    def key_config(self):
        """The cache key's config fields; fastrestartd's [weights] key must name the same (docs/refengine.md)."""
        st = {self.torch.bfloat16: "BF16", self.torch.float16: "F16", self.torch.float32: "F32"}
        return {"arch": type(self.model).__name__, "dtype": st.get(self.dtype, str(self.dtype)),
                "engine": ENGINE, "tp_size": str(self.tp), "tp_rank": str(self.rank)}

    def _from_disk(self, paths=None):
        """The rank's tensors from the checkpoint, on its device: whole for one rank; for N ranks the
        column-parallel projections' rows and the row-parallel ones' columns of this rank only (read as
        slices: the other ranks' parts are not read), everything else whole (docs/refengine.md)."""
        from safetensors import safe_open
        state = {}
        paths = paths or self.files  # /proc/self/fd/N of an OpenCheckpoint: the files that were identified
        total = sum(os.path.getsize(f) for f in paths)
        done = 0
        for f in paths:
            with safe_open(f, framework="pt", device=str(self.device)) as sf:
                for name in sf.keys():
                    dim = tp.shard_dim(name) if self.tp > 1 else None
                    if dim is None:
                        state[name] = sf.get_tensor(name)
                        continue
                    part = sf.get_slice(name)
                    lo, hi = tp.shard_range(name, part.get_shape()[dim], dim, self.rank, self.tp)
                    t = part[lo:hi] if dim == 0 else part[:, lo:hi]
                    state[name] = t.to(self.device).contiguous()  # a contiguous copy: publish needs one
            done += os.path.getsize(f)
            if self.rank == 0:
                # fastrestartd shows this in status and STATUS= (docs/supervisor.md, "Engine progress")
                print(f"fastrestart-progress: phase=disk_read done={done} total={total} unit=bytes", flush=True)
        return state

    def _load_weights(self):
        a, torch = self.args, self.torch
        if a.load_format == "dummy":
            # The floor: weights merely allocated where they will live, nothing read.
            state = {n: torch.empty(p.shape, dtype=p.dtype, device=self.device)
                     for n, p in self.model.state_dict().items()}
            self.load.update(path="dummy", disk_bytes_read=0)
        elif a.load_format == "disk":
            state = self._from_disk()
            self.load.update(path="disk")
        else:
            state = self._attach_or_load()
        self.load["weight_bytes"] = sum(t.numel() * t.element_size() for t in state.values())
        return state

    def _attach_or_load(self):
        import fastrestart
        a, torch = self.args, self.torch
        opts = dict(mode=a.fastrestart_mode, fallback=a.fastrestart_fallback == "on",
                    connect_timeout_s=a.fastrestart_connect_timeout, state_timeout_s=a.fastrestart_state_timeout,
                    verify=a.fastrestart_verify, socket_dir=a.fastrestart_socket_dir, device=str(self.device))
        # Each file opened once and identified through its descriptor; a miss reads through the same
        # descriptors, so what is published is what was read even if a symlink is retargeted meanwhile.
        with fastrestart.open_checkpoint(self.files) as ckpt:
            return self._attach_or_read(fastrestart, ckpt, opts)

    def _attach_or_read(self, fastrestart, ckpt, opts):
        a, torch = self.args, self.torch
        r = fastrestart.attach(ckpt.key(self.key_config()), **opts)
        self.load["attach_timings"] = r.timings
        missed = self._agree(r)
        if r.hit and missed is not None:
            # Another rank missed: every rank loads from disk, so that no engine runs on attached and
            # disk-loaded shards at once. Ours stays held by the daemon: nothing to publish.
            reason = f"rank {missed[0]} missed: {missed[1]}"
            log(f"tensor parallel: {reason}: dropping this rank's attached shard, loading it from disk")
            r = None  # the last reference to the mapping: the engine no longer maps the daemon's pool
            self.load.update(path="fallback", reason=reason, dropped_attach=True)
            return self._from_disk(ckpt.paths)
        if r.hit:
            # No copy: each torch tensor is a view of the daemon's pool (read-only in zero_copy: this engine
            # never writes a weight).
            state = {n: torch.from_dlpack(t) for n, t in r.tensors.items()}
            self.load.update(path="attach", mode=r.mode, digest=r.digest, fingerprint=r.fingerprint)
            self.attached = r  # the snapshot exchange releases and re-maps its pool
            return state
        # One rank: the miss's own reason, as always. N ranks: the first rank that missed, on every rank.
        reason = r.reason if self.tp == 1 else f"rank {missed[0]} missed: {missed[1]}"
        self.load.update(path="fallback", reason=reason, differs=list(r.differs))
        if self.tp > 1:
            self.load["attach_reason"] = r.reason  # this rank's own miss
        state = self._from_disk(ckpt.paths)
        if a.fastrestart_publish == "on":
            t = time.monotonic()
            try:
                # r.key: the identities the attach took before _from_disk read a byte; the daemon
                # refuses the publish if a file changed since.
                info = fastrestart.publish(r.key, state, socket_dir=a.fastrestart_socket_dir,
                                           device=str(self.device))
                self.load.update(published=True, digest=info["digest"], fingerprint=info["fingerprint"])
            except (RuntimeError, ValueError) as e:  # serve anyway; the next start misses again
                self.load.update(published=False, publish_error=str(e))
                log(f"publish failed: {e}")
            self.phases["publish_s"] = round(time.monotonic() - t, 6)
            if self.load.get("published"):
                state = self._adopt(fastrestart, ckpt, opts, state)
        return state

    def _adopt(self, fastrestart, ckpt, opts, state):
        """zero_copy after a publish: the entry just published, attached, replaces the disk-loaded tensors,
        which are freed, so the first life does not hold two copies of the weights (docs/refengine.md,
        "Loading"). Any failure keeps the own copy and says why (load.adopt_error)."""
        a, torch = self.args, self.torch
        if a.fastrestart_mode != "zero_copy":
            return state  # copy mode keeps an own copy by definition
        if self.tp > 1:
            # Every rank would have to adopt, or none: a mixed set is what _agree exists to prevent.
            self.load["adopt_error"] = "not with tensor parallelism: every rank keeps its own copy"
            return state
        t = time.monotonic()
        try:
            r = fastrestart.attach(ckpt.key(self.key_config()), **opts)
        except (RuntimeError, ValueError, OSError) as e:
            r, why = None, f"the attach after the publish failed: {e}"
        else:
            why = None if r.hit else f"the attach after the publish missed: {r.reason}"
        if why is None and r.fingerprint != self.load.get("fingerprint"):
            why = f"the daemon's entry {r.fingerprint} is not the one published ({self.load.get('fingerprint')})"
        if why is None:
            adopted = {n: torch.from_dlpack(x) for n, x in r.tensors.items()}
            if set(adopted) != set(state) or any(adopted[n].shape != state[n].shape or
                                                 adopted[n].dtype != state[n].dtype for n in state):
                why = "the daemon's entry does not have this engine's tensors"
        if why is not None:
            self.load["adopt_error"] = why
            log(f"serving this engine's own copy of the weights, not the daemon's: {why}")
            return state
        state.clear()  # the last references to the disk-loaded tensors
        torch.cuda.empty_cache()  # give their memory back to the driver: one copy on the GPU, as nvidia-smi shows
        self.attached = r
        self.load.update(adopted=True, mode=r.mode, fingerprint=r.fingerprint)
        self.phases["adopt_s"] = round(time.monotonic() - t, 6)
        log(f"adopted the daemon's copy ({r.fingerprint}); this engine's own copy is freed")
        return adopted

    def _agree(self, r):
        """The consistency rule: after every rank tried its attach, all ranks learn who missed. Returns
        (rank, reason) of the first rank that missed, or None when all hit. One rank: its own result."""
        if self.tp == 1:
            return None if r.hit else (0, r.reason)
        everyone = self._all_gather({"rank": self.rank, "hit": bool(r.hit), "reason": r.reason})
        missed = [(x["rank"], x["reason"]) for x in everyone if not x["hit"]]
        if self.rank == 0:
            log("tensor parallel: every rank attached its shard" if not missed else
                "tensor parallel: " + "; ".join(f"rank {m} missed: {why}" for m, why in missed)
                + ": every rank loads its shard from disk")
        return missed[0] if missed else None

    # --- the batched engine (docs/refengine.md, "Batched serving") --------------------------------------
    def _start_batched(self, over_arena=False):
        """over_arena: a warmed standby with --kv-arena, which parks at the warmed gate after its graphs."""
        a, torch = self.args, self.torch
        import refengine_runner
        total = self.mem_init["total"]
        seqs, tokens = rb.default_max_num_seqs(total, torch.cuda.get_device_name(self.device))
        seqs = a.max_num_seqs or seqs
        tokens = a.max_num_batched_tokens or tokens
        max_len = a.max_model_len or getattr(self.hf_config, "max_position_embeddings", 4096)
        if a.enforce_eager:
            sizes = []
        elif a.cuda_graph_sizes is not None:
            sizes = rb.parse_capture_sizes(a.cuda_graph_sizes, tokens)
        else:
            sizes = rb.default_capture_sizes(seqs, tokens)
        # A graph of b rows runs slots 0..b-1: sizes above --max-num-seqs (vLLM's rule goes to twice it) get
        # slots of their own, always idle, so the KV cache has max(seqs, largest size) slots.
        slots = max([seqs] + sizes)
        self.batch_info.update(max_num_seqs=seqs, max_num_batched_tokens=tokens, max_model_len=max_len,
                               enforce_eager=bool(a.enforce_eager), compile=bool(a.compile))
        r = self.runner = refengine_runner.Runner(self)
        # fastrestartd in zero_copy gives a share without the daemon's pool (ARCHITECTURE.md, "Memory
        # accounting"): the attached weights are in that pool, so they are not counted a second time.
        excludes = os.environ.get("FASTRESTART_WEIGHTS_MODE") == "zero_copy" and self.attached is not None
        budget, terms = self.phase("profile_s", lambda: r.profile(seqs, tokens, excludes))
        self.batch_info["memory"] = terms
        least = len(ORACLE_PROMPT.encode()) + 1  # a slot must hold the oracle prompt and a token
        try:
            per, positions = r.kv_geometry(budget, slots, max_len, least)
        except ValueError as e:
            raise SystemExit(f"refengine: {e}")
        if a.kv_arena:
            kv = self._kv_in_arena(r, slots, per, positions, max_len, least, over_arena)
            over_arena = self.arena is not None and not self.arena.leased
        else:
            kv = self.phase("kv_alloc_s", lambda: r.place_kv(slots, positions))
        self.batch_info["kv_cache"] = kv
        # fastrestartd shows the last such line as the status text while the engine starts
        print(f"fastrestart-progress: phase=kv_cache done={kv['bytes']} total={kv['bytes']} unit=bytes "
              f"seqs={kv['slots']} positions={kv['positions']}", flush=True)
        gib = {k: v / 2**30 for k, v in terms.items() if k.endswith("_bytes")}
        log(f"kv cache: {kv['bytes'] / 2**30:.2f} GiB = {kv['slots']} sequences x {kv['positions']} positions "
            f"({kv['bytes_per_position']} bytes each; budget {budget / 2**30:.2f} GiB = requested "
            f"{gib['requested_bytes']:.2f} - non-KV {gib['non_kv_bytes']:.2f} GiB: torch "
            f"{gib['torch_before_profile_bytes']:.2f} + profile peak {gib['torch_peak_increase_bytes']:.2f} + non-torch "
            f"{gib['non_torch_increase_bytes']:.2f} + attached {gib['attached_counted_bytes']:.2f})")
        if a.compile:
            def compile_():
                r.compile()
                r.warm_up(sizes or [1])
            self.phase("compile_s", compile_)
        if sizes:
            g = self.phase("graph_capture_s", lambda: r.capture(sizes))
            self.graph_info.update(enabled=True, sizes=g["sizes"], count=g["count"], pool_bytes=g["pool_bytes"])
            log(f"cuda graphs: {g['count']} batch sizes captured ({g['sizes'][0]}..{g['sizes'][-1]}), pool "
                f"{g['pool_bytes'] / 2**20:.1f} MiB, in {self.phases['graph_capture_s']:.3f} s")
        ids = list(ORACLE_PROMPT.encode())
        # The check's reference (the transformers forward of the oracle prompt) reads only the weights, so it
        # is computed before a warmed standby parks: after its release only the batched prefill is left,
        # which must read the arena's KV range and so cannot run earlier (docs/refengine.md, "The check").
        reference = self.phase("check_reference_s", lambda: self._logits(ids))
        if over_arena:
            # The first prefill through the batched forward loads its kernels (CUDA loads a module at its
            # first launch): run once here over the placeholder, its result unused, so that neither the
            # check after the release nor the first requests pay for it (docs/refengine.md, "The KV cache in
            # an arena").
            self.phase("prefill_warm_up_s", lambda: r.check(ids, reference, 0))
            if a.enable_prefix_caching:  # what the index's identity needs is known now: not after the release
                self._prefix_ident = self._prefix_identity(r, slots)
            # Parked with the graphs captured over the placeholder; the released standby leases the arena
            # (waiting for the dead engine's exit) and maps it at the same address: the graphs stay valid.
            self.gate("warmed")
            why = self._arena_swap_in(r)
            if why:
                self._arena_fallback(r, slots, positions, why)
                if sizes:  # the graphs captured over the placeholder read the arena's range: again
                    g = self.phase("graph_capture_s", lambda: r.capture(sizes))
                    self.graph_info.update(pool_bytes=g["pool_bytes"], recaptured=True)
        # The prefix index, recovered from its arena after every write of the startup above (those went to
        # the scratch position only); the check's prefill below writes a slot emptied for it.
        prefix = None
        if a.enable_prefix_caching:
            prefix = self.phase("prefix_index_s", lambda: self._prefix_cache(r, slots))
        else:
            self.batch_info["prefix"] = {"enabled": False}
        check_slot = prefix.take_slot(range(slots)) if prefix is not None else 0
        chk = self.phase("batched_check_s", lambda: r.check(ids, reference, check_slot))
        self.batch_info["check"] = chk
        log(f"batched forward vs transformers on the oracle prompt: max |diff| {chk['max_abs_diff']:.4g} of logits "
            f"up to {chk['max_abs_logit']:.4g}; greedy token {chk['token']} vs {chk['reference_token']}")
        if not chk["ok"]:
            raise SystemExit("refengine: the batched forward's logits of the oracle prompt differ from the "
                             f"transformers forward's by {chk['max_abs_diff']:.4g} "
                             f"(logits up to {chk['max_abs_logit']:.4g})")
        r.start_loop(seqs, log, prefix)

    # --- prefix reuse across a kill (docs/refengine.md, "Prefix reuse across a kill") --------------------
    def _prefix_identity(self, r, slots):
        """What makes a cached block's K/V valid: the model (config and the files' identity), the dtype, the
        KV layout, the block size, and the KV arena's GPU and name (the index is in host memory, the K/V on
        one GPU)."""
        torch = self.torch
        files = []
        for f in self.files:
            st = os.stat(f)
            files.append([os.path.basename(f), st.st_size, st.st_mtime_ns, st.st_ino])
        try:
            gpu = str(torch.cuda.get_device_properties(self.device).uuid)
        except (AttributeError, RuntimeError):
            gpu = str(self.device)
        return rp.identity_digest({
            "format": "refengine-prefix-1", "config": self.hf_config.to_dict(), "files": files,
            "dtype": str(self.dtype), "layout": [r.layers_n, slots, r.hkv, r.positions, r.head_dim, r._esize()],
            "block": rp.BLOCK, "gpu": gpu, "kv_arena": self.args.kv_arena or ""})

    def _prefix_cache(self, r, slots):
        """The prefix index: in the weight daemon's host arena `<--kv-arena>-index` when the KV cache is in a
        leased KV arena (so that it survives a kill), else in private memory (reuse within this process
        only). Recovered before anything is served; the fastrestart-kv: line says what came of it."""
        import numpy as np
        import refengine_runner
        a = self.args
        nbytes = rp.index_bytes(slots, r.positions)
        buf, where, kv_gen, kv_created = None, "private", 0, False
        t0 = time.monotonic()
        info = self.batch_info["prefix"] = {"enabled": True, "block": rp.BLOCK}
        if self.arena is not None and self.arena.leased and self.arena.lease is not None:
            name = f"{a.kv_arena}-index"
            sockets = a.fastrestart_socket_dir or os.environ.get("FASTRESTART_SOCKET_DIR")
            try:
                # No host daemon beside the GPU's (fastrestartd runs none with the cuda backend): at once, not
                # after the connect timeout.
                if sockets and not os.path.exists(os.path.join(sockets, "weightd-host.sock")):
                    raise OSError(f"no host daemon: {os.path.join(sockets, 'weightd-host.sock')} does not exist")
                import fastrestart
                self.prefix_arena = fastrestart.lease_arena(name, nbytes, wait_s=a.kv_arena_wait, device="host",
                                                            socket_dir=a.fastrestart_socket_dir,
                                                            connect_timeout_s=a.fastrestart_connect_timeout)
                buf = self.prefix_arena.view(0, (self.prefix_arena.bytes,), "uint8").numpy()
                where, kv_gen, kv_created = "arena", self.arena.lease["generation"], self.arena.lease["created"]
                info["arena"] = name
            except (ImportError, AttributeError, RuntimeError, OSError, ValueError) as e:
                info["arena_fallback"] = str(e)
                log(f"prefix index: not in the host arena '{name}' ({e}); in private memory: nothing survives a kill")
        if buf is None:
            buf = np.zeros(nbytes, dtype=np.uint8)
        device = refengine_runner.TorchPrefixDevice(r)
        # the identity: a warmed standby computed it before parking (the weights it loaded then)
        ident = getattr(self, "_prefix_ident", None) or self._prefix_identity(r, slots)
        t1 = time.monotonic()
        idx = self.prefix_index = rp.PrefixIndex(buf, ident, slots, r.positions, r.vocab)
        rec = idx.recover(kv_gen, kv_created, device.checksums_of, device.position_sums)
        t2 = time.monotonic()
        info.update(location=where, recovery=rec)
        self.prefix_report = rp.KvReport(idx, where, log)
        # where the phase's time goes (prefix_index_s: it is part of a warmed release's restart)
        info["seconds"] = {"lease_and_identity": round(t1 - t0, 6), "recover": round(t2 - t1, 6),
                           "report": round(time.monotonic() - t2, 6)}
        log(f"prefix index: {where}, {slots} slots x {rp.max_blocks(r.positions)} blocks of {rp.BLOCK}, header "
            f"{rec['header']}: {rec['recovered']} blocks and {rec['tails']} tails recovered, "
            f"{sum(rec['dropped'].values())} dropped " + (str(rec["dropped"]) + " " if rec["dropped"] else "")
            + "(s: " + " ".join(f"{k}={v:.4f}" for k, v in info["seconds"].items()) + ")")
        return rp.PrefixCache(idx, device, on_change=self.prefix_report.changed, log=log)

    # --- the KV cache in an arena of the weight daemon (docs/refengine.md, "The KV cache in an arena") -----
    def _arena_opts(self):
        a = self.args
        return dict(device=self.device_name, socket_dir=a.fastrestart_socket_dir,
                    connect_timeout_s=a.fastrestart_connect_timeout)

    def _kv_in_arena(self, r, slots, per, own_positions, max_len, least, standby):
        """The KV tensors as views into the arena --kv-arena names. A live start leases it at once; a warmed
        standby (`standby`) reserves it with the placeholder and leases it after its release. Its size: the
        daemon's arena when it is within refengine_batch.ARENA_TOLERANCE of this engine's own budget, else
        the engine's own (the lease then replaces the daemon's arena by one of that size, once its holder has
        exited; a standby parks first, as without an arena). Every failure is logged and falls back to KV
        tensors of the engine's own (the standby's after its release). Returns the KV dict."""
        a = self.args
        info = self.batch_info["kv_arena"] = {"name": a.kv_arena, "own_positions": own_positions}
        try:
            import fastrestart
            held = fastrestart.find_arena(a.kv_arena, **self._arena_opts())
        except (ImportError, AttributeError) as e:  # no binding, or one without arenas
            if standby:
                self.gate("warmed")
            return self._arena_fallback(r, slots, own_positions, f"the fastrestart binding has no KV arenas: {e}")
        except (RuntimeError, ValueError) as e:
            if standby:
                self.gate("warmed")
            return self._arena_fallback(r, slots, own_positions, f"asking the daemon for the arena: {e}")
        positions, why = rb.kv_arena_plan(own_positions, slots, per, max_len, least, held and held["bytes"])
        info.update(daemon_bytes=held and held["bytes"], source="daemon" if why is None else "own")
        if why is not None:
            info["own_size_reason"] = why
            log(f"kv arena '{a.kv_arena}': sized from this engine's budget ({own_positions} positions per slot): {why}")
            if standby:
                info["parked_before_kv"] = True
                self.gate("warmed")
                standby = False
        nbytes = held["bytes"] if why is None else per * slots * positions
        try:
            self.arena = self.phase("kv_arena_reserve_s", lambda: fastrestart.reserve_arena(
                a.kv_arena, nbytes, wait_s=a.kv_arena_wait, **self._arena_opts()))
            kv = self.phase("kv_alloc_s", lambda: r.place_kv(slots, positions, self.arena))
        except (RuntimeError, ValueError) as e:
            self.arena = None
            if standby:  # its own KV cache does not fit beside the live engine's: after the release
                self.gate("warmed")
            return self._arena_fallback(r, slots, own_positions, f"reserving {nbytes} bytes: {e}")
        info.update(bytes=self.arena.bytes, base=self.arena.base, placeholder_bytes=self.arena.placeholder_bytes)
        log(f"kv arena '{a.kv_arena}': {self.arena.bytes / rb.GIB:.2f} GiB reserved at 0x{self.arena.base:x} "
            f"(placeholder {self.arena.placeholder_bytes / 2**20:.1f} MiB), {positions} positions per slot "
            f"(own budget: {own_positions})")
        if not standby:
            why = self._arena_swap_in(r)
            if why:
                return self._arena_fallback(r, slots, own_positions, why)
        return kv

    def _arena_swap_in(self, r):
        """Leases the arena and maps it over the KV tensors' range; None, or why it failed."""
        info, t = self.batch_info["kv_arena"], time.monotonic()
        try:
            lease = self.arena.swap_in()
        except (RuntimeError, OSError) as e:  # OSError: TimeoutError, a lease that waited --kv-arena-wait
            self.phases["kv_arena_swap_in_s"] = round(time.monotonic() - t, 6)
            return f"leasing the arena: {e}"
        self.phases["kv_arena_swap_in_s"] = round(time.monotonic() - t, 6)
        info.update(lease=lease, placeholder_bytes=0)
        if self.standby_info.get("released_at") is not None:  # the release timeline (/stats standby)
            self.standby_info.update(kv_arena_wait_s=lease["waited_s"], kv_arena_swap_in_s=lease["seconds"])
        if self.args.kv_arena_zero:
            self.phase("kv_arena_zero_s", r.zero_kv)
        prev = lease["previous_holder_pid"]
        log(f"kv arena '{self.args.kv_arena}': leased ({'new, zero-filled' if lease['created'] else 'generation %d' % lease['generation']}"
            f"{', resized from %d bytes' % lease['previous_bytes'] if lease['resized'] else ''}); "
            + (f"waited {lease['waited_s']:.3f} s for pid {prev} to exit; " if prev is not None else "")
            + f"swap_in {lease['seconds']:.3f} s")
        # fastrestartd's record of the lease (docs/supervisor.md, "The engine's arena line")
        import fastrestart
        print(fastrestart.arena_line(self.arena), flush=True)
        return None

    def _arena_fallback(self, r, slots, positions, why):
        """KV tensors of the engine's own, sized from its own budget, instead of the arena."""
        log(f"kv arena '{self.args.kv_arena}': not used, allocating the KV cache: {why}")
        print_arena_fallback_line(why)
        self.batch_info["kv_arena"]["fallback"] = why
        r.drop_graphs()
        r.kv = None
        self.arena = None  # the range is unmapped once no tensor over it is left
        kv = self.phase("kv_alloc_s", lambda: r.place_kv(slots, positions))
        self.batch_info["kv_cache"] = kv
        return kv

    def check_length(self, ids, max_tokens):
        """None, or why the request does not fit a KV-cache slot (the batched engine only)."""
        if self.runner is None or len(ids) + max_tokens <= self.runner.max_len():
            return None
        return (f"prompt ({len(ids)} tokens) plus max_tokens ({max_tokens}) exceeds the {self.runner.max_len()} "
                "positions of a KV-cache slot")

    def _start_snapshot_agent(self):
        """The snapshot exchange (docs/snapshot.md): when fastrestartd gave us $FASTRESTART_SNAPSHOT_SOCKET, a
        prepare holds inference back (self.lock: the step loop takes it for every step), empties torch's
        caching allocator and releases the pool's mapping, keeping its address range, and unmaps the KV
        arena (--kv-arena) the same way: every tensor, and every graph captured over them, keeps its
        pointer. A resume re-maps the daemon's entry there, leases the arena again at its address (after the
        dumped process's exit: docs/snapshot.md, "Snapshots without the KV cache") and lets inference run."""
        if not os.environ.get("FASTRESTART_SNAPSHOT_SOCKET"):
            return
        import fastrestart
        torch = self.torch
        results = [self.attached] if self.attached is not None and self.attached.mode == "zero_copy" else []
        arenas = [self.arena] if self.arena is not None and self.arena.leased else []
        if arenas and getattr(self, "prefix_arena", None) is not None:
            arenas.append(self.prefix_arena)  # left out of the snapshot as well, leased again at the resume

        def quiesce():
            self.lock.acquire()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
                torch.cuda.empty_cache()
            # What the process frees but the C heap keeps (imports, the profile's host buffers) would be
            # dumped with it: give it back first, and say how much the artifact's host part is.
            before = host_rss_bytes()
            gc.collect()
            try:
                ctypes.CDLL("libc.so.6").malloc_trim(0)
            except (OSError, AttributeError):
                pass
            log(f"snapshot prepare: host RSS {before / 2**20:.0f} MiB, {host_rss_bytes() / 2**20:.0f} MiB after "
                "gc and malloc_trim")

        def resume():
            if arenas and arenas[0].lease is not None:
                lease = arenas[0].lease
                # A restored engine is another process holding a new lease: fastrestartd's record of it
                print(fastrestart.arena_line(arenas[0]), flush=True)
                if getattr(self, "prefix_index", None) is not None and len(arenas) > 1:
                    # Another holder may have used either arena meanwhile: trust nothing from before.
                    import refengine_runner
                    dev = refengine_runner.TorchPrefixDevice(self.runner)
                    rec = self.prefix_index.recover(lease["generation"], lease["created"], dev.checksums_of,
                                                   dev.position_sums)
                    self.batch_info["prefix"]["recovery"] = rec
                    self.prefix_report.rebuilt()
            self.lock.release()

        self.snapshot_agent = fastrestart.snapshot_agent(results, quiesce=quiesce, resume=resume, arenas=arenas)
        if self.snapshot_agent is not None:
            log(f"snapshot exchange on {self.snapshot_agent.socket_path} ({len(results)} pool(s) and "
                f"{len(arenas)} KV arena(s) to release)")

    def _bind(self, state):
        model = self.model
        missing = set(model.state_dict()) - set(state)
        if missing:
            raise SystemExit(f"refengine: the checkpoint lacks {len(missing)} tensors, e.g. {sorted(missing)[0]}")
        model.load_state_dict(state, strict=True, assign=True)
        # Non-persistent buffers (rotary inv_freq) are not in any checkpoint: rebuild those modules on the
        # device; anything else still on meta is a bug worth failing for.
        for name, mod in list(model.named_modules()):
            if any(b.is_meta for b in mod.buffers(recurse=False)):
                if "Rotary" not in type(mod).__name__:
                    raise SystemExit(f"refengine: buffer of {name} ({type(mod).__name__}) left on meta")
                parent, _, attr = name.rpartition(".")
                setattr(model.get_submodule(parent) if parent else model, attr,
                        type(mod)(config=self.model_config).to(self.device))
        left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
        if left:
            raise SystemExit(f"refengine: still on meta after binding: {left[:3]}")
        model.requires_grad_(False)  # inference only: no autograd graph, in any thread
        if self.tp > 1:
            self._all_reduce_row_parallel()

    def _all_reduce_row_parallel(self):
        """A row-parallel projection (o_proj, down_proj) gives each rank a partial sum of the full output:
        a forward hook all-reduces it, so every rank continues with the same hidden state (and the same
        replicated logits). gloo: summed in float32 on the CPU (not every gloo build reduces bf16)."""
        dist, gloo = self.dist, self.args.dist_backend == "gloo"

        def all_reduce(_module, _inputs, out):
            if gloo:
                total = out.float().cpu()
                dist.all_reduce(total)
                return total.to(device=out.device, dtype=out.dtype)
            dist.all_reduce(out)
            return out

        hooked = 0
        for name, mod in self.model.named_modules():
            if name.rpartition(".")[2] in tp.ROW_PARALLEL:
                mod.register_forward_hook(all_reduce)
                hooked += 1
        if not hooked:
            raise SystemExit(f"refengine: {type(self.model).__name__} has no {'/'.join(tp.ROW_PARALLEL)} "
                             "modules: the reference engine cannot shard it")

    def _oracle(self):
        ids = list(ORACLE_PROMPT.encode())
        logits = self._logits(ids)
        raw = logits.float().cpu().numpy().tobytes()
        tok = int(logits.argmax())
        return {"prompt": ORACLE_PROMPT, "token_id": tok, "logits_sha256": hashlib.sha256(raw).hexdigest()}

    # --- inference -----------------------------------------------------------------------------------
    def _logits(self, ids):
        torch = self.torch
        with self.lock, torch.inference_mode():
            x = torch.tensor([ids], device=self.device)
            out = self.model(input_ids=x, use_cache=False)
            last = out.logits[0, -1]
            torch.cuda.synchronize(self.device)
            return last

    def generate(self, ids, max_tokens, want_logprobs, replay=0):
        """replay: the last `replay` ids were generated for this request by an earlier engine
        (Fastrestart-Generated-Tokens): the batched engine feeds them by decode steps (refengine_batch.Request);
        the single-request engine prefills them with the prompt."""
        if self.runner is not None:  # decoded with the other requests in flight (refengine_runner)
            return self.runner.submit(rb.Request(ids, max_tokens, want_logprobs, replay))
        with self.lock:
            if self.workers is not None:
                # Every rank runs the same forwards, in the order of this lock (docs/refengine.md).
                self.workers.send({"op": "generate", "ids": ids, "max_tokens": max_tokens,
                                   "logprobs": bool(want_logprobs)})
            if self.graph is not None and len(ids) + max_tokens <= self.args.cuda_graph_max_len:
                return self._generate_graph(ids, max_tokens, want_logprobs)
            return self._generate_eager(ids, max_tokens, want_logprobs)

    def generate_stream(self, ids, max_tokens, want_logprobs, replay=0):
        """Yields (token, logprob): token by token as the batched engine decodes them; the single-request
        engine computes the whole answer first (as the tiny engine does) and yields it. replay: generate()."""
        if self.runner is not None:
            yield from self.runner.submit_stream(rb.Request(ids, max_tokens, want_logprobs, replay))
            return
        yield from zip(*self.generate(ids, max_tokens, want_logprobs))

    def _generate_eager(self, ids, max_tokens, want_logprobs):
        torch = self.torch
        toks, lps = [], []
        with torch.inference_mode():
            past, x = None, torch.tensor([ids], device=self.device)
            for _ in range(max_tokens):
                out = self.model(input_ids=x, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logp = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
                tok = int(logp.argmax())
                toks.append(tok)
                lps.append(float(logp[tok]) if want_logprobs else None)
                x = torch.tensor([[tok]], device=self.device)
        return toks, lps

    # --- the decode step as a CUDA graph (--cuda-graph) ----------------------------------------------
    # One token against a static KV cache of --cuda-graph-max-len positions: every input (the token, its
    # position, the attention mask over the cache) is a fixed tensor written in place before a replay, so
    # the graph replays the same kernels on the same addresses as the eager step (_decode_eager), and its
    # logits are bitwise those of the eager step (checked at startup: graph_check).
    def _capture_graph(self):
        torch, n = self.torch, self.args.cuda_graph_max_len
        from transformers import StaticCache
        try:
            cache = StaticCache(config=self.hf_config, max_cache_len=n)
        except TypeError:  # transformers before 4.56 sizes and places it up front
            cache = StaticCache(config=self.hf_config, max_batch_size=1, max_cache_len=n, device=self.device,
                                dtype=self.dtype)
        g = {"cache": cache, "ids": torch.zeros((1, 1), dtype=torch.long, device=self.device),
             "pos": torch.zeros((1,), dtype=torch.long, device=self.device),
             # a 4-D boolean mask (True: attend) is used as given: no mask is built inside the graph
             "mask": torch.zeros((1, 1, 1, n), dtype=torch.bool, device=self.device)}
        self.g = g
        with self.lock, torch.inference_mode():
            # Warm-up on a side stream (torch's rule before a capture); it also allocates a lazy cache.
            s = torch.cuda.Stream(self.device)
            s.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(s):
                self._reset_static(0)
                for _ in range(2):
                    self._step_eager()
            torch.cuda.current_stream(self.device).wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            self._reset_static(0)
            with torch.cuda.graph(graph):
                g["logits"] = self._step_eager()
            torch.cuda.synchronize(self.device)
            # The check: the oracle prompt fed token by token through the eager step, then through replays.
            prompt = list(ORACLE_PROMPT.encode())
            eager = self._feed(prompt, None).clone()
            replayed = self._feed(prompt, graph).clone()
        self.graph = graph
        equal = bool(torch.equal(eager, replayed))
        sha = hashlib.sha256(replayed.float().cpu().numpy().tobytes()).hexdigest()
        self.graph_info.update(max_len=n, graph_check="bitwise_equal" if equal else "DIFFERS",
                               decode_logits_sha256=sha, cache_bytes=sum(
                                   t.numel() * t.element_size() for t in self._cache_tensors(cache)))
        log(f"cuda graph: decode step captured (static KV cache of {n} positions, "
            f"{self.graph_info['cache_bytes'] / 2**20:.1f} MiB); replay vs eager on the oracle prompt: "
            f"{self.graph_info['graph_check']}")
        if not equal:
            raise SystemExit("refengine: --cuda-graph: the replayed decode step's logits differ from the eager step's")

    @staticmethod
    def _cache_tensors(cache):
        layers = getattr(cache, "layers", None)
        if layers is not None:
            return [t for layer in layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                    if t is not None]
        return list(getattr(cache, "key_cache", [])) + list(getattr(cache, "value_cache", []))

    def _reset_static(self, pos):
        """Position `pos` next; pos 0 also empties the cache (in place: the graph keeps its addresses)."""
        g = self.g
        if pos == 0:
            g["cache"].reset()
            g["mask"].zero_()
        g["pos"].fill_(pos)
        g["mask"][0, 0, 0, pos] = True

    def _step_eager(self):
        g = self.g
        out = self.model(input_ids=g["ids"], position_ids=g["pos"].view(1, 1), cache_position=g["pos"],
                         attention_mask=g["mask"], past_key_values=g["cache"], use_cache=True)
        return out.logits[0, -1]

    def _feed(self, toks, graph, start=0):
        """Feeds toks from position `start`, one decode step each (eager or replayed); the last logits."""
        g, logits = self.g, None
        for i, t in enumerate(toks):
            self._reset_static(start + i)
            g["ids"].fill_(t)
            if graph is None:
                logits = self._step_eager()
            else:
                graph.replay()
                logits = g["logits"]
        return logits

    def _generate_graph(self, ids, max_tokens, want_logprobs):
        torch = self.torch
        toks, lps = [], []
        with torch.inference_mode():
            logits = self._feed(ids, self.graph)
            for i in range(max_tokens):
                logp = torch.log_softmax(logits.float(), dim=-1)
                tok = int(logp.argmax())
                toks.append(tok)
                lps.append(float(logp[tok]) if want_logprobs else None)
                if i + 1 < max_tokens:
                    logits = self._feed([tok], self.graph, start=len(ids) + i)
        return toks, lps

    def stats(self):
        return {"engine": "fastrestart-refengine", "version": VERSION, "pid": os.getpid(), "state": self.state,
                "device": self.device_name, "model": {"name": self.args.served_model_name, "path": self.args.model},
                "gpu_memory_utilization": self.args.gpu_memory_utilization, "requests": self.requests,
                "load": self.load, "startup": {"phases": self.phases, "ready_s": self.ready_s},
                "oracle": self.oracle, "cuda_graph": self.graph_info,
                "batch": dict(self.batch_info, **({"serving": self.runner.stats} if self.runner else {}),
                              **({"prefix": dict(self.batch_info["prefix"], cached_blocks=self.prefix_index.cached_blocks(),
                                                 **self.prefix_index.stats)}
                                 if getattr(self, "prefix_index", None) is not None else {})),
                "tensor_parallel": {"size": self.tp, "ranks": self.tp_info or []},
                "standby": {k: v for k, v in self.standby_info.items() if k != "released_at"}}


def host_rss_bytes():
    """This process's resident host memory (VmRSS), 0 where /proc does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def print_arena_fallback_line(why):
    """fastrestartd's record of a fallback (docs/supervisor.md, "The engine's arena line"), written by the
    binding (engine_loader's one writer of the line). Without the binding there is no line: log says why."""
    try:
        import fastrestart
        line = fastrestart.arena_fallback_line(why)
    except (ImportError, AttributeError) as e:
        log(f"kv arena: no fastrestart-arena: line (the fastrestart binding cannot write it: {e})")
        return
    print(line, flush=True)


def standby_module():
    """fastrestart.standby when this process is a standby (FASTRESTART_STANDBY_FD set), else None: the
    binding is needed only then (the disk path runs without it)."""
    if not os.environ.get("FASTRESTART_STANDBY_FD"):
        return None
    try:
        import fastrestart.standby as standby
    except ImportError as e:
        raise SystemExit(f"refengine: FASTRESTART_STANDBY_FD is set but the fastrestart binding is missing: {e}")
    return standby if standby.is_standby() else None


def inherited_listen_sockets():
    """(serve, probe): the listening socket fastrestartd passed (engine.listen = "supervisor") and the private
    endpoint for its checks (readiness.endpoint = "private"), each None when not passed. Taken before any
    worker starts: fastrestart.inherited_sockets removes LISTEN_* from the environment they inherit."""
    if not os.environ.get("LISTEN_FDS"):
        return None, None
    try:
        import fastrestart.listen as listen
    except ImportError as e:
        raise SystemExit(f"refengine: LISTEN_FDS is set but the fastrestart binding is missing: {e}")
    try:
        return listen.inherited_sockets()
    except ValueError as e:
        raise SystemExit(f"refengine: the socket fastrestartd passed: {e}")


def http_server(engine, args, sock=None):
    """The HTTP server: on `sock` (the inherited listening socket) when given, else bound to --host:--port
    (listening at once)."""
    if sock is None:
        server = Server((args.host, args.port), make_handler(engine))
    else:
        server = Server(sock.getsockname()[:2], make_handler(engine), bind_and_activate=False)
        server.socket.close()
        server.socket, server.server_address = sock, sock.getsockname()
    server.daemon_threads = True
    return server


def token_text(t):
    return chr(t) if 32 <= t < 127 else f"<{t}>"


class Server(ThreadingHTTPServer):
    # Python's default listen backlog is 5: --max-num-seqs clients connecting at once would get resets.
    request_queue_size = 1024
    daemon_threads = True


def make_handler(engine):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # TCP_NODELAY on each connection: the head and the body go out in separate writes, and on a
        # kept-alive connection (fastrestart-front's pool, a client's) Nagle's algorithm would hold the
        # body until the client's delayed ACK of the head, about 40 ms (docs/refengine.md, "Endpoints").
        disable_nagle_algorithm = True

        def log_message(self, *a):  # quiet: one line per request would drown the supervisor's log
            pass

        def reply(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def error(self, code, msg, kind="invalid_request_error"):
            self.reply(code, {"error": {"message": msg, "type": kind, "param": None, "code": code}})

        def do_GET(self):
            if self.path == "/health":
                ok = engine.state == "ready"
                return self.reply(200 if ok else 503, {"status": "ok" if ok else engine.state})
            if self.path == "/stats":
                return self.reply(200, engine.stats())
            if self.path == "/v1/models":
                if engine.state != "ready":
                    return self.error(503, "the model is loading")
                return self.reply(200, {"object": "list", "data": [{
                    "id": engine.args.served_model_name, "object": "model", "owned_by": "fastrestart",
                    "root": engine.args.model, "fastrestart": {"load": engine.load}}]})
            self.error(404, f"no route {self.path}")

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n)
            if self.path != "/v1/completions":
                return self.error(404, f"no route {self.path}")
            if engine.state != "ready":
                return self.error(503, "the model is loading")
            try:
                req = json.loads(raw)
                if not isinstance(req, dict):
                    raise ValueError("the body must be a JSON object")
            except ValueError as e:
                engine.requests["errors"] += 1
                return self.error(400, f"bad JSON: {e}")
            model = req.get("model")
            if model is not None and model != engine.args.served_model_name:
                engine.requests["errors"] += 1
                return self.error(404, f"model {model!r} does not exist")
            prompt, max_tokens, logprobs = req.get("prompt"), req.get("max_tokens", 16), req.get("logprobs")
            if isinstance(prompt, str):
                ids = list(prompt.encode())
            elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                ids = prompt
            else:
                engine.requests["errors"] += 1
                return self.error(400, "prompt: a non-empty string or list of token ids")
            vocab = engine.hf_config.vocab_size
            if not ids or any(t < 0 or t >= vocab for t in ids):
                engine.requests["errors"] += 1
                return self.error(400, f"prompt: token ids must be in [0, {vocab})")
            if not isinstance(max_tokens, int) or not 1 <= max_tokens <= 4096:
                engine.requests["errors"] += 1
                return self.error(400, "max_tokens: an integer in [1, 4096]")
            too_long = engine.check_length(ids, max_tokens)
            if too_long:
                engine.requests["errors"] += 1
                return self.error(400, f"max_tokens: {too_long}")
            try:
                stream, include_usage, return_ids = rs.stream_fields(req)
                replay = rs.generated_tokens(self.headers.get(rs.GENERATED_TOKENS), prompt)
            except ValueError as e:
                engine.requests["errors"] += 1
                return self.error(400, str(e))
            if stream:
                return self.stream(rs.CompletionStream(
                    f"cmpl-{os.getpid()}-s{threading.get_ident()}-{time.monotonic_ns()}", int(time.time()),
                    engine.args.served_model_name, ids, max_tokens, token_text, return_token_ids=return_ids,
                    include_usage=include_usage, logprobs=logprobs is not None, replay=replay))
            toks, lps = engine.generate(ids, max_tokens, logprobs is not None, replay)
            engine.requests["completions"] += 1
            choice = {"index": 0, "text": "".join(token_text(t) for t in toks), "token_ids": toks,
                      "finish_reason": "length", "logprobs": None}
            if logprobs is not None:
                choice["logprobs"] = {"tokens": [token_text(t) for t in toks], "token_logprobs": lps}
            self.reply(200, {"id": f"cmpl-{os.getpid()}-{engine.requests['completions']}",
                             "object": "text_completion", "created": int(time.time()),
                             "model": engine.args.served_model_name, "choices": [choice],
                             "usage": {"prompt_tokens": len(ids), "completion_tokens": len(toks),
                                       "total_tokens": len(ids) + len(toks)}})

        def stream(self, events):
            """A streamed completion (refengine_stream): the head, then one chunked event per token as the
            engine decodes it. A client gone mid-stream ends the write; the request decodes on to its end."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                try:
                    for tok, lp in engine.generate_stream(events.prompt, events.max_tokens, events.logprobs,
                                                          events.replay):
                        self.wfile.write(rs.chunk(events.token(tok, lp)))
                        self.wfile.flush()
                    engine.requests["completions"] += 1
                    tail = events.end()
                except RuntimeError as e:
                    engine.requests["errors"] += 1
                    tail = events.error(str(e))
                self.wfile.write(rs.chunk(tail) + rs.chunk(b""))
                self.wfile.flush()
            except OSError:
                self.close_connection = True

    return Handler


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="fastrestart_refengine.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="load MODEL_DIR and serve it")
    s.add_argument("model", help="a directory with config.json and *.safetensors")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--served-model-name")
    s.add_argument("--device", default="cuda:0")
    s.add_argument("--load-format", choices=["disk", "fastrestart", "dummy"], default="disk")
    s.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    s.add_argument("--fastrestart-mode", choices=["zero_copy", "copy"], default="zero_copy")
    s.add_argument("--fastrestart-fallback", choices=["on", "off"], default="on")
    s.add_argument("--fastrestart-publish", choices=["on", "off"], default="on")
    s.add_argument("--fastrestart-socket-dir")
    s.add_argument("--fastrestart-verify", action="store_true")
    s.add_argument("--fastrestart-connect-timeout", type=float, default=5.0)
    s.add_argument("--fastrestart-state-timeout", type=float, default=300.0)
    s.add_argument("--cuda-graph", action="store_true",
                   help="capture the decode step as a CUDA graph (static KV cache of --cuda-graph-max-len)")
    s.add_argument("--cuda-graph-max-len", type=int, default=512,
                   help="positions of the graph's static KV cache; longer requests run eagerly")
    s.add_argument("--max-num-seqs", type=int, metavar="N",
                   help="sequences decoded together (default vLLM's: 1024 on a GPU of >= 70 GiB but an A100, "
                        "else 256); 1 with --enforce-eager: the single-request engine")
    s.add_argument("--max-num-batched-tokens", type=int, metavar="N",
                   help="tokens of the profiling forward; caps the graph sizes (default vLLM's: 8192, else 2048)")
    s.add_argument("--max-model-len", type=int, metavar="N",
                   help="the most positions a KV-cache slot gets (default: the config's max_position_embeddings)")
    s.add_argument("--cuda-graph-sizes", metavar="LIST",
                   help="batch sizes to capture, e.g. 1,2,4,8 (default vLLM's rule for --max-num-seqs)")
    s.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    s.add_argument("--kv-arena", metavar="NAME",
                   help="the KV cache in the weight daemon's KV arena NAME (docs/refengine.md); a warmed standby "
                        "captures its graphs over the arena's placeholder and leases the arena at its release")
    s.add_argument("--kv-arena-wait", type=float, default=30.0, metavar="S",
                   help="how long the lease waits for the previous holder's exit (default 30)")
    s.add_argument("--kv-arena-zero", action="store_true",
                   help="zero the KV cache at every lease (default: only a new arena is zero-filled, by the daemon)")
    s.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                   help="reuse a free slot's cached prompt prefix (blocks of 16 tokens); with --kv-arena its index "
                        "survives a kill in the host arena <NAME>-index (docs/refengine.md; the batched engine)")
    s.add_argument("--compile", action="store_true", help="torch.compile the decode step before the capture")
    s.add_argument("--tensor-parallel-size", type=int, default=1, metavar="N",
                   help="ranks: this process is rank 0 and starts ranks 1..N-1 (one per GPU of FASTRESTART_DEVICES)")
    s.add_argument("--dist-backend", choices=["nccl", "gloo"],
                   help="torch.distributed backend of the ranks (default nccl)")
    s.add_argument("--share-device", action="store_true",
                   help="every rank on the first device (a one-GPU test of N ranks; needs --dist-backend gloo)")
    a = ap.parse_args(argv)
    a.argv = list(argv)  # what rank 0 starts its workers with
    if a.tensor_parallel_size < 1:
        ap.error("--tensor-parallel-size must be at least 1")
    if a.tensor_parallel_size > 1 and a.share_device and a.dist_backend != "gloo":
        ap.error("--share-device needs --dist-backend gloo (NCCL refuses two ranks on one GPU)")
    if a.tensor_parallel_size > 1 and a.cuda_graph:
        ap.error("--cuda-graph is for --tensor-parallel-size 1 only")
    a.dist_backend = a.dist_backend or "nccl"
    for flag in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        if getattr(a, flag) is not None and getattr(a, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be at least 1")
    # The single-request engine: --max-num-seqs 1 with --enforce-eager (or its own --cuda-graph), and every
    # tensor-parallel engine (the batched one is one rank only).
    single = a.max_num_seqs == 1 and (a.enforce_eager or a.cuda_graph)
    if a.tensor_parallel_size > 1:
        if a.max_num_seqs not in (None, 1) or a.compile or a.cuda_graph_sizes:
            ap.error("--tensor-parallel-size > 1 runs the single-request engine: no --max-num-seqs > 1, "
                     "--cuda-graph-sizes or --compile")
        single = True
    if a.cuda_graph and not single:
        ap.error("--cuda-graph is the single-request engine's graph: it needs --max-num-seqs 1 "
                 "(the batched engine captures its graphs unless --enforce-eager)")
    if single and (a.cuda_graph_sizes or a.compile):
        ap.error("--cuda-graph-sizes and --compile are the batched engine's "
                 "(not with --max-num-seqs 1 --enforce-eager)")
    if a.cuda_graph_sizes is not None:
        try:
            rb.parse_capture_sizes(a.cuda_graph_sizes, 1 << 30)
        except ValueError as e:
            ap.error(str(e))
    a.batched = not single
    if a.kv_arena is not None and not a.batched:
        ap.error("--kv-arena is the batched engine's KV cache (not with --max-num-seqs 1 --enforce-eager, "
                 "--cuda-graph or --tensor-parallel-size > 1)")
    if a.kv_arena is not None and not (0 <= a.kv_arena_wait <= 3600):
        ap.error("--kv-arena-wait must be within 0..3600 seconds")
    if a.cuda_graph_max_len < len(ORACLE_PROMPT.encode()) + 1:
        ap.error(f"--cuda-graph-max-len must be at least {len(ORACLE_PROMPT.encode()) + 1}")
    if not 0 < a.gpu_memory_utilization <= 1:
        ap.error("--gpu-memory-utilization must be in (0, 1]")
    if not a.device.startswith("cuda:"):
        ap.error("--device must be cuda:N (the reference engine runs on a GPU only)")
    a.served_model_name = a.served_model_name or a.model
    return a


def worker_main(args):
    """Ranks 1..N-1 (started by rank 0, refengine_tp.Workers): rank 0's startup without the HTTP server and
    the gates, then the forwards rank 0 sends, one per request, until rank 0 is gone."""
    tp.die_with_parent(log)
    try:
        engine = Engine(args)
        engine.start()
    except Exception as e:
        log(f"load failed: {type(e).__name__}: {e}")
        os._exit(1)
    except SystemExit as e:
        log(f"load failed: {e}")
        os._exit(1)
    while True:
        msg = tp.read_message()
        if msg is None:  # rank 0 closed our stdin (it stopped) or died
            os._exit(0)
        if msg.get("op") == "generate":
            engine.generate(msg["ids"], msg["max_tokens"], msg["logprobs"])
        else:
            log(f"unknown message from rank 0: {msg!r}")
            os._exit(1)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if os.environ.get(tp.PARENT_ENV):
        return worker_main(args)
    try:
        inherited, probe = inherited_listen_sockets()
        engine = Engine(args)
    except SystemExit as e:
        log(str(e))
        return 1
    server = None
    serving = threading.Event()

    def open_port():
        nonlocal server
        if probe is not None:
            # The private endpoint first: fastrestartd's readiness request is answered no later than a
            # client's, whatever waits in the public queue (docs/listen-socket.md, "The private endpoint").
            threading.Thread(target=http_server(engine, args, probe).serve_forever, daemon=True).start()
        server = http_server(engine, args, inherited)
        if inherited is None:
            log(f"listening on {args.host}:{server.server_address[1]}, loading {args.model} ({args.load_format})")
        else:
            log(f"accepting on the socket fastrestartd passed ({server.server_address[0]}:{server.server_address[1]})")
        threading.Thread(target=server.serve_forever, daemon=True).start()
        serving.set()

    def stop(signum, _frame):
        log(f"signal {signum}: stopping")
        engine.state = "stopping"
        if engine.workers is not None:
            engine.workers.stopping = True  # they end with this process (refengine_tp.die_with_parent)
        if server is None or engine.model is None:  # not serving or still loading: nothing to drain
            os._exit(0)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if inherited is not None:
        # The socket listens already (fastrestartd's): accepting before the engine can serve would only
        # turn connections that wait in the kernel's queue into 503s. A standby holds it, parked, without
        # accepting; every engine accepts once ready, below.
        log(f"holding the socket fastrestartd passed ({inherited.getsockname()[0]}:{inherited.getsockname()[1]}); "
            f"accepting once ready, loading {args.model} ({args.load_format})")
    elif engine.standby is None:
        # The port opens before loading, as vLLM's does: /health answers 503 meanwhile.
        open_port()
    else:
        # A standby binds nothing before its release (docs/standby.md): the gate opens the port.
        engine.on_release = open_port
    try:
        engine.start()
    except Exception as e:  # a failed load is an exit 1 with its reason, never a half-ready server
        log(f"load failed: {type(e).__name__}: {e}")
        os._exit(1)
    except SystemExit as e:
        if e.code in (0, None):  # told to exit while parked
            os._exit(0)
        log(f"load failed: {e}")
        os._exit(1)
    if engine.standby is not None and "released_at" not in engine.standby_info:
        server = None  # a standby of a level this engine has no gate for: it was never released
    elif inherited is not None:
        open_port()
    if server is None:
        log("standby: no gate of this engine matched FASTRESTART_STANDBY_LEVEL; exiting")
        os._exit(1)
    while engine.state == "ready":
        time.sleep(0.2)
    server.server_close()
    if engine.workers is not None:
        # No interpreter teardown with a live process group (destroying it can wait on the peers): the
        # workers end with this process.
        engine.workers.stop()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())

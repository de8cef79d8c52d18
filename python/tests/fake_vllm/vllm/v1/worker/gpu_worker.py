"""vllm.v1.worker.gpu_worker reduced to the steps of a worker's start, each a line (repro.step) in
vLLM's order. vllm-project/vllm vllm/v1/worker/gpu_worker.py `Worker`:

- `init_device`: CUDA (`torch.cuda.set_device`, `self.device`), the distributed environment; here the
  parallel state. Then `self.init_snapshot = init_snapshot = MemorySnapshot(device=self.device)` and
  `self.requested_memory = request_memory(init_snapshot, self.cache_config)`, the function called through
  this module's global (imported by name from vllm/v1/worker/utils.py; code-search excerpts of later trees;
  the check was inline in `init_device` at 35d5cda123ec28581759b6d34cde8052314fb1e6, with `MemorySnapshot()`):
  the share `ceil(total * gpu_memory_utilization)`, after vLLM's ValueError ("Free memory on device ... is
  less than desired GPU memory utilization") when the free memory is smaller. It never reads
  `kv_cache_memory_bytes`. The reproduction's device: FAKE_VLLM_DEVICE_MEMORY bytes (1 GiB), of which
  FAKE_VLLM_DEVICE_USED are held by other processes (../../utils/mem_utils.py). Then the model runner:
  V2 unless VLLM_USE_V2_MODEL_RUNNER is "0" (`Worker.__init__`/`init_device` at 35d5cda1).
- `load_model`: the model runner's `load_model` -> `get_model(vllm_config=...)` (the model loader: where
  fastrestart's `fastrestart` load format runs).
- `determine_available_memory`: the profile run (`profile_run`, a forward of max_num_batched_tokens),
  from which the engine core sizes the KV cache. With `kv_cache_memory_bytes` set (35d5cda1) it still runs
  `profile_run` (it compiles the model) but skips the memory profile and returns that figure, "This does
  not respect the gpu_memory_utilization config".
- `initialize_from_config`: the KV cache allocation. Model Runner V2 (the default in recent vLLM):
  `vllm/v1/worker/gpu/model_runner.py` `initialize_kv_cache` builds the block tables, then
  `vllm/v1/worker/gpu/attn_utils.py` `init_kv_cache` -> `_allocate_kv_cache` (one `torch.zeros(size,
  dtype=torch.int8)` per KVCacheTensor; checked at 001cabc1be16a59a70d720ed61a13b678c060a18); V1:
  `vllm/v1/worker/gpu_model_runner.py` `initialize_kv_cache_tensors` -> `_allocate_kv_cache_tensors`
  (../gpu_model_runner.py says which trees). With sleep mode the whole call runs under
  `CuMemAllocator.use_memory_pool(tag="kv_cache")`.
- `compile_or_warm_up_model`: `torch.compile` warm-up and CUDA graph capture (`capture_model`).
"""

import json
import os
import sys

import backend
import repro
from vllm.config import CacheConfig, DeviceConfig, HfConfig, LoadConfig, ModelConfig, ParallelConfig, VllmConfig
from vllm.distributed import set_parallel_state
from vllm.model_executor.model_loader import get_model, get_model_loader
from vllm.model_executor.model_loader.default_loader import READS
from vllm.utils.mem_utils import MemorySnapshot
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.worker import gpu_model_runner as v1_runner
from vllm.v1.worker.gpu import model_runner as v2_runner
from vllm.v1.worker.utils import request_memory

# The profile's answer when --kv-cache-memory-bytes is not given (the reproduction has no GPU to measure).
PROFILED_KV_BYTES = 64 << 10

SUMMARY = {}  # the in-process worker's summary, for the API server to print (without --processes)


class Worker:
    def __init__(self, args, role):
        self.a, self.role = args, role
        # WorkerBase keeps the VllmConfig's parts; the reproduction's CacheConfig holds what vLLM's workers read
        self.cache_config = CacheConfig(cache_dtype=getattr(args, "kv_cache_dtype", "auto"),
                                        gpu_memory_utilization=getattr(args, "gpu_memory_utilization", 0.9),
                                        kv_cache_memory_bytes=getattr(args, "kv_cache_memory_bytes", None))
        v2 = os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "1") != "0"
        self.model_runner = (v2_runner if v2 else v1_runner).GPUModelRunner(
            args.device, role, getattr(args, "kv_cache_dtype", "auto"))

    def init_device(self):
        """vllm/v1/worker/gpu_worker.py Worker.init_device (CUDA, the distributed environment, the memory
        snapshot and request_memory's check)."""
        repro.step("init_device", self.role)
        print("fake-vllm: init_device", file=sys.stderr, flush=True)
        self.device = self.a.device
        set_parallel_state(tp_size=self.a.tensor_parallel_size, tp_rank=self.a.tp_rank)
        self.init_snapshot = init_snapshot = MemorySnapshot(device=self.device)
        self.requested_memory = request_memory(init_snapshot, self.cache_config)

    def load_model(self):
        """Worker.load_model -> the model runner's load_model -> get_model (model_loader/__init__.py)."""
        a = self.a
        self.hf = HfConfig.from_model(a.model)
        self.vllm_config = VllmConfig(
            model_config=ModelConfig(model=a.model, dtype=backend.dtype(a.dtype), hf_config=self.hf,
                                     quantization=a.quantization, revision=a.revision),
            load_config=LoadConfig(load_format=a.load_format, model_loader_extra_config=a.model_loader_extra_config),
            device_config=DeviceConfig(device=a.device),
            parallel_config=ParallelConfig(tensor_parallel_size=a.tensor_parallel_size,
                                           data_parallel_size=a.data_parallel_size,
                                           data_parallel_rank=a.data_parallel_rank),
            cache_config=self.cache_config)
        repro.step("load_model", self.role)
        try:
            self.model = get_model(vllm_config=self.vllm_config)
        except Exception as e:  # noqa: BLE001 -- an engine start that fails
            print("engine start failed: %s: %s" % (type(e).__name__, e), file=sys.stderr)
            return False
        if a.reload_weights:
            try:
                get_model_loader(self.vllm_config.load_config).load_weights(self.model, self.vllm_config.model_config)
            except Exception as e:  # noqa: BLE001
                print("reload_weights failed: %s: %s" % (type(e).__name__, e), file=sys.stderr)
                return False
        return True

    def get_kv_cache_spec(self):
        """Worker.get_kv_cache_spec: one full-attention spec per layer (block 4, one KV head of the hidden size)."""
        return {"model.layers.%d.self_attn.attn" % i: FullAttentionSpec(block_size=4, num_kv_heads=1,
                                                                      head_size=self.hf.hidden_size, dtype="float32")
                for i in range(self.hf.num_layers)}

    def determine_available_memory(self):
        """Worker.determine_available_memory: the profile run that sizes the KV cache; with
        --kv-cache-memory-bytes vLLM takes that figure instead of the profile's (CacheConfig.kv_cache_memory_bytes)."""
        repro.step("profile", self.role)
        given = self.cache_config.kv_cache_memory_bytes
        return int(given) if given else PROFILED_KV_BYTES

    def initialize_from_config(self, kv_cache_config):
        """Worker.initialize_from_config -> initialize_kv_cache -> _allocate_kv_cache (Model Runner V2,
        vllm/v1/worker/gpu/attn_utils.py) or _allocate_kv_cache_tensors (V1, gpu_model_runner.py)."""
        repro.step("kv_cache", self.role)
        self.model_runner.initialize_kv_cache(kv_cache_config)

    def compile_or_warm_up_model(self):
        """Worker.compile_or_warm_up_model: torch.compile warm-up, CUDA graph capture (capture_model)."""
        repro.step("graph_capture", self.role)
        self.model_runner.capture_model(backend.to_numpy(self.model.model.embed_tokens.weight))

    def first_request(self):
        """The reproduction's own step (not vLLM's): one forward pass, the loader's summary."""
        model, hf = self.model, self.hf
        logits = model.forward(list(range(min(6, hf.vocab_size))))
        down = model.model.layers.__getattr__("0").mlp.down_proj
        summary = {
            "loader": type(model).__name__,
            "logits": logits.tolist(),
            "tied": model.lm_head.weight is model.model.embed_tokens.weight,
            "embed_writeable": backend.writeable(model.model.embed_tokens.weight),
            "checkpoint_reads": len(READS),
            "scale_float": getattr(down, "scale_float", None),
            "has_own_embed_tokens": model.has_own_embed_tokens,
            "has_own_lm_head": model.has_own_lm_head,
            # What vLLM keeps of init_device's memory accounting, and whose request_memory this module calls now
            "memory": {"init_free": self.init_snapshot.free_memory, "requested": self.requested_memory,
                       "request_memory": request_memory.__module__},
        }
        if self.model_runner.graphs:
            # The first request's K and V, written by the graph captured at start (over whatever memory its
            # addresses point at now), then the KV cache read back through the runner's tensors.
            import hashlib
            self.model_runner.graphs[1].replay(list(range(min(4, hf.vocab_size))))
            kv = self.model_runner.kv_bytes()
            summary["kv"] = {"bytes": len(kv), "sha256": hashlib.sha256(kv).hexdigest(),
                             "nonzero": any(kv), "layers": len(self.model_runner.kv_caches)}
        if self.a.processes:
            print(json.dumps(summary), flush=True)
        else:
            SUMMARY.update(summary)
        return 0

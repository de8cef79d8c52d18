"""vllm.v1.worker.gpu_model_runner (the V1 model runner) reduced to the KV cache, the graph capture and the
post-wake hook.

vllm-project/vllm vllm/v1/worker/gpu_model_runner.py, in the trees where the V1 runner allocates through a
method of its own (code-search excerpts of those trees; no vllm-project commit of that form was stored):
`initialize_kv_cache(kv_cache_config)` sets up the input batch and the attention backends, then
`initialize_kv_cache_tensors(kv_cache_config)`: `self._allocate_kv_cache_tensors(kv_cache_config)` (one
`torch.zeros(kv_cache_tensor.size, dtype=torch.int8, device=self.device)` per `KVCacheTensor`, the same
tensor for every layer of its `shared_by`, every layer of the groups asserted present), then
`self._reshape_kv_cache_tensors(kv_cache_config, raw)` (each raw buffer viewed as the spec's dtype and the
backend's shape), then `bind_kv_cache` into the runner's `kv_caches` list. Both are looked up on the
instance, which is what fastrestart_vllm.kv_arena wraps.

At 000fc94b754f66aeb60ef5acf1ea2e94cdc65164 the method is gone: `initialize_kv_cache_tensors(kv_cache_config,
kernel_block_sizes, kv_cache_allocation_context=None)` calls a module-level `allocate_kv_cache(kv_cache_config,
self.device, layout, kernel_block_sizes)` imported by name from vllm/v1/worker/utils.py, which returns the
reshaped tensors. That form is not reproduced (and not wrapped: docs/vllm.md).

`post_kv_cache_wake_up()`: what vLLM's `Worker.wake_up` calls on the runner when the KV cache woke up
(`tags is None or "kv_cache" in tags`); the V1 runner's runs `init_fp8_kv_scales()`, which returns at once
unless the KV cache is quantized (then zeroes it and sets each attention layer's k/v scales to 1.0).

Selected, as in vLLM's `Worker.init_device` (35d5cda123ec28581759b6d34cde8052314fb1e6), by
VLLM_USE_V2_MODEL_RUNNER: "0" builds this runner, anything else the V2 runner (gpu/model_runner.py).
"""

import repro
from vllm.v1.worker.gpu import attn_utils
from vllm.v1.worker.gpu.model_runner import CapturedRunner


class GPUModelRunner(CapturedRunner):
    def __init__(self, device, role="worker", cache_dtype="auto"):
        self.device, self.role, self.cache_dtype = device, role, cache_dtype
        self.kv_caches = []
        self.graphs = {}

    def initialize_kv_cache(self, kv_cache_config):
        self.kv_cache_config = kv_cache_config
        return self.initialize_kv_cache_tensors(kv_cache_config)

    def initialize_kv_cache_tensors(self, kv_cache_config):
        kv_cache_raw_tensors = self._allocate_kv_cache_tensors(kv_cache_config)
        kv_caches = self._reshape_kv_cache_tensors(kv_cache_config, kv_cache_raw_tensors)
        self.kv_caches.extend(kv_caches[n] for n in sorted(kv_caches))  # bind_kv_cache: the runner's list
        return kv_caches

    def _allocate_kv_cache_tensors(self, kv_cache_config):
        # Not through attn_utils._allocate_kv_cache: that is V2's site (a module global fastrestart_vllm
        # replaces), and a test of the V1 path must not pass because V2's was wrapped.
        return attn_utils.raw_buffers(kv_cache_config, self.device)

    def _reshape_kv_cache_tensors(self, kv_cache_config, kv_cache_raw_tensors):
        return attn_utils._reshape_kv_cache(kv_cache_config, kv_cache_raw_tensors)

    def post_kv_cache_wake_up(self):
        repro.step("post_kv_cache_wake_up", self.role, runner="V1")
        self.init_fp8_kv_scales()

    def init_fp8_kv_scales(self):
        if not self.cache_dtype.startswith("fp8"):
            return
        for kv in self.kv_caches:
            kv[...] = 0

"""vllm.v1.worker.gpu.model_runner (Model Runner V2) reduced to the KV cache and the graph capture.

vllm-project/vllm vllm/v1/worker/gpu/model_runner.py (this file was NOT re-read at a commit; what it
reproduces is from attn_utils.py at 001cabc1 and issue 45's survey): `initialize_kv_cache(kv_cache_config)`
builds the block tables FIRST (their own allocations, not the KV cache's), then calls `attn_utils.init_kv_cache`;
`capture_model()` captures the CUDA graphs, which record the KV cache's addresses. A graph replayed later
writes wherever those addresses point: after a swap of the memory under them, into the new memory.

The reproduction's "graph" is a recorded step over the KV arrays as they were at capture (the same objects,
so the same addresses): replay(ids) writes each token's K and V (from the model's embedding, so that a test
can tell what was written) into block 0 of every layer. Capture runs it once, as vLLM's warm-up does.
"""

import numpy as np

import backend
import repro
from vllm.v1.worker.gpu import attn_utils


class Graph:
    def __init__(self, kv_caches, embed):
        self.kv_caches, self.embed = list(kv_caches), embed  # captured: these objects, these addresses

    def replay(self, ids):
        for i, kv in enumerate(self.kv_caches):
            block_size, heads, head_size = kv.shape[2], kv.shape[3], kv.shape[4]
            for pos, tok in enumerate(ids[:block_size]):
                row = np.asarray(self.embed[tok][:head_size], dtype=np.float32)
                k, v = row * (i + 1), -row * (i + 1)
                if backend.NAME == "torch":
                    import torch
                    kv[0, 0, pos, :, :] = torch.as_tensor(k, device=kv.device).expand(heads, head_size)
                    kv[1, 0, pos, :, :] = torch.as_tensor(v, device=kv.device).expand(heads, head_size)
                else:
                    kv[0, 0, pos, :, :] = k
                    kv[1, 0, pos, :, :] = v


class CapturedRunner:
    """What both runners of the reproduction share (not vLLM's code): the capture over the runner's KV list and
    the read-back of the KV cache's bytes."""

    def capture_model(self, embed, sizes=(1,)):
        for size in sizes:
            g = self.graphs[size] = Graph(self.kv_caches, embed)
            g.replay(list(range(size)))  # the warm-up run of the capture
        return len(self.graphs)

    def kv_bytes(self):
        """The KV cache's bytes, layer after layer (what a test compares with the arena's)."""
        out = b""
        for kv in self.kv_caches:
            out += (kv.detach().cpu().numpy() if backend.NAME == "torch" else kv).tobytes()
        return out


class GPUModelRunner(CapturedRunner):
    def __init__(self, device, role="worker", cache_dtype="auto"):
        self.device, self.role = device, role
        self.kv_caches = []
        self.block_tables = None
        self.graphs = {}

    def initialize_kv_cache(self, kv_cache_config):
        # V2 builds the block tables before the KV cache: not part of the KV cache's memory (issue 45: a
        # hook on the sleep allocator's "kv_cache" tag would take them too).
        self.block_tables = np.zeros((4, max(1, kv_cache_config.num_blocks)), dtype=np.int32)
        self.kv_cache_config = kv_cache_config
        return attn_utils.init_kv_cache(self.kv_caches, kv_cache_config, self.device)

    def post_kv_cache_wake_up(self):
        """V2's hook after the KV cache woke up: its block tables' layout tensors made again (code-search
        excerpts; not read at a vllm-project commit). The reproduction's block tables are one array."""
        repro.step("post_kv_cache_wake_up", self.role, runner="V2")
        self.block_tables[...] = 0

"""vllm.v1.kv_cache_interface reduced to the objects the KV cache allocation reads.

vllm-project/vllm vllm/v1/kv_cache_interface.py: `KVCacheTensor(size, shared_by)` (one raw buffer of `size`
bytes, shared by the layers named), `KVCacheGroupSpec(layer_names, kv_cache_spec)`, `KVCacheConfig(num_blocks,
kv_cache_tensors, kv_cache_groups)`, and an attention spec's `page_size_bytes` (one block of one layer: K and
V, `2 * block_size * num_kv_heads * head_size * dtype size` for full attention).
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class FullAttentionSpec:
    block_size: int
    num_kv_heads: int
    head_size: int
    dtype: str  # the reproduction's dtype name ("float32"), vLLM's a torch.dtype

    @property
    def page_size_bytes(self):
        return 2 * self.block_size * self.num_kv_heads * self.head_size * _itemsize(self.dtype)


def _itemsize(name):
    return {"float32": 4, "float16": 2, "bfloat16": 2}[name]


@dataclasses.dataclass
class KVCacheTensor:
    size: int
    shared_by: list


@dataclasses.dataclass
class KVCacheGroupSpec:
    layer_names: list
    kv_cache_spec: FullAttentionSpec


@dataclasses.dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_tensors: list
    kv_cache_groups: list

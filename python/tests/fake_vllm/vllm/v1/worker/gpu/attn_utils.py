"""vllm.v1.worker.gpu.attn_utils (Model Runner V2) reduced to the KV cache allocation.

vllm-project/vllm vllm/v1/worker/gpu/attn_utils.py (checked at 001cabc1be16a59a70d720ed61a13b678c060a18):
`init_kv_cache(runner_kv_caches, forward_context, kv_cache_config, attn_backends, device, cache_dtype)`
calls `_allocate_kv_cache(kv_cache_config, device)` through its module global (one `torch.zeros(size,
dtype=torch.int8, device=device)` per `KVCacheTensor`, the same tensor for every layer of its `shared_by`;
it asserts every layer of the groups got one), then `_reshape_kv_cache` (each raw buffer viewed as the
spec's dtype and the backend's shape, `num_blocks = raw.numel() // page_size_bytes`), then `bind_kv_cache`.
The reproduction's backend shape is (2, num_blocks, block_size, num_kv_heads, head_size), FlashAttention's.
Tensors are torch or numpy (../../../../backend.py).
"""

import numpy as np

import backend


def zeros_int8(size, device):
    if backend.NAME == "torch":
        import torch
        return torch.zeros(size, dtype=torch.int8, device=device)
    return np.zeros(size, dtype=np.int8)


def _allocate_kv_cache(kv_cache_config, device):
    return raw_buffers(kv_cache_config, device)


def raw_buffers(kv_cache_config, device):
    """The loop both runners run (V2 here, V1 in its `_allocate_kv_cache_tensors`): one zeroed int8 buffer per
    KVCacheTensor, shared by its layers, then vLLM's assertion that every layer got one."""
    kv_cache_raw_tensors = {}
    for kv_cache_tensor in kv_cache_config.kv_cache_tensors:
        tensor = zeros_int8(kv_cache_tensor.size, device)
        for layer_name in kv_cache_tensor.shared_by:
            kv_cache_raw_tensors[layer_name] = tensor
    check_every_layer(kv_cache_config, kv_cache_raw_tensors)
    return kv_cache_raw_tensors


def check_every_layer(kv_cache_config, kv_cache_raw_tensors):
    """vLLM's assertion after the raw allocation (V2's _allocate_kv_cache, V1's _allocate_kv_cache_tensors)."""
    layer_names = set()
    for group in kv_cache_config.kv_cache_groups:
        layer_names.update(group.layer_names)
    assert layer_names == set(kv_cache_raw_tensors), "Some layers are not correctly initialized"


def _reshape_kv_cache(kv_cache_config, kv_cache_raw_tensors):
    kv_caches = {}
    for group in kv_cache_config.kv_cache_groups:
        spec = group.kv_cache_spec
        for layer_name in group.layer_names:
            raw = kv_cache_raw_tensors[layer_name]
            nbytes = raw.numel() if backend.NAME == "torch" else raw.size
            assert nbytes % spec.page_size_bytes == 0
            shape = (2, nbytes // spec.page_size_bytes, spec.block_size, spec.num_kv_heads, spec.head_size)
            if backend.NAME == "torch":
                import torch
                kv_caches[layer_name] = raw.view(getattr(torch, spec.dtype)).view(shape)
            else:
                kv_caches[layer_name] = raw.view(np.dtype(spec.dtype)).reshape(shape)
    return kv_caches


def init_kv_cache(runner_kv_caches, kv_cache_config, device):
    """vLLM's init_kv_cache (forward context and backends left out): allocate, reshape, bind."""
    kv_cache_raw_tensors = _allocate_kv_cache(kv_cache_config, device)
    kv_caches = _reshape_kv_cache(kv_cache_config, kv_cache_raw_tensors)
    runner_kv_caches.extend(kv_caches[n] for n in sorted(kv_caches))  # bind_kv_cache: the runner's list
    return kv_caches

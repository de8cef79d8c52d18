"""vllm.v1.core.kv_cache_utils reduced to `get_kv_cache_configs`, which the engine core calls between the
workers' profile and their allocation (vllm/v1/engine/core.py `EngineCore._initialize_kv_caches`).

vLLM: for one uniform group of full-attention layers, `num_blocks = available_memory // page_size_bytes //
num_layers` (capped by `num_gpu_blocks_override`), and one `KVCacheTensor(size=page_size_bytes *
num_blocks, shared_by=[layer])` per layer, so the cache takes at most the memory the profile reported.
"""

from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor


def get_kv_cache_configs(vllm_config, kv_cache_specs, available_memory):
    configs = []
    for specs, available in zip(kv_cache_specs, available_memory):
        names = sorted(specs)
        spec = specs[names[0]]
        num_blocks = int(available) // spec.page_size_bytes // len(names)
        if num_blocks <= 0:
            # vLLM's own words (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory)
            raise ValueError("No available memory for the cache blocks. Try increasing "
                             "`gpu_memory_utilization` when initializing the engine.")
        configs.append(KVCacheConfig(
            num_blocks=num_blocks,
            kv_cache_tensors=[KVCacheTensor(size=spec.page_size_bytes * num_blocks, shared_by=[n]) for n in names],
            kv_cache_groups=[KVCacheGroupSpec(layer_names=names, kv_cache_spec=spec)]))
    return configs

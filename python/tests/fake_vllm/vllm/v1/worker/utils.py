"""vllm.v1.worker.utils reduced to `request_memory`.

vllm-project/vllm vllm/v1/worker/utils.py (checked at 0027b02769fbf0f9b73c612cd8912e7fa0f37458):
`request_memory(init_snapshot, cache_config)` is `ceil(init_snapshot.total_memory *
cache_config.gpu_memory_utilization)`, the engine's whole share of its device, after a ValueError when
`init_snapshot.free_memory` is smaller (the text below is vLLM's). It reads nothing else of the snapshot
but `device_` (for the message), and never `kv_cache_memory_bytes`. `Worker.init_device` imports it by name
(vllm/v1/worker/gpu_worker.py), so it is called through gpu_worker's module global.
"""

import math

from vllm.utils.mem_utils import format_gib


def request_memory(init_snapshot, cache_config):
    requested_memory = math.ceil(init_snapshot.total_memory * cache_config.gpu_memory_utilization)
    if init_snapshot.free_memory < requested_memory:
        raise ValueError(
            f"Free memory on device {init_snapshot.device_} "
            f"({format_gib(init_snapshot.free_memory)}/"
            f"{format_gib(init_snapshot.total_memory)} GiB) on startup "
            f"is less than desired GPU memory utilization "
            f"({cache_config.gpu_memory_utilization}, "
            f"{format_gib(requested_memory)} GiB). Decrease GPU memory "
            f"utilization or reduce GPU memory used by other processes."
        )
    return requested_memory

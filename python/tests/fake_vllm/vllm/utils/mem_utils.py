"""vllm.utils.mem_utils reduced to `MemorySnapshot` and `format_gib`.

vllm-project/vllm vllm/utils/mem_utils.py (checked at a6d5c39009eb73797b276cc557ca9659c396ca14):
`MemorySnapshot` is a dataclass (`free_memory`, `total_memory`, ..., `device`, `auto_measure=True`) whose
`__post_init__` sets `device_` and, with `auto_measure`, calls `measure()`: `torch.cuda.mem_get_info(device)`
gives `free_memory` and `total_memory`, so memory another process holds on the device (the weight daemon's
arena, say) is not free. `format_gib(b)` is `round(b / GiB_bytes, 2)`.

The reproduction's device has FAKE_VLLM_DEVICE_MEMORY bytes (1 GiB by default) of which
FAKE_VLLM_DEVICE_USED (0 by default) are held by other processes: reproduction-only variables, as no GPU
is measured here.
"""

import dataclasses
import os

GiB_bytes = 1 << 30
DEVICE_MEMORY_ENV = "FAKE_VLLM_DEVICE_MEMORY"
DEVICE_USED_ENV = "FAKE_VLLM_DEVICE_USED"


def format_gib(b):
    return round(b / GiB_bytes, 2)


@dataclasses.dataclass
class MemorySnapshot:
    free_memory: int = 0
    total_memory: int = 0
    device: object = None
    auto_measure: bool = True

    def __post_init__(self):
        self.device_ = str(self.device) if self.device is not None else "cpu"
        if self.auto_measure:
            self.measure()

    def measure(self):
        self.total_memory = int(os.environ.get(DEVICE_MEMORY_ENV, str(1 << 30)))
        self.free_memory = self.total_memory - int(os.environ.get(DEVICE_USED_ENV, "0"))

"""The configuration objects a loader receives, with the fields fastrestart_vllm reads."""

import dataclasses
import json
import os


class HfConfig:
    """A transformers PretrainedConfig stand-in: attributes from config.json, to_dict()."""

    def __init__(self, d):
        self.__dict__.update(d)

    @classmethod
    def from_model(cls, model):
        with open(os.path.join(model, "config.json")) as f:
            return cls(json.load(f))

    def to_dict(self):
        return dict(self.__dict__)


@dataclasses.dataclass
class LoadConfig:
    load_format: str = "auto"
    download_dir: str | None = None
    model_loader_extra_config: dict = dataclasses.field(default_factory=dict)
    device: str | None = None
    ignore_patterns: list = dataclasses.field(default_factory=lambda: ["original/**/*"])


@dataclasses.dataclass
class ModelConfig:
    model: str
    dtype: object
    hf_config: HfConfig
    quantization: str | None = None
    revision: str | None = None


@dataclasses.dataclass
class DeviceConfig:
    device: str = "cpu"


@dataclasses.dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    data_parallel_rank: int = 0
    enable_expert_parallel: bool = False
    worker_cls: str = "auto"  # vLLM resolves "auto" to the platform's worker in check_and_update_config


@dataclasses.dataclass
class CacheConfig:
    cache_dtype: str = "auto"
    gpu_memory_utilization: float = 0.9
    kv_cache_memory_bytes: int | None = None


@dataclasses.dataclass
class VllmConfig:
    model_config: ModelConfig
    load_config: LoadConfig
    device_config: DeviceConfig = dataclasses.field(default_factory=DeviceConfig)
    parallel_config: ParallelConfig = dataclasses.field(default_factory=ParallelConfig)
    cache_config: CacheConfig = dataclasses.field(default_factory=CacheConfig)

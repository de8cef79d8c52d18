"""vllm.engine.arg_utils reduced to where the general plugins load in the process `vllm serve` runs in.

vllm-project/vllm vllm/engine/arg_utils.py (checked at 99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b):
`AsyncEngineArgs.add_cli_args(parser)` calls `load_general_plugins()` first ("Initialize plugin to update
the parser, for example, The plugin may add a new kind of quantization method to --quantization argument
or a new device to --device argument."), then `EngineArgs.add_cli_args(parser)`. `make_arg_parser`
(vllm/entrypoints/openai/cli_args.py) calls it while `vllm serve` builds its parser, so the plugins of the
API server process load before the arguments are parsed, and so before `setup_server` binds the port.
(`EngineArgs.__post_init__` calls `load_general_plugins()` again; `plugins_loaded` makes that a no-op.)
"""

import json

from vllm.plugins import load_general_plugins


class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        """The engine flags the reproduction reads (vLLM has hundreds; the rest are not declared)."""
        parser.add_argument("--model", default=None)
        parser.add_argument("--dtype", default="float32")
        parser.add_argument("--quantization", "-q", default=None)
        parser.add_argument("--revision", default=None)
        parser.add_argument("--load-format", default="auto")
        parser.add_argument("--model-loader-extra-config", default="{}", type=json.loads)
        parser.add_argument("--device", default="cpu")
        parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
        parser.add_argument("--data-parallel-size", "-dp", type=int, default=1)
        parser.add_argument("--data-parallel-rank", type=int, default=0)
        # ParallelConfig.worker_cls ("auto": the platform's worker) and distributed_executor_backend ("uni": the
        # worker in the engine core process, vLLM's choice for one GPU; the reproduction defaults to "mp" so
        # that --processes shows a worker process), CacheConfig.kv_cache_memory_bytes (the KV cache's size in
        # bytes instead of the profile's figure)
        parser.add_argument("--worker-cls", default="auto")
        parser.add_argument("--distributed-executor-backend", choices=("uni", "mp"), default="mp")
        parser.add_argument("--kv-cache-memory-bytes", type=int, default=None)
        # CacheConfig.gpu_memory_utilization (request_memory's share of the device) and cache_dtype ("auto", or
        # "fp8*": the quantized KV cache whose scales init_fp8_kv_scales resets)
        parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
        parser.add_argument("--kv-cache-dtype", default="auto")
        # ParallelConfig's, a BooleanOptionalAction in vLLM (--no-... turns it off)
        parser.add_argument("--data-parallel-multi-port-external-lb", action="store_true", default=False)
        parser.add_argument("--no-data-parallel-multi-port-external-lb", dest="data_parallel_multi_port_external_lb",
                            action="store_false")
        return parser


class AsyncEngineArgs(EngineArgs):
    @staticmethod
    def add_cli_args(parser, async_args_only=False):
        """vllm/engine/arg_utils.py AsyncEngineArgs.add_cli_args: load_general_plugins() before any flag."""
        load_general_plugins()
        if not async_args_only:
            parser = EngineArgs.add_cli_args(parser)
        return parser

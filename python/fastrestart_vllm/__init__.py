"""fastrestart_vllm: the vLLM model-loader plugin of fastrestart (docs/vllm-plugin.md).

    pip install <fastrestart>/python          # registers the vllm.general_plugins entry point
    vllm serve /models/llama --load-format fastrestart \\
        --model-loader-extra-config '{"fallback": true, "mode": "zero_copy"}'

vLLM calls register() in every process it starts (plugins are loaded per process), before any model loads.
Under fastrestartd's standby path the first of them parks in register() at `pre_gpu`; at `warmed` (with the
KV cache in an arena: worker.py, kv_arena.py) the engine core parks after its KV cache and graphs
(standby.py, docs/vllm.md).
"""

__all__ = ["register", "LOAD_FORMAT", "__version__"]
__version__ = "0.1.0"
LOAD_FORMAT = "fastrestart"

_registered = False


def register():
    """The ``vllm.general_plugins`` entry point: make ``--load-format fastrestart`` known to vLLM.
    Idempotent (vLLM may call it more than once per process)."""
    global _registered
    if _registered:
        return
    from vllm.model_executor.model_loader import register_model_loader

    from .loader import FastrestartModelLoader
    register_model_loader(LOAD_FORMAT)(FastrestartModelLoader)
    _registered = True
    # Last: everything above is imported before a standby parks, not after its release.
    from . import standby
    standby.gate()

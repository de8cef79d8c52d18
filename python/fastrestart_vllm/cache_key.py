"""The cache key of a vLLM rank's weights: which checkpoint files, and every setting that shapes the tensors.

A key is (files, config) as engine_loader defines it (docs/engine_loader.md): the daemon compares the files'
identities (dev, inode, size, mtime_ns, ctime_ns; stat only, never read) and every config field, and names
the fields that differ on a miss. The config holds what vLLM's own ipc_cache key holds (architecture,
TP/PP size and rank, dtype, quantization and a hash of its config, revision, vLLM version) and more: the
DP size and rank, expert parallelism, the KV cache dtype (it decides how attention scales are post-processed),
a hash of the whole model config (rope scaling and other overrides shape buffers), the load prefix (draft
models) and the layout version of what this plugin publishes. Unlike vLLM's key, the files are identified by
inode and times, not by their safetensors headers, so a fine-tune with the same layout is a miss (vLLM issue
#59647).
"""

import glob
import hashlib
import json
import os

__all__ = ["CacheKeyError", "LAYOUT", "checkpoint_files", "key_config", "config_hash"]

# Bump when what publish() stores changes meaning (state.py), so old entries stop matching.
LAYOUT = "2"  # 2: the entry also holds the model attributes load_weights sets (state.LOAD_ATTRS)


class CacheKeyError(Exception):
    """The key cannot be built (no local checkpoint files, ...): the warm path is not possible."""


def _stable_str(obj):
    """str() for JSON, without memory addresses: a repr like <X object at 0x7f...> would change the key on
    every start (a miss every time) while saying nothing about the weights."""
    s = str(obj)
    return type(obj).__qualname__ if " at 0x" in s else s


def config_hash(obj):
    """sha256 (hex) of a JSON rendering with sorted keys; objects with to_dict() (transformers configs,
    vLLM quantization configs) are rendered through it, anything else through str()."""
    if obj is None:
        return ""
    if hasattr(obj, "to_dict"):
        obj = obj.to_dict()
    payload = json.dumps(obj, sort_keys=True, default=_stable_str, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()


def _local_dir(model_config, load_config):
    """The directory holding the checkpoint: the model path itself, or its snapshot in the Hugging Face
    cache when it is a repository id that was downloaded before (never downloads: a cold load does)."""
    model = model_config.model
    if os.path.isdir(model):
        return os.path.abspath(model)
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CacheKeyError("model %r is not a local directory and huggingface_hub is not installed" % model) from None
    try:
        return snapshot_download(model, revision=getattr(model_config, "revision", None),
                                 cache_dir=getattr(load_config, "download_dir", None), local_files_only=True)
    except Exception as e:  # noqa: BLE001 -- any failure means "not in the local cache"
        raise CacheKeyError("model %r is not a local directory and is not in the Hugging Face cache (%s)"
                            % (model, type(e).__name__)) from None


def _indexed(folder, index_name, files):
    """Keep the files the index names when there is one (vLLM does the same: a folder may hold both
    sharded and consolidated copies)."""
    index = os.path.join(folder, index_name)
    if not os.path.isfile(index):
        return files
    try:
        with open(index) as f:
            wanted = set(json.load(f)["weight_map"].values())
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CacheKeyError("%s: unreadable weight index (%s)" % (index, e)) from None
    return [p for p in files if os.path.basename(p) in wanted]


def checkpoint_files(model_config, load_config):
    """The checkpoint files a cold load reads, sorted: what vLLM's default loader picks for
    ``--load-format auto`` (consolidated Mistral safetensors, else safetensors filtered by their index,
    else .bin, else .pt), plus config.json when present (it decides the architecture and the buffers)."""
    folder = _local_dir(model_config, load_config)
    consolidated = sorted(glob.glob(os.path.join(folder, "consolidated*.safetensors")))
    files = _indexed(folder, "consolidated.safetensors.index.json", consolidated)
    if not files:
        files = _indexed(folder, "model.safetensors.index.json",
                         sorted(glob.glob(os.path.join(folder, "*.safetensors"))))
    if not files:
        files = sorted(p for p in glob.glob(os.path.join(folder, "*.bin")) if not p.endswith("training_args.bin"))
    if not files:
        files = sorted(glob.glob(os.path.join(folder, "*.pt")))
    if not files:
        raise CacheKeyError("no checkpoint files (*.safetensors, *.bin, *.pt) in %s" % folder)
    config_json = os.path.join(folder, "config.json")
    if os.path.isfile(config_json):
        files.append(config_json)
    return sorted(files)


def key_config(vllm_config, model_config, ranks, prefix="", vllm_version=""):
    """The key's config fields (str -> str). `ranks` is a dict tp_size, tp_rank, pp_size, pp_rank, dp_size,
    dp_rank (ints). Computed before anything loads: post-processing may mutate the quantization config."""
    hf_config = model_config.hf_config
    parallel = vllm_config.parallel_config
    cache = getattr(vllm_config, "cache_config", None)
    config = {
        "engine": "vllm",
        "vllm_version": str(vllm_version),
        "layout": "fastrestart_vllm/" + LAYOUT,
        "arch": ",".join(getattr(hf_config, "architectures", None) or []),
        "dtype": str(model_config.dtype),
        "quantization": str(model_config.quantization or ""),
        "quant_config_hash": config_hash(getattr(hf_config, "quantization_config", None)),
        "hf_config_hash": config_hash(hf_config),
        "revision": str(model_config.revision or ""),
        "kv_cache_dtype": str(getattr(cache, "cache_dtype", "auto")),
        "expert_parallel": "true" if getattr(parallel, "enable_expert_parallel", False) else "false",
        "prefix": prefix,
    }
    for name in ("tp_size", "tp_rank", "pp_size", "pp_rank", "dp_size", "dp_rank"):
        config[name] = str(int(ranks[name]))
    return config

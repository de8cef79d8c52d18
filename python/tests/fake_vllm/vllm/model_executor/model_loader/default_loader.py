"""DefaultModelLoader as in vLLM, for local safetensors checkpoints (read with numpy)."""

import glob
import json
import os
import shutil
import struct

import numpy as np

from vllm.model_executor.model_loader.base_loader import BaseModelLoader

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32,
           "U8": np.uint8, "I8": np.int8, "BOOL": np.bool_}


READS = []  # every checkpoint file opened in this process: a warm start opens none


def safetensors_iterator(path):
    READS.append(path)
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    # Tests only: the checkpoint changes under the load (a copy renamed over the file just read), as when
    # a training job writes the next step while an engine starts.
    if os.environ.get("FAKE_VLLM_REPLACE_AFTER_READ") == os.path.basename(path):
        shutil.copyfile(path, path + ".next")
        os.rename(path + ".next", path)
    # Tests only: "<file>:<link>:<target>": after <file> is read, the symlink <link> is retargeted to
    # <target> (a rename over it, as a deployment rolls `current -> v2`).
    retarget = os.environ.get("FAKE_VLLM_RETARGET_AFTER_READ", "").split(":")
    if len(retarget) == 3 and retarget[0] == os.path.basename(path):
        os.symlink(retarget[2], retarget[1] + ".next")
        os.rename(retarget[1] + ".next", retarget[1])
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        yield name, np.frombuffer(data[a:b], dtype=_DTYPES[h["dtype"]]).reshape(h["shape"])


class DefaultModelLoader(BaseModelLoader):
    def __init__(self, load_config):
        super().__init__(load_config)
        extra = load_config.model_loader_extra_config
        unexpected = set(extra) - {"enable_multithread_load", "num_threads", "enable_weights_track"}
        if unexpected:
            raise ValueError(f"Unexpected extra config keys for load format {load_config.load_format}: {unexpected}")

    def download_model(self, model_config):
        pass  # local paths only in the reproduction

    def load_weights(self, model, model_config):
        files = sorted(glob.glob(os.path.join(model_config.model, "*.safetensors")))
        if not files:
            raise RuntimeError(f"Cannot find any model weights with `{model_config.model}`")

        def weights():
            for f in files:
                yield from safetensors_iterator(f)
        loaded = model.load_weights(weights())
        missing = {n for n, _ in model.named_parameters()} - loaded
        if missing:
            raise ValueError(f"Following weights were not initialized from checkpoint: {sorted(missing)}")

"""fastrestart_vllm.tensors.TensorOps over numpy (backend.py's numpy side), for CI machines without torch.

The same contract as TorchOps: attached tensors come in through DLPack without a copy (read-only in
zero_copy mode), transposed views are published as their contiguous base plus a permutation.
"""

import numpy as np

import backend
from fastrestart_vllm.tensors import TensorOps, Unpublishable, stride_order


class NumpyOps(TensorOps):
    def meta_device(self):
        return backend.device("meta")

    def target(self, load_device):
        if str(load_device) != "cpu":
            raise ValueError("the numpy backend loads on cpu only, not %r" % (load_device,))
        return "cpu", "host"

    def import_tensor(self, t):
        # The binding's own numpy view: no copy, read-only in zero_copy mode and writable in copy mode
        # (numpy 1.x marks every DLPack import read-only, so np.from_dlpack cannot tell them apart).
        return t.numpy()

    def restore(self, x, spec):
        if "dtype" in spec:
            x = x.view(np.dtype(spec["dtype"])).reshape(spec["shape"])
        if "perm" in spec:
            x = x.transpose(spec["perm"])
        return x

    def prepare(self, x, device):
        if not isinstance(x, np.ndarray):
            raise Unpublishable("a %s, not an array" % type(x).__name__)
        x = np.asarray(x)  # drop the Parameter subclass: publish wants plain buffers
        spec = {}
        if not x.flags.c_contiguous:
            order, inverse = stride_order(x.strides, x.shape)
            base = x.transpose(order)
            if base.flags.c_contiguous:
                spec["perm"] = inverse
                x = base
            else:
                spec["relayout"] = True
                x = np.ascontiguousarray(x)
        return x, spec

    def parameter(self, x):
        return backend.parameter(x)

    def is_meta(self, x):
        return backend.is_meta(x)

    def bytes_array(self, data, device):
        return np.frombuffer(bytes(data), dtype=np.uint8)

    def to_bytes(self, x):
        return np.ascontiguousarray(x).tobytes()

    def nbytes(self, x):
        return int(x.nbytes)

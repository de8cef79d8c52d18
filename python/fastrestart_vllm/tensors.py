"""The tensor operations the loader needs, behind one small interface (a seam, as CONTRIBUTING.md asks).

vLLM always runs with torch, so TorchOps is the only production implementation. The seam exists so the
loader's logic (key, attach, bind, publish, fallback, the result line) runs in CI on machines without torch,
against a numpy implementation in the test tree (python/tests/fake_vllm/numpy_ops.py), while the GPU test
runs the same tests through TorchOps.

What a published tensor may need to round-trip exactly (`spec`, stored in the entry's metadata, state.py):
- a permutation: post-processing often leaves a transposed view (fp8 per-tensor stores ``weight.t()``);
  kernels depend on those strides, so the contiguous base is published and the view rebuilt on attach;
- raw bytes: DLPack cannot carry float8 and other exotic dtypes, so those travel as uint8 and are viewed
  back as their dtype;
- a CPU tensor of a CUDA model: published to the device, copied back to the CPU on attach.
"""

import contextlib

__all__ = ["TensorOps", "TorchOps", "Unpublishable", "current", "install"]


class Unpublishable(Exception):
    """This tensor (or model) cannot be published faithfully; the message says which and why."""


def stride_order(strides, shape):
    """For a tensor of these strides and shape: its dimensions from the largest stride to the smallest (the
    permutation whose view is contiguous when the tensor is a transposed view), and the inverse permutation
    (the spec's "perm", which rebuilds the view from that contiguous base)."""
    order = sorted(range(len(shape)), key=lambda d: (-strides[d], -shape[d]))
    inverse = [0] * len(order)
    for i, d in enumerate(order):
        inverse[d] = i
    return order, inverse


class TensorOps:
    """Interface. Framework tensors are opaque to the loader; only these functions touch them."""

    def meta_device(self):
        """A context manager under which vLLM's model constructor allocates no memory (meta tensors)."""
        raise NotImplementedError

    def target(self, load_device):
        """(framework device, engine_loader device string "host" or "cuda:N") for vLLM's load device."""
        raise NotImplementedError

    def import_tensor(self, t):
        """A framework tensor over an attached fastrestart.Tensor (DLPack, no copy)."""
        raise NotImplementedError

    def restore(self, x, spec):
        """Undo prepare(): the tensor the cold engine had, from the published base `x`."""
        raise NotImplementedError

    def prepare(self, x, device):
        """(publishable array on `device`, spec) for a final tensor `x`; raises Unpublishable."""
        raise NotImplementedError

    def parameter(self, x):
        """`x` as a frozen parameter (requires_grad False), sharing its memory; a parameter as it is."""
        raise NotImplementedError

    def is_meta(self, x):
        raise NotImplementedError


    def bytes_array(self, data, device):
        """A uint8 array holding `data` (bytes) on `device`, publishable."""
        raise NotImplementedError

    def to_bytes(self, x):
        """The bytes of a uint8 framework tensor (copied to the host if needed)."""
        raise NotImplementedError

    def nbytes(self, x):
        raise NotImplementedError

    def release_memory(self):
        """Give cached device memory back to the driver (after a failed warm path, before a cold load; after
        an adoption, the cold-loaded copy)."""


class TorchOps(TensorOps):
    # dtypes DLPack (and so fastrestart.publish) carries natively; anything else travels as bytes.
    _NATIVE = ("bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
               "float16", "bfloat16", "float32", "float64")

    def __init__(self):
        import torch
        self.torch = torch

    def meta_device(self):
        return self.torch.device("meta")

    def target(self, load_device):
        dev = self.torch.device(load_device)
        if dev.type == "cuda":
            index = dev.index if dev.index is not None else self.torch.cuda.current_device()
            return self.torch.device("cuda", index), "cuda:%d" % index
        return dev, "host"

    def import_tensor(self, t):
        return self.torch.from_dlpack(t)

    def restore(self, x, spec):
        torch = self.torch
        if "dtype" in spec:
            x = x.view(getattr(torch, spec["dtype"])).view(spec["shape"])
        if "perm" in spec:
            x = x.permute(spec["perm"])
        if spec.get("device") == "cpu":
            x = x.cpu()
        return x

    def prepare(self, x, device):
        torch = self.torch
        plain = type(x) is torch.Tensor or (isinstance(x, torch.nn.Parameter) and type(x.data) is torch.Tensor)
        if not plain:
            raise Unpublishable("a %s (tensor subclasses carry state a flat tensor cannot)" % type(x).__name__)
        if x.is_sparse or x.layout != torch.strided:
            raise Unpublishable("a %s tensor" % x.layout)
        x = x.detach()
        spec = {}
        if x.device.type == "cpu" and device != "host":
            spec["device"] = "cpu"
            x = x.to(torch.device(device))
        if not x.is_contiguous():
            order, inverse = stride_order(x.stride(), x.shape)
            base = x.permute(order)
            if base.is_contiguous():
                spec["perm"] = inverse
                x = base
            else:
                spec["relayout"] = True  # a strided slice: published dense, strides differ after attach
                x = x.contiguous()
        name = str(x.dtype).replace("torch.", "")
        if name not in self._NATIVE:
            spec["dtype"] = name
            spec["shape"] = list(x.shape)
            x = x.reshape(-1).view(torch.uint8)
        return x, spec

    def parameter(self, x):
        nn = self.torch.nn
        return x if isinstance(x, nn.Parameter) else nn.Parameter(x, requires_grad=False)

    def is_meta(self, x):
        return x.device.type == "meta"

    def bytes_array(self, data, device):
        torch = self.torch
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return t if device == "host" else t.to(torch.device(device))

    def to_bytes(self, x):
        return x.cpu().numpy().tobytes()

    def nbytes(self, x):
        return x.numel() * x.element_size()

    def release_memory(self):
        if self.torch.cuda.is_available():
            self.torch.cuda.empty_cache()


_current = None


def current():
    """The installed TensorOps; TorchOps unless a test installed another."""
    global _current
    if _current is None:
        _current = TorchOps()
    return _current


def install(ops):
    """Make `ops` the TensorOps of every loader in this process (tests without torch). Returns the previous."""
    global _current
    previous, _current = _current, ops
    return previous


@contextlib.contextmanager
def installed(ops):
    previous = install(ops)
    try:
        yield ops
    finally:
        install(previous)

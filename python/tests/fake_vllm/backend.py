"""Tensors for the vLLM reproduction: real torch when it is importable (the GPU test), else numpy (CI).

FAKE_VLLM_BACKEND=torch|numpy forces one. The numpy side reproduces the few torch.nn.Module behaviours
the loader relies on (named_modules/parameters/buffers with remove_duplicate, _parameters/_buffers,
register_parameter/register_buffer, non-persistent buffers) and meta tensors (shape and dtype, no data).
It is a test double of torch, in the test tree only; the loader reaches it through the TensorOps seam.
"""

import contextlib
import os

import numpy as np

_choice = os.environ.get("FAKE_VLLM_BACKEND", "")
if not _choice:
    try:
        import torch  # noqa: F401
        _choice = "torch"
    except ImportError:
        _choice = "numpy"
NAME = _choice

if NAME == "torch":
    import torch

    Module = torch.nn.Module
    device = torch.device
    get_default_dtype = torch.get_default_dtype
    set_default_dtype = torch.set_default_dtype

    def dtype(name):
        return getattr(torch, name)

    def empty(shape, dtype=None):
        return torch.empty(shape, dtype=dtype)

    def parameter(x):
        return torch.nn.Parameter(x, requires_grad=False)

    def is_parameter(x):
        return isinstance(x, torch.nn.Parameter)

    def copy_into(param, array):
        param.data.copy_(torch.from_numpy(np.ascontiguousarray(array)).to(param.dtype))

    def to_numpy(x):
        return x.detach().float().cpu().numpy().astype(np.float64)

    def transpose(x):
        return x.t()

    def quantize(w):
        """(quantized, scale): float8_e4m3fn, a dtype DLPack cannot carry (travels as bytes)."""
        scale = w.detach().abs().max().float() / 448.0
        return (w / scale).to(torch.float8_e4m3fn), scale.reshape(1)

    def from_float(values, like):
        return torch.tensor(values, dtype=torch.float32, device=like.device)

    def is_meta(x):
        return x.device.type == "meta"

    def data_ptr(x):
        return x.data_ptr()

    def writeable(x):
        return None  # torch does not track it

else:
    class MetaArray:
        """A tensor on the meta device: shape and dtype, no memory."""

        def __init__(self, shape, dtype):
            self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    class MetaParameter(MetaArray):
        pass

    class Parameter(np.ndarray):
        """A numpy array marked as a parameter; shares memory (and the read-only flag) with its source."""

    _state = {"meta": False, "dtype": np.dtype(np.float32)}

    @contextlib.contextmanager
    def device(name):
        if name not in ("cpu", "meta"):
            raise ValueError("the numpy backend has cpu and meta only, not %r" % name)
        old = _state["meta"]
        _state["meta"] = name == "meta"
        try:
            yield
        finally:
            _state["meta"] = old

    def get_default_dtype():
        return _state["dtype"]

    def set_default_dtype(d):
        _state["dtype"] = np.dtype(d)

    def dtype(name):
        return np.dtype(name)

    def empty(shape, dtype=None):
        d = np.dtype(dtype or _state["dtype"])
        return MetaArray(shape, d) if _state["meta"] else np.zeros(shape, d)

    def parameter(x):
        if isinstance(x, MetaArray):
            return MetaParameter(x.shape, x.dtype)
        return x if isinstance(x, Parameter) else x.view(Parameter)

    def is_parameter(x):
        return isinstance(x, (Parameter, MetaParameter))

    def copy_into(param, array):
        param[...] = array

    def to_numpy(x):
        return np.asarray(x, dtype=np.float64)

    def transpose(x):
        return x.T  # a view with swapped strides, as torch's .t()

    def quantize(w):
        scale = np.float32(np.abs(w).max() / 127.0)
        return np.round(w / scale).astype(np.int8), np.array([scale], np.float32)

    def from_float(values, like):
        return np.array(values, np.float32)

    def is_meta(x):
        return isinstance(x, MetaArray)

    def data_ptr(x):
        return x.__array_interface__["data"][0]

    def writeable(x):
        return bool(x.flags.writeable)

    class Module:
        """The part of torch.nn.Module the loader and the reproduction use."""

        def __init__(self):
            object.__setattr__(self, "_parameters", {})
            object.__setattr__(self, "_buffers", {})
            object.__setattr__(self, "_modules", {})
            object.__setattr__(self, "_non_persistent_buffers_set", set())
            object.__setattr__(self, "training", True)

        def __setattr__(self, name, value):
            if is_parameter(value):
                self.__dict__.pop(name, None)
                self._buffers.pop(name, None)
                self._parameters[name] = value
            elif isinstance(value, Module):
                self._modules[name] = value
            elif name in self._parameters:
                if value is not None:
                    raise TypeError("cannot assign %s as parameter %r" % (type(value).__name__, name))
                self._parameters[name] = None
            elif name in self._buffers:
                self._buffers[name] = value
            else:
                object.__setattr__(self, name, value)

        def __getattr__(self, name):
            for store in ("_parameters", "_buffers", "_modules"):
                d = self.__dict__.get(store)
                if d is not None and name in d:
                    return d[name]
            raise AttributeError("%s has no attribute %r" % (type(self).__name__, name))

        def __delattr__(self, name):
            for store in (self._parameters, self._buffers, self._modules):
                if name in store:
                    del store[name]
                    return
            object.__delattr__(self, name)

        def register_parameter(self, name, param):
            if hasattr(self, name) and name not in self._parameters:
                raise KeyError("attribute '%s' already exists" % name)
            if param is not None and not is_parameter(param):
                raise TypeError("cannot assign %s as parameter %r" % (type(param).__name__, name))
            self._parameters[name] = param

        def register_buffer(self, name, tensor, persistent=True):
            if hasattr(self, name) and name not in self._buffers:
                raise KeyError("attribute '%s' already exists" % name)
            self._buffers[name] = tensor
            if persistent:
                self._non_persistent_buffers_set.discard(name)
            else:
                self._non_persistent_buffers_set.add(name)

        def named_modules(self, memo=None, prefix="", remove_duplicate=True):
            if memo is None:
                memo = set()
            if remove_duplicate and id(self) in memo:
                return
            memo.add(id(self))
            yield prefix, self
            for name, m in self._modules.items():
                if m is not None:
                    yield from m.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

        def _named(self, store, remove_duplicate):
            seen = set()
            for mprefix, m in self.named_modules(remove_duplicate=remove_duplicate):
                for k, v in getattr(m, store).items():
                    if v is None or (remove_duplicate and id(v) in seen):
                        continue
                    seen.add(id(v))
                    yield mprefix + ("." if mprefix else "") + k, v

        def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
            return self._named("_parameters", remove_duplicate)

        def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
            return self._named("_buffers", remove_duplicate)

        def eval(self):
            for _, m in self.named_modules():
                object.__setattr__(m, "training", False)
            return self


def replace_parameter(layer, name, x):
    """vLLM's replace_parameter: a new parameter under an existing name (post-processing does this)."""
    if name in layer._parameters:
        del layer._parameters[name]
    layer.register_parameter(name, parameter(x))


def rows(param, start, stop):
    """A writable view of rows start..stop of a parameter (the weight loader fills fused parameters so)."""
    return param.data[start:stop] if NAME == "torch" else param[start:stop]


def rotary_cache(positions, width):
    """A non-persistent buffer computed at construction (like vLLM's rotary cos/sin cache): meta under the
    meta device, real values otherwise."""
    if NAME == "torch":
        pos = torch.arange(positions, dtype=torch.float32)
        freq = torch.arange(width, dtype=torch.float32) / width
        return torch.cos(torch.outer(pos, freq))
    shape = (positions, width)
    if _state["meta"]:
        return MetaArray(shape, np.float32)
    return np.cos(np.outer(np.arange(positions, dtype=np.float32),
                           np.arange(width, dtype=np.float32) / width)).astype(np.float32)

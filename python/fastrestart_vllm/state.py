"""A model's final tensors out (publish) and back in (attach): the layout LAYOUT (cache_key.py) names.

An entry holds every parameter and buffer of the post-processed model under its module path (what vLLM's
weight-cache daemon exports too), each tied tensor once, plus one uint8 tensor named META_NAME holding JSON:

    {"layout": 1,
     "tensors": {"model.layers.0.mlp.w.weight": {"kind": "param", "perm": [1, 0]}, ...},
     "aliases": {"lm_head.weight": "model.embed_tokens.weight"},
     "buffers_not_persistent": ["model.rotary_emb.cos_sin_cache"]}

`kind` says how to register it (parameter or buffer); the other spec fields are TensorOps.prepare()'s.
Binding registers each tensor on its module by name, replacing whatever the meta-built model had there
(post-processing may change shapes and add tensors the constructor never made), and ties aliases to the
same object, as vLLM's ipc_cache loader does.
"""

import json

from .tensors import Unpublishable

__all__ = ["META_NAME", "BindError", "export_state", "bind_state", "drop_meta", "check_rebuildable"]

META_NAME = "__fastrestart_vllm__"
_LAYOUT = 1


class BindError(Exception):
    """The attached entry does not fit this model; the message names the tensor."""


def export_state(model, ops, device):
    """(tensors: name -> publishable array, count, nbytes, relaid) for publish(); `relaid` names the
    tensors published dense although they were strided views (an attach gives them other strides).
    Raises Unpublishable."""
    arrays, specs, aliases, not_persistent = {}, {}, {}, []
    canonical = {}  # id(tensor) -> name
    modules = dict(model.named_modules(remove_duplicate=False))

    def add(name, x, kind):
        first = canonical.get(id(x))
        if first is not None:
            aliases[name] = first
            return
        canonical[id(x)] = name
        if ops.is_meta(x):
            raise Unpublishable("%s is still on the meta device after loading" % name)
        try:
            arrays[name], spec = ops.prepare(x, device)
        except Unpublishable as e:
            raise Unpublishable("%s: %s" % (name, e)) from None
        spec["kind"] = kind
        specs[name] = spec
        if kind == "buffer":
            module_name, _, leaf = name.rpartition(".")
            if leaf in getattr(modules.get(module_name), "_non_persistent_buffers_set", ()):
                not_persistent.append(name)

    for name, p in model.named_parameters(remove_duplicate=False):
        add(name, p, "param")
    for name, b in model.named_buffers(remove_duplicate=False):
        if name not in specs and name not in aliases:
            add(name, b, "buffer")
    if META_NAME in arrays:
        raise Unpublishable("the model has a tensor named %s" % META_NAME)
    nbytes = sum(ops.nbytes(a) for a in arrays.values())
    relaid = sorted(n for n, spec in specs.items() if spec.get("relayout"))
    meta = {"layout": _LAYOUT, "tensors": specs, "aliases": aliases, "buffers_not_persistent": not_persistent}
    arrays[META_NAME] = ops.bytes_array(json.dumps(meta, sort_keys=True).encode(), device)
    return arrays, len(specs), nbytes, relaid


def _register(modules, name, x, kind, persistent, ops):
    module_name, _, leaf = name.rpartition(".")
    module = modules.get(module_name)
    if module is None:
        raise BindError("cached tensor %s: this model has no module %r" % (name, module_name))
    module._parameters.pop(leaf, None)
    module._buffers.pop(leaf, None)
    if leaf in getattr(module, "_modules", {}):
        raise BindError("cached tensor %s: %r is a submodule in this model" % (name, leaf))
    if hasattr(module, leaf):
        delattr(module, leaf)  # a plain attribute (e.g. a None placeholder): the cold engine had a tensor here
    if kind == "param":
        obj = ops.parameter(x)
        module.register_parameter(leaf, obj)
    else:
        obj = x
        module.register_buffer(leaf, obj, persistent=persistent)
    return obj


def bind_state(model, attached, ops):
    """Register the attached tensors (name -> fastrestart.Tensor) on the meta-built `model`, no copy.
    Returns (tensors bound, bytes). Raises BindError when the entry does not fit."""
    if META_NAME not in attached:
        raise BindError("the entry has no %s tensor: it was not published by this plugin" % META_NAME)
    try:
        meta = json.loads(ops.to_bytes(ops.import_tensor(attached[META_NAME])).decode())
        specs, aliases = meta["tensors"], meta["aliases"]
        not_persistent = set(meta.get("buffers_not_persistent", ()))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise BindError("unreadable %s: %s" % (META_NAME, e)) from None
    if meta.get("layout") != _LAYOUT:
        raise BindError("%s: layout %r, this plugin reads %d" % (META_NAME, meta.get("layout"), _LAYOUT))
    extra = sorted(set(attached) - set(specs) - {META_NAME})
    if extra:
        raise BindError("the entry holds %s, which its metadata does not describe" % extra[0])
    modules = dict(model.named_modules(remove_duplicate=False))
    registered, nbytes = {}, 0
    for name, spec in specs.items():
        t = attached.get(name)
        if t is None:
            raise BindError("the entry lacks %s, which its metadata lists" % name)
        nbytes += t.nbytes
        x = ops.restore(ops.import_tensor(t), spec)
        registered[name] = _register(modules, name, x, spec["kind"], name not in not_persistent, ops)
    for alias, first in aliases.items():
        if first not in registered:
            raise BindError("alias %s names %s, which the entry lacks" % (alias, first))
        kind = specs[first]["kind"]
        _register(modules, alias, registered[first], kind, alias not in not_persistent, ops)
    return len(registered), nbytes


def drop_meta(model, ops):
    """Set every tensor still on the meta device to None; returns their names.

    The entry holds every tensor the cold engine ended with, so one still on meta is a placeholder the
    cold engine's post-processing consumed (deleted or set to None): the cold model had no tensor there.
    None keeps that true; a read fails at once instead of seeing uninitialized memory (vLLM's ipc_cache
    loader allocates empty memory there instead)."""
    left = []
    for module_name, module in model.named_modules():
        for store in (module._parameters, module._buffers):
            for leaf, x in list(store.items()):
                if x is not None and ops.is_meta(x):
                    store[leaf] = None
                    left.append((module_name + "." if module_name else "") + leaf)
    return left


def check_rebuildable(model):
    """None when every quantization method of `model` can rebuild its runtime state from already
    post-processed tensors (vLLM's `supports_pre_processed_weights`, checked again by vLLM on attach);
    otherwise a reason naming the first module and method that cannot (publishing would waste memory:
    the warm path would fail on it every time)."""
    for name, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        # Only an explicit False is known to fail; vLLM's own check on attach covers the rest.
        if method is not None and getattr(method, "supports_pre_processed_weights", None) is False:
            return "%s uses %s, which does not support pre-processed weights (supports_pre_processed_weights)" % (
                name or "the model", type(method).__name__)
    return None

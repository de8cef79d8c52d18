"""A model's final tensors out (publish) and back in (attach): the layout LAYOUT (cache_key.py) names.

An entry holds every parameter and buffer of the post-processed model under its module path (what vLLM's
weight-cache daemon exports too), each tied tensor once, plus one uint8 tensor named META_NAME holding JSON:

    {"layout": 1,
     "tensors": {"model.layers.0.mlp.w.weight": {"kind": "param", "perm": [1, 0]}, ...},
     "aliases": {"lm_head.weight": "model.embed_tokens.weight"},
     "buffers_not_persistent": ["model.rotary_emb.cos_sin_cache"],
     "attrs": {"has_own_embed_tokens": false}}

`kind` says how to register it (parameter or buffer); the other spec fields are TensorOps.prepare()'s.
Binding registers each tensor on its module by name, replacing whatever the meta-built model had there
(post-processing may change shapes and add tensors the constructor never made), and ties aliases to the
same object, as vLLM's ipc_cache loader does (vllm/model_executor/model_loader/weight_cache/ipc_loader.py,
IpcModelLoader._apply_entries).

Two things a tensor cannot carry are restored too, again as that loader does:
- references taken by value: an object that is not a module but captured a parameter when the model was
  built (DeepSeek's MoE router holds `e_score_correction_bias` so) keeps the meta placeholder that binding
  replaced; rebind_stale_references() finds such holders and points them at the bound tensor;
- attributes `load_weights` sets on the model (LOAD_ATTRS: an EAGLE draft says there whether it owns
  `embed_tokens` and `lm_head` or shares the target's): published under "attrs", set again on attach.
"""

import collections
import json
import logging
import types

from .tensors import Unpublishable

logger = logging.getLogger("vllm.fastrestart_vllm")

__all__ = ["META_NAME", "LOAD_ATTRS", "BindError", "export_state", "bind_state", "rebind_stale_references",
           "drop_meta", "check_rebuildable"]

META_NAME = "__fastrestart_vllm__"
_LAYOUT = 1
# Attributes of the root model that its load_weights() sets and a warm start (which never runs load_weights)
# must set again: vLLM's EAGLE/MTP drafts record there whether the checkpoint had its own embedding and
# LM head; the proposer shares the target's when it did not.
LOAD_ATTRS = ("has_own_embed_tokens", "has_own_lm_head")
_ATTR_TYPES = (bool, int, float, str, type(None))
# The stale-reference walk stops after this many objects (a model graph is far smaller; past it the walk
# warns and ends rather than running unbounded, as vLLM's does).
_REBIND_NODE_BOUND = 200_000
_MODULE_STORES = frozenset(("_parameters", "_buffers", "_modules"))


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
    attrs = {}
    for attr in LOAD_ATTRS:
        value = model.__dict__.get(attr)
        if attr in model.__dict__ and not isinstance(value, _ATTR_TYPES):
            raise Unpublishable("model attribute %s is a %s, not a JSON scalar" % (attr, type(value).__name__))
        if attr in model.__dict__:
            attrs[attr] = value
    meta = {"layout": _LAYOUT, "tensors": specs, "aliases": aliases, "buffers_not_persistent": not_persistent,
            "attrs": attrs}
    arrays[META_NAME] = ops.bytes_array(json.dumps(meta, sort_keys=True).encode(), device)
    return arrays, len(specs), nbytes, relaid


def _register(modules, name, x, kind, persistent, ops, stale):
    """Register `x` as `name`; the object it replaces goes into `stale` (id -> (old, new)) for the sweep."""
    module_name, _, leaf = name.rpartition(".")
    module = modules.get(module_name)
    if module is None:
        raise BindError("cached tensor %s: this model has no module %r" % (name, module_name))
    old = module._parameters.get(leaf)
    if old is None:
        old = module._buffers.get(leaf)
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
    if old is not None and old is not obj and id(old) not in stale:
        stale[id(old)] = (old, obj)  # holding `old` keeps its id from being reused before the sweep
    return obj


def bind_state(model, attached, ops):
    """Register the attached tensors (name -> fastrestart.Tensor) on the meta-built `model`, no copy, rebind
    the references the registration could not reach and set the published LOAD_ATTRS.
    Returns (tensors bound, bytes, holders rebound). Raises BindError when the entry does not fit."""
    if META_NAME not in attached:
        raise BindError("the entry has no %s tensor: it was not published by this plugin" % META_NAME)
    try:
        meta = json.loads(ops.to_bytes(ops.import_tensor(attached[META_NAME])).decode())
        specs, aliases = meta["tensors"], meta["aliases"]
        not_persistent = set(meta.get("buffers_not_persistent", ()))
        attrs = dict(meta.get("attrs", {}))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise BindError("unreadable %s: %s" % (META_NAME, e)) from None
    if meta.get("layout") != _LAYOUT:
        raise BindError("%s: layout %r, this plugin reads %d" % (META_NAME, meta.get("layout"), _LAYOUT))
    extra = sorted(set(attached) - set(specs) - {META_NAME})
    if extra:
        raise BindError("the entry holds %s, which its metadata does not describe" % extra[0])
    unknown = sorted(set(attrs) - set(LOAD_ATTRS))
    if unknown:
        raise BindError("%s: attribute %s is not one this plugin restores" % (META_NAME, unknown[0]))
    modules = dict(model.named_modules(remove_duplicate=False))
    registered, nbytes, stale = {}, 0, {}
    for name, spec in specs.items():
        t = attached.get(name)
        if t is None:
            raise BindError("the entry lacks %s, which its metadata lists" % name)
        nbytes += t.nbytes
        x = ops.restore(ops.import_tensor(t), spec)
        registered[name] = _register(modules, name, x, spec["kind"], name not in not_persistent, ops, stale)
    for alias, first in aliases.items():
        if first not in registered:
            raise BindError("alias %s names %s, which the entry lacks" % (alias, first))
        kind = specs[first]["kind"]
        _register(modules, alias, registered[first], kind, alias not in not_persistent, ops, stale)
    holders = rebind_stale_references(modules, stale)
    for attr, value in attrs.items():
        object.__setattr__(model, attr, value)  # a plain attribute, as load_weights leaves it
    return len(registered), nbytes, holders


def _scannable(value):
    """Whether the walk looks into value.__dict__: plain instances, not primitives, functions, classes,
    modules or the tensor libraries' own objects (their state holds no model tensors)."""
    if isinstance(value, (bool, int, float, complex, str, bytes, type, types.FunctionType,
                          types.BuiltinFunctionType, types.MethodType, types.CodeType, types.ModuleType)):
        return False
    owner = (type(value).__module__ or "").split(".")[0]
    if owner in ("torch", "numpy"):
        return False
    return isinstance(getattr(value, "__dict__", None), dict)


def rebind_stale_references(modules, stale):
    """Point by-value holders of replaced tensors at their replacements; returns the holders' paths.

    `modules`: name -> module of the model; `stale`: id(old object) -> (old, new). Breadth first from every
    module: each plain attribute (never the module's own _parameters/_buffers/_modules, which registration
    set) that is a replaced object is rebound; so is one inside a dict, list or tuple attribute (one level);
    other plain objects (not modules, not tensors) are walked in turn. vLLM's ipc_cache loader sweeps the
    same way (_rebind_stale_references); without it a router built with the meta placeholder keeps it and
    the first forward pass after a hit crashes."""
    if not stale:
        return []

    def fresh(value):
        hit = stale.get(id(value))
        return hit[1] if hit is not None and hit[0] is value else None

    seen, queue = set(), collections.deque()
    for path, module in modules.items():
        if id(module) not in seen:
            seen.add(id(module))
            queue.append((module, path))
    holders, nodes = [], 0
    while queue:
        nodes += 1
        if nodes > _REBIND_NODE_BOUND:
            logger.warning("fastrestart: the stale-reference walk stopped after %d objects (%d rebound)",
                           _REBIND_NODE_BOUND, len(holders))
            break
        owner, owner_path = queue.popleft()
        for key, value in list(owner.__dict__.items()):
            if key in _MODULE_STORES:
                continue
            path = "%s.%s" % (owner_path, key) if owner_path else key
            new = fresh(value)
            if new is not None:
                owner.__dict__[key] = new  # the raw slot: setattr on a module would register a parameter
                holders.append(path)
            elif isinstance(value, dict):
                for k, v in list(value.items()):
                    new = fresh(v)
                    if new is not None:
                        value[k] = new
                        holders.append("%s[%r]" % (path, k))
            elif isinstance(value, list):
                for i, v in enumerate(value):
                    new = fresh(v)
                    if new is not None:
                        value[i] = new
                        holders.append("%s[%d]" % (path, i))
            elif isinstance(value, tuple):
                news = [fresh(v) for v in value]  # never `fresh(v) or v`: a tensor has no truth value
                if any(n is not None for n in news):
                    holders.extend("%s[%d]" % (path, i) for i, n in enumerate(news) if n is not None)
                    owner.__dict__[key] = tuple(v if n is None else n for v, n in zip(value, news))
            elif id(value) not in seen and not _is_module(value) and _scannable(value):
                seen.add(id(value))
                queue.append((value, path))
    return holders


def _is_module(value):
    # Modules are walked from `modules` already; a module reached through an attribute is one of them. Read
    # from the instance dict: hasattr() would run an arbitrary object's __getattr__.
    d = getattr(value, "__dict__", None)
    return isinstance(d, dict) and all(store in d for store in _MODULE_STORES)


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

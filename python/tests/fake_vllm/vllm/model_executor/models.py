"""TinyForCausalLM: the smallest model with what matters to a loader (see vllm/__init__.py).

Checkpoint names (safetensors): model.embed_tokens.weight, model.norm.weight,
model.layers.<i>.mlp.{gate_proj,up_proj,down_proj}.weight (+ lm_head.weight when not tied).
Model parameters: gate_proj and up_proj fill one fused gate_up_proj.weight; lm_head.weight IS
model.embed_tokens.weight when tie_word_embeddings; model.rotary.cos_sin_cache is a non-persistent buffer
computed at construction. Each layer's mlp.gate.e_score_correction_bias (in the checkpoint) is also held
BY VALUE by a Router, a plain object built with the model, as vLLM's GroupedTopKRouter holds DeepSeek's
bias (vllm/model_executor/layers/fused_moe): a loader that replaces the parameter object leaves the router
with the old one. load_weights() sets has_own_embed_tokens / has_own_lm_head on the model from what the
checkpoint holds, as vLLM's EAGLE drafts do; the constructor leaves them False. Forward runs in numpy float64 on whatever the parameters hold, so two loads of
the same weights give bit-identical logits, whatever the backend.
"""

import numpy as np

import backend
from vllm.model_executor.utils import is_weights_pre_processed


class UnquantizedMethod:
    supports_pre_processed_weights = True

    def create_weights(self, layer, in_features, out_features, dtype):
        layer.register_parameter("weight", backend.parameter(backend.empty((out_features, in_features), dtype)))

    def process_weights_after_loading(self, layer):
        pass

    def apply(self, layer, x):
        return x @ backend.to_numpy(layer.weight).T


class ToyQuantMethod:
    """Online quantization like fp8 per-tensor: the checkpoint is in the model dtype; post-processing
    quantizes, stores the weight TRANSPOSED (a non-contiguous view), adds weight_scale, drops the
    input_scale placeholder, and keeps the scale as a Python float (state tensors do not carry)."""
    supports_pre_processed_weights = True

    def create_weights(self, layer, in_features, out_features, dtype):
        layer.register_parameter("weight", backend.parameter(backend.empty((out_features, in_features), dtype)))
        layer.register_parameter("input_scale", backend.parameter(backend.empty((1,), backend.dtype("float32"))))

    def process_weights_after_loading(self, layer):
        if is_weights_pre_processed():
            layer.scale_float = float(backend.to_numpy(layer.weight_scale)[0])  # rebuild Python-side state
            return
        q, scale = backend.quantize(layer.weight.data if backend.NAME == "torch" else layer.weight)
        backend.replace_parameter(layer, "weight", backend.transpose(q))
        layer.register_parameter("weight_scale", backend.parameter(scale))
        del layer.input_scale
        layer.scale_float = float(backend.to_numpy(scale)[0])

    def apply(self, layer, x):
        return x @ (backend.to_numpy(layer.weight) * layer.scale_float)


class ToyQuantNoPreMethod(ToyQuantMethod):
    supports_pre_processed_weights = False


QUANT_METHODS = {None: UnquantizedMethod, "toy": ToyQuantMethod, "toy_nopre": ToyQuantNoPreMethod}


class Linear(backend.Module):
    def __init__(self, in_features, out_features, quantization, dtype):
        super().__init__()
        self.quant_method = QUANT_METHODS[quantization]()
        self.quant_method.create_weights(self, in_features, out_features, dtype)

    def forward(self, x):
        return self.quant_method.apply(self, x)


class Holder(backend.Module):
    """A module that only holds tensors (embedding, norm, lm_head, rotary)."""


class Router:
    """Not a module: it keeps the bias tensor it was built with (by value), like GroupedTopKRouter."""

    def __init__(self, e_score_correction_bias):
        self.e_score_correction_bias = e_score_correction_bias

    def route(self, x):
        return x + backend.to_numpy(self.e_score_correction_bias)


class Mlp(backend.Module):
    def __init__(self, hidden, quantization, dtype):
        super().__init__()
        self.gate_up_proj = Linear(hidden, 2 * hidden, quantization, dtype)
        self.down_proj = Linear(hidden, hidden, quantization, dtype)
        self.gate = Holder()
        self.gate.register_parameter("e_score_correction_bias", backend.parameter(backend.empty((hidden,), dtype)))
        self.router = Router(self.gate.e_score_correction_bias)


class Layer(backend.Module):
    def __init__(self, hidden, quantization, dtype):
        super().__init__()
        self.mlp = Mlp(hidden, quantization, dtype)


class Inner(backend.Module):
    def __init__(self, c, quantization, dtype):
        super().__init__()
        self.embed_tokens = Holder()
        self.embed_tokens.register_parameter("weight", backend.parameter(backend.empty((c.vocab_size, c.hidden_size), dtype)))
        self.layers = Holder()
        for i in range(c.num_layers):
            setattr(self.layers, str(i), Layer(c.hidden_size, quantization, dtype))
        self.norm = Holder()
        self.norm.register_parameter("weight", backend.parameter(backend.empty((c.hidden_size,), dtype)))
        self.rotary = Holder()
        self.rotary.register_buffer("cos_sin_cache", backend.rotary_cache(c.max_position, c.hidden_size),
                                    persistent=False)


class TinyForCausalLM(backend.Module):
    def __init__(self, *, vllm_config, prefix=""):
        super().__init__()
        mc = vllm_config.model_config
        c = mc.hf_config
        dtype = backend.get_default_dtype()
        self.config = c
        self.model = Inner(c, mc.quantization, dtype)
        self.lm_head = Holder()
        if getattr(c, "tie_word_embeddings", False):
            self.lm_head.register_parameter("weight", self.model.embed_tokens.weight)  # the same object
        else:
            self.lm_head.register_parameter("weight", backend.parameter(backend.empty((c.vocab_size, c.hidden_size), dtype)))
        self.has_own_embed_tokens = False
        self.has_own_lm_head = False

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        h = self.config.hidden_size
        loaded = set()
        for name, array in weights:
            if name == "model.embed_tokens.weight":
                self.has_own_embed_tokens = True
            elif name == "lm_head.weight":
                self.has_own_lm_head = True
            for part, start in (("gate_proj", 0), ("up_proj", h)):
                if ".mlp.%s." % part in name:
                    target = name.replace(part, "gate_up_proj")
                    backend.copy_into(backend.rows(params[target], start, start + h), array)
                    loaded.add(target)
                    break
            else:
                if name not in params:
                    raise KeyError("checkpoint tensor %s has no parameter" % name)
                backend.copy_into(params[name].data if backend.NAME == "torch" else params[name], array)
                loaded.add(name)
        for name, _ in self.named_modules():
            if name.endswith("proj") and isinstance(getattr(self.get(name), "quant_method", None), ToyQuantMethod):
                loaded.add(name + ".input_scale")  # filled by post-processing, not the checkpoint
        return loaded

    def get(self, dotted):
        m = self
        for part in dotted.split("."):
            m = getattr(m, part)
        return m

    def forward(self, ids):
        """Logits (numpy float64) for token ids at positions 0..len-1."""
        ids = np.asarray(ids)
        x = backend.to_numpy(self.model.embed_tokens.weight)[ids]
        x = x + backend.to_numpy(self.model.rotary.cos_sin_cache)[: len(ids)]
        h = self.config.hidden_size
        for i in range(self.config.num_layers):
            mlp = getattr(self.model.layers, str(i)).mlp
            gu = mlp.gate_up_proj.forward(mlp.router.route(x))
            x = x + mlp.down_proj.forward(np.tanh(gu[:, :h]) * gu[:, h:])
        x = x * backend.to_numpy(self.model.norm.weight)
        return x @ backend.to_numpy(self.lm_head.weight).T


_ARCHS = {"TinyForCausalLM": TinyForCausalLM}


def resolve_model_cls(architectures):
    for a in architectures:
        if a in _ARCHS:
            return _ARCHS[a]
    raise ValueError("Model architectures %s are not supported by the reproduction" % architectures)

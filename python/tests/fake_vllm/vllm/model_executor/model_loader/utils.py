"""initialize_model and process_weights_after_loading as in vLLM."""

from vllm.model_executor.utils import is_weights_pre_processed


def initialize_model(vllm_config, *, prefix="", model_class=None, model_config=None):
    from vllm.model_executor.models import resolve_model_cls
    model_config = model_config or vllm_config.model_config
    model_class = model_class or resolve_model_cls(model_config.hf_config.architectures)
    return model_class(vllm_config=vllm_config, prefix=prefix)


def process_weights_after_loading(model, model_config, target_device):
    for name, module in model.named_modules():
        quant_method = getattr(module, "quant_method", None)
        if quant_method is None:
            continue
        if is_weights_pre_processed() and not getattr(quant_method, "supports_pre_processed_weights", False):
            raise RuntimeError(f"{type(quant_method).__name__} of {name} does not support pre-processed weights")
        quant_method.process_weights_after_loading(module)

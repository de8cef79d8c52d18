"""register_model_loader / get_model_loader / get_model, as in vLLM (built-in formats resolved lazily)."""

import logging

from vllm.model_executor.model_loader.base_loader import BaseModelLoader

logger = logging.getLogger(__name__)

_LAZY_LOAD_FORMATS = {"auto": "default_loader", "safetensors": "default_loader"}
_LOAD_FORMAT_TO_MODEL_LOADER = {}


def register_model_loader(load_format):
    def _wrapper(model_loader_cls):
        if load_format in _LOAD_FORMAT_TO_MODEL_LOADER or load_format in _LAZY_LOAD_FORMATS:
            logger.warning("Load format `%s` is already registered, and will be overwritten by %s",
                           load_format, model_loader_cls)
        if not issubclass(model_loader_cls, BaseModelLoader):
            raise ValueError("The model loader must be a subclass of `BaseModelLoader`.")
        _LOAD_FORMAT_TO_MODEL_LOADER[load_format] = model_loader_cls
        return model_loader_cls
    return _wrapper


def _get_loader_cls(load_format):
    if load_format in _LOAD_FORMAT_TO_MODEL_LOADER:
        return _LOAD_FORMAT_TO_MODEL_LOADER[load_format]
    if load_format in _LAZY_LOAD_FORMATS:
        from vllm.model_executor.model_loader.default_loader import DefaultModelLoader
        return DefaultModelLoader
    raise ValueError(f"Load format `{load_format}` is not supported")


def get_model_loader(load_config):
    return _get_loader_cls(load_config.load_format)(load_config)


def get_model(*, vllm_config, model_config=None, prefix="", load_config=None):
    loader = get_model_loader(load_config or vllm_config.load_config)
    return loader.load_model(vllm_config=vllm_config, model_config=model_config or vllm_config.model_config,
                             prefix=prefix)

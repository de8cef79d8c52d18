"""BaseModelLoader as in vLLM: two abstract methods and load_model() built on them."""

from abc import ABC, abstractmethod

import backend
from vllm.model_executor.model_loader.utils import initialize_model, process_weights_after_loading
from vllm.utils.torch_utils import set_default_torch_dtype


class BaseModelLoader(ABC):
    def __init__(self, load_config):
        self.load_config = load_config

    @abstractmethod
    def download_model(self, model_config):
        raise NotImplementedError

    @abstractmethod
    def load_weights(self, model, model_config):
        raise NotImplementedError

    def load_model(self, vllm_config, model_config, prefix=""):
        load_device = vllm_config.device_config.device if self.load_config.device is None else self.load_config.device
        with set_default_torch_dtype(model_config.dtype):
            with backend.device(load_device):
                model = initialize_model(vllm_config=vllm_config, model_config=model_config, prefix=prefix)
            self.load_weights(model, model_config)
            process_weights_after_loading(model, model_config, backend.device(load_device))
        return model.eval()

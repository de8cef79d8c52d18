import os


def __getattr__(name):
    if name == "VLLM_PLUGINS":
        v = os.environ.get("VLLM_PLUGINS")
        return None if v is None else v.split(",")
    raise AttributeError(name)

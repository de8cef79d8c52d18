"""NOT uvicorn: the two names vLLM's API server takes from it (Config, Server), reduced to how they treat a
socket they are given (encode/uvicorn: uvicorn/config.py Config, uvicorn/server.py Server.startup). Here
so that the vLLM reproduction listens as vLLM's uvicorn does, and fastrestart_vllm.launch patches Config
where it would patch the real one. As uvicorn's own __init__, it imports Config from uvicorn.config."""

from uvicorn.config import Config  # noqa: F401
from uvicorn.server import Server  # noqa: F401

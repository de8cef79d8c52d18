"""The stand-in's importable side (NOT vLLM; see ../../vllm): just enough of the vllm package for
fastrestart_vllm.launch to find vLLM's CLI (vllm.entrypoints.cli.main.main) and its socket factory
(vllm.entrypoints.openai.api_server.create_server_socket). The `vllm` script itself uses this factory, so
the launcher's replacement is what it calls."""

import os

__version__ = os.environ.get("VLLM_STANDIN_VERSION", "0.31.0")

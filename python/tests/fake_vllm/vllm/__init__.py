"""NOT vLLM: a minimal reproduction of vLLM's model-loader interface and serving order, for fastrestart's tests.

vLLM cannot be installed on the machines that test fastrestart. This package mirrors, under the same module
paths, the few names fastrestart_vllm imports, with the signatures and behaviour read from
vllm-project/vllm (v0.31-era main: vllm/model_executor/model_loader/{__init__,base_loader,default_loader,
utils}.py, vllm/model_executor/utils.py, vllm/plugins/__init__.py, vllm/config/load.py):

- register_model_loader(load_format) / get_model_loader(load_config) / get_model(vllm_config=...)
- BaseModelLoader(load_config) with download_model, load_weights, load_model(vllm_config, model_config,
  prefix) (build on the load device, load_weights, process_weights_after_loading)
- DefaultModelLoader, rejecting extra config keys it does not know, reading safetensors files
- initialize_model, process_weights_after_loading (raising under weights_already_processed() for a
  quantization method without supports_pre_processed_weights), set_default_torch_dtype
- the vllm.general_plugins entry point group, filtered by VLLM_PLUGINS, loaded once per process
- a tiny model family (models.py) with what real models have that matters to a loader: fused parameters
  filled from several checkpoint tensors, tied embeddings, a non-persistent buffer computed at construction,
  toy quantization methods whose post-processing transposes, adds, drops parameters and sets Python-side
  state, a router that holds a parameter by value (a plain object, as vLLM's GroupedTopKRouter holds
  e_score_correction_bias; the ipc_cache loader's _rebind_stale_references exists for it), and a
  load_weights() that sets has_own_embed_tokens / has_own_lm_head (as vLLM's EAGLE drafts record).

and the serving side, in vLLM's order (docs/vllm.md, "The vLLM reproduction"): the CLI
(entrypoints/cli/main.py, serve.py) loading the general plugins while it builds its parser
(engine/arg_utils.py AsyncEngineArgs.add_cli_args, entrypoints/openai/cli_args.py make_arg_parser), the
bind (entrypoints/launchers/launcher.py setup_server, create_server_socket), the engine core and worker
processes (v1/engine/core.py, v1/worker/worker_base.py, v1/worker/gpu_worker.py: init_device, load_model,
profile, KV cache, graph capture), and uvicorn's listen with its backlog (launcher.py serve_http over
../uvicorn, NOT uvicorn). Each module's docstring names the vLLM file and commit it was read from.

Tensors are torch when it is importable, numpy otherwise (../backend.py).
"""

from .version import __version__  # noqa: F401

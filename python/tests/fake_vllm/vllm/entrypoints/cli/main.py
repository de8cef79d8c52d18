"""`vllm serve` reduced to what the loader sees: the flags that reach LoadConfig/ModelConfig, plugin
loading, get_model, then one forward pass instead of a server. Prints a JSON summary on stdout:
{"loader", "logits", "tied", "embed_writeable", "checkpoint_reads", "scale_float", "has_own_embed_tokens",
"has_own_lm_head"}; exit 1 on an exception
(its message on stderr), as a failed engine start.

    python -m vllm.entrypoints.cli.main serve MODEL [--dtype float32] [--quantization toy]
        [--load-format fastrestart] [--model-loader-extra-config JSON] [--device cpu|cuda]
        [--tensor-parallel-size N --tp-rank R] [--data-parallel-size N --data-parallel-rank R]
        [--processes] [--host H --port P]

--port: the API server binds --host:--port first, as vLLM's run_server does (setup_server in
vllm/entrypoints/openai/api_server.py: SO_REUSEADDR, no SO_REUSEPORT), before the plugins load; a port some
process listens on fails there with EADDRINUSE (an OSError, exit 1). After the forward pass it listens on
the socket as uvicorn does (backlog 2048), answers every connection already waiting with one HTTP 200, and
the summary gets "server": {"fd", "port", "served"}. Without --port nothing is bound (tests run side by side).

--processes: vLLM's process structure, each a real process that loads the plugins itself, in vLLM's order:
the API server (`vllm serve`: EngineArgs.__post_init__, vllm/engine/arg_utils.py), then the engine core it
starts (EngineCore.__init__, vllm/v1/engine/core.py), then a worker (WorkerWrapperBase.init_worker,
vllm/v1/worker/worker_base.py, called by WorkerProc in vllm/v1/executor/multiproc_executor.py), which then
initializes its device (Worker.init_device: CUDA) and loads the model. Children get the environment and
no inherited descriptors (multiprocessing's spawn). Each process writes
`fake-vllm: role=R pid=P standby_fd=F listen_fds=L` to stderr once its plugins are loaded, and the worker
`fake-vllm: init_device` before the model.
"""

import argparse
import json
import os
import subprocess
import sys

import backend
from vllm.config import DeviceConfig, HfConfig, LoadConfig, ModelConfig, ParallelConfig, VllmConfig
from vllm.distributed import set_parallel_state
from vllm.model_executor.model_loader import get_model, get_model_loader
from vllm.model_executor.model_loader.default_loader import READS
from vllm.plugins import load_general_plugins


def main(argv=None):
    p = argparse.ArgumentParser(prog="vllm")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("model")
    s.add_argument("--dtype", default="float32")
    s.add_argument("--quantization", default=None)
    s.add_argument("--revision", default=None)
    s.add_argument("--load-format", default="auto")
    s.add_argument("--model-loader-extra-config", default="{}", type=json.loads)
    s.add_argument("--device", default="cpu")
    s.add_argument("--tensor-parallel-size", type=int, default=1)
    s.add_argument("--tp-rank", type=int, default=0)
    s.add_argument("--data-parallel-size", type=int, default=1)
    s.add_argument("--data-parallel-rank", type=int, default=0)
    s.add_argument("--reload-weights", action="store_true",
                   help="then update the weights in place as vLLM's reload_weights does (a new loader)")
    s.add_argument("--processes", action="store_true", help="API server -> engine core -> worker processes")
    s.add_argument("--host", default="")
    s.add_argument("--port", type=int, default=None)
    s.add_argument("--role", choices=["api_server", "engine_core", "worker"], default=None,
                   help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    sock = None
    if a.port is not None and (a.role or "api_server") == "api_server":
        # Before the plugins, as vLLM's run_server: an EADDRINUSE ends the start here.
        from vllm.entrypoints.openai import api_server
        _, sock = api_server.setup_server(a, reuse_port=False)
    load_general_plugins()
    if a.processes:
        role = a.role or "api_server"
        print("fake-vllm: role=%s pid=%d standby_fd=%s listen_fds=%s" % (
              role, os.getpid(), os.environ.get("FASTRESTART_STANDBY_FD", "-"), os.environ.get("LISTEN_FDS", "-")),
              file=sys.stderr, flush=True)
        if role != "worker":
            child = {"api_server": "engine_core", "engine_core": "worker"}[role]
            args, rest = list(argv if argv is not None else sys.argv[1:])[1:], []  # without "serve"
            while args:
                x = args.pop(0)
                if x == "--role":
                    args.pop(0)
                else:
                    rest.append(x)
            serve_py = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
                os.path.abspath(__file__))))), "serve.py")
            rc = subprocess.run([sys.executable, serve_py] + rest + ["--role", child]).returncode
            if rc == 0 and sock is not None:
                # The worker printed the summary; the API server serves (the HTTP side is its own).
                print(json.dumps({"server": serve_waiting(sock)}), flush=True)
            return rc
        print("fake-vllm: init_device", file=sys.stderr, flush=True)
    set_parallel_state(tp_size=a.tensor_parallel_size, tp_rank=a.tp_rank)
    hf = HfConfig.from_model(a.model)
    vllm_config = VllmConfig(
        model_config=ModelConfig(model=a.model, dtype=backend.dtype(a.dtype), hf_config=hf,
                                 quantization=a.quantization, revision=a.revision),
        load_config=LoadConfig(load_format=a.load_format, model_loader_extra_config=a.model_loader_extra_config),
        device_config=DeviceConfig(device=a.device),
        parallel_config=ParallelConfig(tensor_parallel_size=a.tensor_parallel_size,
                                       data_parallel_size=a.data_parallel_size,
                                       data_parallel_rank=a.data_parallel_rank))
    try:
        model = get_model(vllm_config=vllm_config)
    except Exception as e:  # noqa: BLE001 -- an engine start that fails
        print("engine start failed: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    if a.reload_weights:
        try:
            get_model_loader(vllm_config.load_config).load_weights(model, vllm_config.model_config)
        except Exception as e:  # noqa: BLE001
            print("reload_weights failed: %s: %s" % (type(e).__name__, e), file=sys.stderr)
            return 1
    logits = model.forward(list(range(min(6, hf.vocab_size))))
    down = model.model.layers.__getattr__("0").mlp.down_proj
    print(json.dumps({
        "loader": type(model).__name__,
        "logits": logits.tolist(),
        "tied": model.lm_head.weight is model.model.embed_tokens.weight,
        "embed_writeable": backend.writeable(model.model.embed_tokens.weight),
        "checkpoint_reads": len(READS),
        "scale_float": getattr(down, "scale_float", None),
        "has_own_embed_tokens": model.has_own_embed_tokens,
        "has_own_lm_head": model.has_own_lm_head,
        **({"server": serve_waiting(sock)} if sock is not None else {}),
    }))
    return 0


def serve_waiting(sock):
    """uvicorn's start, reduced: listen (backlog 2048, as uvicorn), then one HTTP 200 to each connection
    already waiting. {"fd", "port", "served"}."""
    sock.listen(2048)
    sock.setblocking(False)
    served = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            break
        with conn:
            conn.setblocking(True)
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
        served += 1
    return {"fd": sock.fileno(), "port": sock.getsockname()[1], "served": served}


if __name__ == "__main__":
    sys.exit(main())

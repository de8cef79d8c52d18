"""vllm.entrypoints.cli.main: `vllm serve` and `vllm preload` in the reproduction's vLLM order.

vllm-project/vllm vllm/entrypoints/cli/main.py `main` (checked at 00a5fdd20935ba7679750db22997dcf539ca4591):
`cli_env_setup()` and `apply_runtime_environment()`, then `_build_parser`, which for `serve` calls
`ServeSubcommand.subparser_init` -> `make_arg_parser` (vllm/entrypoints/openai/cli_args.py) ->
`AsyncEngineArgs.add_cli_args`, which loads the general plugins; then `parse_args()` and the subcommand
(vllm/entrypoints/cli/serve.py). So in the process `vllm serve` runs in, the plugins load before anything
else of the start: before the arguments are parsed, before `setup_server` binds the port, before the
engine core process exists.

The engine after that is one of two (FAKE_VLLM_ENGINE, a reproduction-only variable):
- "loader" (set by serve.py and launch.py): the model loader's side, in vLLM's process structure
  (--processes: the API server, the engine core, a worker, each a real process) and vLLM's steps (the
  worker's init_device, load_model, profile, KV cache, graph capture; vllm/v1/worker/gpu_worker.py), then
  one forward pass and a JSON summary on stdout instead of a server; exit 1 on a failed start.
    python3 serve.py MODEL [--dtype float32] [--quantization toy] [--load-format fastrestart]
        [--model-loader-extra-config JSON] [--device cpu|cuda] [--tensor-parallel-size N --tp-rank R]
        [--data-parallel-size N --data-parallel-rank R] [--reload-weights] [--processes] [--host H --port P]
  With --port it binds (setup_server) before the engine starts and, once the engine ran, listens through
  the reproduction's uvicorn (backlog 2048 unless patched), answers every connection already waiting with
  one HTTP 200, and the summary gets "server": {"fd", "port", "served", "backlog"}.
- "standin" (the default): fastrestartd's stand-in (standin.py: an HTTP server, vllm preload).
Each step writes `fake-vllm: step=NAME role=ROLE pid=PID` to stderr (repro.py).
"""

import argparse
import os
import sys

import repro
import standin


def _serve_parser():
    """The parser and the command as vLLM's `_build_parser` makes them: the subcommand's module is imported
    first (`_load_command`), its `subparser_init` builds the parser (the plugins load there), and
    `dispatch_function` is the class's `cmd` as it is when the parser is built."""
    from vllm.entrypoints.cli import serve
    command = serve.cmd_init()[0]
    parser = argparse.ArgumentParser(prog="vllm")
    sub = parser.add_subparsers(dest="subparser", required=True)
    serve_parser = command.subparser_init(sub)
    serve_parser.set_defaults(dispatch_function=command.cmd)
    # The reproduction's own flags
    serve_parser.add_argument("--tp-rank", type=int, default=0)
    serve_parser.add_argument("--reload-weights", action="store_true",
                              help="then update the weights in place as vLLM's reload_weights does "
                                   "(a new loader)")
    serve_parser.add_argument("--processes", action="store_true",
                              help="API server -> engine core -> worker processes")
    return parser


def main():
    argv = sys.argv[1:]
    if not argv or argv[0] not in ("serve", "preload"):
        sys.stderr.write("usage: vllm {serve,preload} ... (the vLLM reproduction: see its docstring)\n")
        return 2
    if argv[0] == "preload":
        return standin.cmd_preload(argv[1:])
    parser = _serve_parser()
    engine = os.environ.get("FAKE_VLLM_ENGINE", "standin")
    repro.step("plugins", "api_server")
    if engine == "standin":  # its own parse: it takes every flag fastrestartd passes
        return standin.cmd_serve(argv[1:])
    args = parser.parse_args(argv)
    if args.processes:
        repro.role_line("api_server")
    return args.dispatch_function(args)


if __name__ == "__main__":
    sys.exit(main())

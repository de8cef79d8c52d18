"""vllm.entrypoints.cli.serve reduced to `ServeSubcommand`: its parser and `cmd`'s choice of server.

vllm-project/vllm vllm/entrypoints/cli/serve.py (checked at 00a5fdd20935ba7679750db22997dcf539ca4591;
vllm/frontend/entrypoints/cli/serve.py at 055e47c28003 is the same class):
- `ServeSubcommand.subparser_init` builds `serve`'s parser with `make_arg_parser`
  (vllm/entrypoints/openai/cli_args.py), which loads the general plugins; vllm/entrypoints/cli/main.py
  `_build_parser` then sets `dispatch_function=ServeSubcommand.cmd` on it, read when `main` dispatches, so
  a `cmd` replaced on the class before the parser is built is the one that runs.
- `ServeSubcommand.cmd(args)` chooses the server from the parsed arguments (so flags given through
  `--config` YAML or as argparse abbreviations count too): `--grpc` runs `serve_grpc` (its own port);
  `--headless` runs `run_headless` (no API server); `--data-parallel-multi-port-external-lb` runs
  `run_dp_supervisor` (an API server per local DP rank); `--api-server-count` > 1 (by default a
  data-parallel size > 1, or VLLM_USE_RUST_FRONTEND) runs `run_multi_api_server`, a module global;
  otherwise one API server in this process: `run_server(args)`
  (vllm/entrypoints/launchers/api_server/entry.py), imported inside `cmd` at that commit, so nothing of
  the server is imported before the arguments are parsed. The reproduction has the last one.
"""

import sys


class ServeSubcommand:
    name = "serve"

    @staticmethod
    def cmd(args):
        if args.model_tag is not None:
            args.model = args.model_tag
        for flag, on in (("--grpc", args.grpc), ("--headless", args.headless),
                         ("--data-parallel-multi-port-external-lb", args.data_parallel_multi_port_external_lb)):
            if on:
                print("fake-vllm: %s is not reproduced (vLLM would not run its single API server)" % flag,
                      file=sys.stderr)
                return 2
        if args.api_server_count is not None and args.api_server_count > 1:
            return run_multi_api_server(args)
        from vllm.entrypoints.launchers.api_server.entry import run_server
        return run_server(args)

    def subparser_init(self, subparsers):
        from vllm.entrypoints.openai.cli_args import make_arg_parser
        return make_arg_parser(subparsers.add_parser(self.name))  # the general plugins load here


def run_multi_api_server(args):
    """vLLM's: `setup_server`, the engines, then `APIServerProcessManager` (API server processes, each
    serving the one socket with its own uvicorn) or `RustFrontendProcessManager` (`--listen-fd`); called by
    its module-global name from `cmd`. Not reproduced: the launcher's line about it is what is tested."""
    print("fake-vllm: --api-server-count %d is not reproduced (vLLM would start API server processes)"
          % args.api_server_count, file=sys.stderr)
    return 2


def cmd_init():
    return [ServeSubcommand()]

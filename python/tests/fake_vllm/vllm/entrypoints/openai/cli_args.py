"""vllm.entrypoints.openai.cli_args reduced to `make_arg_parser`, the parser of `vllm serve`.

vllm-project/vllm vllm/entrypoints/launchers/cli_args.py (checked at 5606eaf71436c6f235c5b197678ad2a94cf2ef84;
vllm/entrypoints/cli/serve.py imports it as vllm.entrypoints.openai.cli_args): `make_arg_parser` adds
`model_tag`, `--headless`, `--api-server-count`, `--grpc`, then `FrontendArgs.add_cli_args` (`--host`,
`--port` 8000, `--uds`, the SSL and uvicorn flags; no `--backlog`), then `AsyncEngineArgs.add_cli_args`,
which loads the general plugins (vllm/engine/arg_utils.py).
"""

from vllm.engine.arg_utils import AsyncEngineArgs


def make_arg_parser(parser):
    parser.add_argument("model_tag", nargs="?", default=None)
    parser.add_argument("--headless", action="store_true", default=False)
    parser.add_argument("--api-server-count", "-asc", type=int, default=None)
    parser.add_argument("--grpc", action="store_true", default=False)
    # FrontendArgs (host, port, uds). The reproduction's --port defaults to none instead of vLLM's 8000:
    # without --port nothing is bound, so that tests run side by side.
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--uds", default=None)
    return AsyncEngineArgs.add_cli_args(parser)

"""vllm.entrypoints.cli.serve reduced to `ServeSubcommand.cmd`'s choice of server.

vllm-project/vllm vllm/entrypoints/cli/serve.py (checked at 00a5fdd20935ba7679750db22997dcf539ca4591):
`--grpc` runs `serve_grpc` (its own port); `--headless` runs `run_headless` (no API server);
`--data-parallel-multi-port-external-lb` runs `run_dp_supervisor` (an API server per local DP rank);
`--api-server-count` > 1 runs `run_multi_api_server`; otherwise one API server in this process:
`run_server(args)` (vllm/entrypoints/launchers/api_server/entry.py). The reproduction has the last one.
"""

import sys

from vllm.entrypoints.launchers.api_server.entry import run_server


def cmd(args):
    if args.model_tag is not None:
        args.model = args.model_tag
    for flag, on in (("--grpc", args.grpc), ("--headless", args.headless),
                     ("--data-parallel-multi-port-external-lb", args.data_parallel_multi_port_external_lb)):
        if on:
            print("fake-vllm: %s is not reproduced (vLLM would not run its single API server)" % flag,
                  file=sys.stderr)
            return 2
    return run_server(args)

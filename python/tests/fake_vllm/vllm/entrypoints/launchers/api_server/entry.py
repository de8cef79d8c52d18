"""vllm.entrypoints.launchers.api_server.entry reduced to `run_server`, the single API server's start.

vllm-project/vllm vllm/entrypoints/launchers/api_server/entry.py (checked at
20b797b718f86de1a50f055fb5aa9e00f66b95cb): `run_server` calls `setup_server(args, reuse_port=False)` (the
bind, in vllm/entrypoints/launchers/launcher.py, imported here by name as vLLM does), then
`run_server_worker` -> `build_async_engine_client` (the engine arguments, `create_engine_config`, then
`AsyncLLM.from_vllm_config`, which starts the engine core process and waits for it to be up), then
`build_and_serve` -> `serve_http(app, sock=sock, host=..., port=..., ...)`. By then the plugins of this
process were loaded long ago, while the parser was built (vllm/engine/arg_utils.py).
"""

import json
import socket
import struct

import repro
from vllm.entrypoints.launchers.launcher import serve_http, setup_server


def _backlog(sock):
    # TCP_INFO of a listening socket: tcpi_sacked (offset 28) is its accept queue's length (sk_max_ack_backlog).
    return struct.unpack_from("=I", sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 32), 28)[0]


def serve_waiting(sock):
    """The reproduction's app: one HTTP 200 to each connection already waiting, then return
    {"fd", "port", "served", "backlog"} (the backlog the socket listens with, read from the kernel)."""
    backlog = _backlog(sock)
    repro.step("listen", "api_server", backlog=backlog)
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
    return {"fd": sock.fileno(), "port": sock.getsockname()[1], "served": served, "backlog": backlog}


def build_async_engine_client(args):
    """AsyncLLM.from_vllm_config: the engine core, a process of its own (--processes), else in this process
    (vLLM with VLLM_ENABLE_V1_MULTIPROCESSING=0). Its exit code: 0 once the engine ran."""
    if args.processes:
        repro.step("engine_core_spawn", "api_server")
        return repro.spawn("engine_core", args)
    from vllm.v1.engine.core import run_engine_core
    return run_engine_core(args)


def run_server(args):
    sock = None
    if args.port is not None or args.uds:  # the reproduction binds only when asked (see cli_args.py)
        address, sock = setup_server(args, reuse_port=False)
        repro.step("bind", "api_server", address=address)
    rc = build_async_engine_client(args)
    if rc != 0:
        return rc
    server = serve_http(serve_waiting, sock, host=args.host, port=args.port) if sock is not None else None
    if args.processes:
        if server is not None:  # the worker printed the engine's summary; the API server serves
            print(json.dumps({"server": server}), flush=True)
    else:
        from vllm.v1.worker.gpu_worker import SUMMARY
        print(json.dumps({**SUMMARY, **({"server": server} if server is not None else {})}), flush=True)
    return 0

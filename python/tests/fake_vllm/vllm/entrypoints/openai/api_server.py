"""vllm.entrypoints.openai.api_server reduced to how vLLM's API server gets its socket (vllm-project/vllm:
`create_server_socket` and `setup_server`, called first in `run_server`, before the engine client is built
and so before any plugin loads). Since vLLM PR #47529 a single API server does not set SO_REUSEPORT
(`reuse_port=num_api_servers > 1`), so a second `vllm serve` on the port of a listening one fails at bind()
with EADDRINUSE. The socket is bound, not listening: uvicorn's start (after the engine is up) calls listen().
setup_server calls the factory through this module's global, as vLLM's does: that is what
fastrestart_vllm.launch replaces."""

import socket


def create_server_socket(addr, *, reuse_port=False):
    family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
    sock = socket.socket(family=family, type=socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(addr)
    return sock


def setup_server(args, *, reuse_port=False):
    """(listen_address, sock) for --host:--port."""
    sock_addr = (args.host or "", args.port)
    sock = create_server_socket(sock_addr, reuse_port=reuse_port)
    return "http://%s:%d" % (sock_addr[0] or "0.0.0.0", sock_addr[1]), sock

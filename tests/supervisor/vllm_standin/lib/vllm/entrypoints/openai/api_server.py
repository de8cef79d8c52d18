"""vLLM's socket factory as vLLM's API server has it (vllm-project/vllm: create_server_socket, called by
setup_server before the engine client is built, so before plugins load): SO_REUSEADDR, and since vLLM PR
#47529 no SO_REUSEPORT for a single API server; bound, not listening (uvicorn listens once the engine is
up). A second server on the port of a listening one fails here with EADDRINUSE."""

import socket


def create_server_socket(addr, *, reuse_port=False):
    family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
    sock = socket.socket(family=family, type=socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(addr)
    return sock

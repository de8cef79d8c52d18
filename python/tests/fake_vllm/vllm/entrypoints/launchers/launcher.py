"""vllm.entrypoints.launchers.launcher reduced to how vLLM's API server gets, and listens on, its socket.

vllm-project/vllm vllm/entrypoints/launchers/launcher.py (checked at f90a993c7f396653edd90368e7fc281bbf1ac7a1;
the same code at vllm/frontend/entrypoints/launchers/launcher.py in 055e47c2, the old path an alias):

- `create_server_socket(addr, *, reuse_port)`: SO_REUSEADDR, SO_REUSEPORT only with reuse_port (since
  vLLM PR #47529 `run_server` passes reuse_port=False: a second `vllm serve` on the port of a listening
  one fails at bind() with EADDRINUSE), bound, not listening.
- `setup_server(args, *, reuse_port)`: with `--uds` a Unix socket (`create_server_unix_socket`), else the
  factory above on (--host, --port), called through this module's global: what fastrestart_vllm.launch
  replaces. Returns (listen_address, sock).
- `serve_http(app, sock, **uvicorn_kwargs)`: `uvicorn.Config(app, **uvicorn_kwargs)` (vLLM passes host,
  port, log level, SSL, timeouts; never `backlog`, so uvicorn's default 2048), then
  `Server.serve(sockets=[sock])`, where uvicorn listens on the socket with config.backlog.
"""

import socket

import uvicorn


def create_server_socket(addr, *, reuse_port=False):
    family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
    sock = socket.socket(family=family, type=socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(addr)
    return sock


def create_server_unix_socket(path):
    sock = socket.socket(family=socket.AF_UNIX, type=socket.SOCK_STREAM)
    sock.bind(path)
    return sock


def setup_server(args, *, reuse_port=False):
    """(listen_address, sock) for --uds or --host:--port."""
    if getattr(args, "uds", None):
        return "unix:%s" % args.uds, create_server_unix_socket(args.uds)
    sock_addr = (args.host or "", args.port)
    sock = create_server_socket(sock_addr, reuse_port=reuse_port)
    return "http://%s:%d" % (sock_addr[0] or "0.0.0.0", sock_addr[1]), sock


def serve_http(app, sock, enable_ssl_refresh=False, **uvicorn_kwargs):
    """uvicorn on `sock`; returns what the app returns (the reproduction's app serves, then returns)."""
    config = uvicorn.Config(app, **uvicorn_kwargs)
    config.load()
    server = uvicorn.Server(config)
    return server.serve(sockets=[sock] if sock else None)

"""`vllm` with the listening socket fastrestartd passes (engine.listen = "supervisor"; docs/vllm.md, "The port").

    /opt/vllm/bin/python3 -m fastrestart_vllm.launch serve MODEL [vllm serve flags]

is `vllm serve MODEL [flags]` (vLLM's own CLI, vllm.entrypoints.cli.main, in this process), except that
when fastrestartd passed a listening socket (LISTEN_FDS, descriptor 3) vLLM serves on it instead of binding
--host:--port. Without LISTEN_FDS, or for another subcommand (`preload`), it changes nothing.

Why a launcher and not the plugin: vLLM's API server binds its socket (`create_server_socket`, called from
`setup_server` in `run_server`) before anything loads plugins, so a second `vllm serve` on the same port (a
standby next to the live engine) fails at bind() with EADDRINUSE before the plugin could act. The launcher
replaces vLLM's socket factory, in every module of this vLLM that defines or imports it, before vLLM's
main() runs; a vLLM where none does is refused with an error naming the modules looked at.
"""

import importlib
import importlib.util
import os
import socket
import sys

__all__ = ["main", "install", "FACTORY", "MODULES"]

FACTORY = "create_server_socket"
# Where vLLM has kept its socket factory, oldest layout first (vllm-project/vllm): defined in
# entrypoints/openai/api_server.py and called by its setup_server; then entrypoints/launchers/launcher.py
# (create_server_socket(addr, *, reuse_port)), imported by name into entrypoints/launchers/utils/listen.py;
# then vllm/frontend/entrypoints/launchers/, with the old paths kept as sys.modules aliases. A module that
# imports the factory by name keeps its own reference, so each one is patched, not only the defining one.
MODULES = (
    "vllm.entrypoints.openai.api_server",
    "vllm.entrypoints.launcher",
    "vllm.entrypoints.launchers.launcher",
    "vllm.entrypoints.launchers.utils.listen",
    "vllm.frontend.entrypoints.launchers.launcher",
    "vllm.frontend.entrypoints.launchers.utils.listen",
)


def _say(msg):
    # Straight to fd 2, like the plugin's lines: vLLM's logging is not configured yet.
    os.write(2, ("fastrestart-vllm: %s\n" % msg).encode())


def _exists(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing: this vLLM has another layout
        return False


def install(sock, modules=MODULES):
    """Makes vLLM's socket factory return `sock` (already bound and listening): patches FACTORY in each
    of `modules` that exists and has it. Returns the names patched; none raises SystemExit naming them.
    The factory's first call gets the socket; a second call (vLLM wanting another TCP socket) is an error,
    never a second bind of the engine's port."""
    host, port = sock.getsockname()[:2]
    handed = []

    def create_server_socket(addr, *args, **kwargs):
        if handed:
            raise RuntimeError("fastrestart-vllm: vLLM asked for a second server socket (%r); only one was "
                               "passed by fastrestartd" % (addr,))
        handed.append(addr)
        if addr[1] != port:
            _say("--port %s ignored: serving on the socket fastrestartd passed (%s:%d, engine.port)"
                 % (addr[1], host, port))
        return sock

    patched, seen = [], set()
    for name in modules:
        if not _exists(name):
            continue
        mod = importlib.import_module(name)
        if not hasattr(mod, FACTORY):
            continue
        if id(mod) not in seen:  # an alias of a module patched already still counts as found
            seen.add(id(mod))
            setattr(mod, FACTORY, create_server_socket)
        patched.append(name)
    if not patched:
        version = "unknown"
        try:
            version = importlib.import_module("vllm").__version__
        except (ImportError, AttributeError):
            pass
        raise SystemExit("fastrestart-vllm: vLLM %s has no %s in any of %s: this launcher does not know where "
                         "this vLLM binds its port; run vLLM with engine.listen = \"engine\" (docs/vllm.md, "
                         "\"The port\")" % (version, FACTORY, ", ".join(MODULES)))
    return patched


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"] and os.environ.get("LISTEN_FDS"):
        from fastrestart import listen
        try:
            sock = listen.inherited_socket(listen.FDNAME)
        except ValueError as e:
            raise SystemExit("fastrestart-vllm: the socket fastrestartd passed: %s" % e)
        if sock is not None:
            patched = install(sock)
            _say("serving on the socket fastrestartd passed (%s:%d; %s patched in %s)"
                 % (sock.getsockname()[0], sock.getsockname()[1], FACTORY, ", ".join(patched)))
    from vllm.entrypoints.cli.main import main as vllm_main
    sys.argv = ["vllm"] + argv
    return vllm_main()


if __name__ == "__main__":
    sys.exit(main())

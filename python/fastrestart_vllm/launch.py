"""`vllm` with the listening socket fastrestartd passes (engine.listen = "supervisor"; docs/vllm.md, "The port").

    /opt/vllm/bin/python3 -m fastrestart_vllm.launch serve MODEL [vllm serve flags]

is `vllm serve MODEL [flags]` (vLLM's own CLI, vllm.entrypoints.cli.main, in this process), except that
when fastrestartd passed a listening socket (LISTEN_FDS, descriptor 3) vLLM serves on it instead of binding
--host:--port, with the accept queue's length fastrestartd chose. Without a passed socket, or for another
subcommand (`preload`), it changes nothing.

Why a launcher: vLLM binds its own port (`setup_server` calls `create_server_socket`, at the start of
`run_server`), and its uvicorn calls listen() again with its own backlog (2048). Neither reads LISTEN_FDS.
The loader plugin cannot do it either: vLLM loads its general plugins while it builds its CLI parser
(`make_arg_parser` -> `AsyncEngineArgs.add_cli_args` -> `load_general_plugins`), so a plugin runs before
the bind, but it has no say in which socket `setup_server` makes.

Flags under which vLLM would not serve on the passed socket (REFUSED) are refused twice: in argv (and its
`--config` YAML file) before vLLM's main() runs, so that a refused start never loads the plugins or parks
as a standby, and in the arguments vLLM parsed (`ServeSubcommand.cmd`, vllm/entrypoints/cli/serve.py),
which also holds what an argparse abbreviation set.

Nothing of vLLM is imported here before vLLM's own main() runs (its `cli_env_setup`, and in trees that
have it `apply_runtime_environment`, come first, as under `vllm serve`): an import hook patches each
module below as vLLM itself imports it, right after the module's own code ran and before any other
module can take the factory from it by name.
"""

import importlib.abc
import importlib.util
import json
import os
import socket
import struct
import sys

__all__ = ["main", "install", "FACTORY", "MODULES", "SERVE_MODULES", "REFUSED", "BACKLOG_ENV", "refused_flag",
           "config_argv", "refused_mode", "backlog_of", "kv_arena_argv", "arena_size_argv"]

KV_ARENA_FLAG = "--kv-arena"
WORKER_CLS = "fastrestart_vllm.worker.Worker"   # worker.QUALNAME (not imported: it imports vLLM)
# CacheConfig.kv_cache_memory_bytes: with it vLLM's Worker.determine_available_memory runs profile_run (the
# compile) but skips the memory profile and returns this figure as the KV cache's budget.
KV_BYTES_FLAG = "--kv-cache-memory-bytes"

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
# uvicorn.Config (uvicorn/config.py, re-exported as uvicorn.Config): vLLM's serve_http builds it from its
# keyword arguments, never passing `backlog`, and uvicorn's Server.startup hands config.backlog to
# loop.create_server(sock=...), whose start calls sock.listen(backlog) on the passed socket.
UVICORN_CONFIG = "uvicorn.config"
# Where `vllm serve`'s subcommand class lives (vllm/entrypoints/cli/serve.py, then
# vllm/frontend/entrypoints/cli/serve.py with the old path an alias): its `ServeSubcommand.cmd` chooses the
# server from the parsed arguments, and vllm/entrypoints/cli/main.py `_build_parser` hands the class's `cmd`
# to the parser as `dispatch_function` after importing the module, so a `cmd` replaced right after the
# module's own code ran is the one `main` dispatches to.
SERVE_MODULES = ("vllm.entrypoints.cli.serve", "vllm.frontend.entrypoints.cli.serve")
BACKLOG_ENV = "FASTRESTART_LISTEN_BACKLOG"

# Said once when vLLM serves the passed socket from processes of its own (ServeSubcommand.cmd ->
# run_multi_api_server: --api-server-count > 1, a data-parallel size > 1 by default, or VLLM_USE_RUST_FRONTEND).
MULTI_SERVER_BACKLOG = ("several API server processes (or the Rust front end) serve the socket fastrestartd "
                        "passed: each calls listen() with its own backlog (uvicorn's 2048), which replaces "
                        "engine.listen_backlog for as long as the socket lives; the next engine through this "
                        "launcher sets it back from FASTRESTART_LISTEN_BACKLOG (fastrestartd sets it)")

# `vllm serve` flags under which vLLM would not serve HTTP on the one socket create_server_socket returns
# (vllm/entrypoints/cli/serve.py ServeSubcommand.cmd, vllm/entrypoints/launchers/launcher.py setup_server).
# Each is refused with a passed socket: the start would otherwise bind elsewhere or never accept, and
# clients queued on fastrestartd's socket would wait for nothing.
REFUSED = {
    "--uds": "vLLM would bind a Unix socket at that path (create_server_unix_socket) instead of serving on "
             "the TCP socket fastrestartd passed",
    "--grpc": "vLLM would start its gRPC server (serve_grpc) on a port of its own instead of the HTTP "
              "server on the socket fastrestartd passed",
    "--headless": "vLLM would start no API server at all (run_headless): nothing would accept on the "
                  "socket fastrestartd passed",
    "--data-parallel-multi-port-external-lb": "vLLM would start one API server per data-parallel rank, each "
                                              "on a port of its own (run_dp_supervisor); fastrestartd "
                                              "passes one socket",
}
# The refused flags that take a value (FrontendArgs.uds: `str | None`, parsed with optional_type).
VALUED = ("--uds",)


def _say(msg):
    # Straight to fd 2, like the plugin's lines: vLLM's logging is not configured yet.
    os.write(2, ("fastrestart-vllm: %s\n" % msg).encode())


def refused_flag(argv):
    """The first flag of REFUSED that `serve`'s argv (after the subcommand) leaves on, or None, read as
    vLLM's FlexibleArgumentParser reads it: `--a_b` is `--a-b`, `--flag=value` is `--flag value`, the last
    of `--data-parallel-multi-port-external-lb` and its `--no-` form wins, and `--uds` with "" or "None"
    (vLLM's optional_type) is no Unix socket. Arguments after a bare `--` are positional for argparse and
    are not flags."""
    state = {}
    words = iter(argv)
    for word in words:
        if word == "--":
            break
        if not word.startswith("--"):
            continue
        name, eq, value = word[2:].partition("=")
        name = "--" + name.replace("_", "-")
        if name in VALUED:
            if not eq:
                value = next(words, "")
            state[name] = value not in ("", "None")
        elif name in REFUSED:
            state[name] = True
        elif name.startswith("--no-") and "--" + name[5:] in REFUSED:
            state["--" + name[5:]] = False
    return next((name for name, on in state.items() if on), None)


def config_argv(argv):
    """`serve`'s argv with the settings of its `--config` YAML file put where vLLM puts them (after the
    model, before the other arguments: FlexibleArgumentParser._pull_args_from_config and load_config_file,
    vllm/utils/argparse_utils.py), so that refused_flag sees them before vLLM's main() runs. argv as it is
    when there is no such file or it cannot be read: vLLM then reports that itself, and the guard on
    ServeSubcommand.cmd still sees what vLLM parsed."""
    if argv.count("--config") != 1:
        return argv
    at = argv.index("--config")
    if at + 1 >= len(argv) or not argv[at + 1].endswith((".yaml", ".yml")):
        return argv
    try:
        import yaml  # vLLM's own dependency (its argparse_utils imports it); not part of vLLM
        with open(argv[at + 1]) as f:
            config = yaml.safe_load(f)
    except Exception:  # noqa: BLE001 -- vLLM reads the file again and says what is wrong with it
        return argv
    if not isinstance(config, dict):
        return argv
    words = []
    for key, value in config.items():
        if isinstance(value, bool):
            # vLLM adds `--no-KEY` only where the parser has it; for refused_flag an unknown one is nothing.
            words.append("--%s" % key if value else "--no-%s" % key)
        elif isinstance(value, list):
            if value:
                words += ["--%s" % key] + [str(item) for item in value]
        elif isinstance(value, dict):
            words += ["--%s" % key, json.dumps(value)]
        else:
            words += ["--%s" % key, str(value)]
    rest = argv[:at] + argv[at + 2:]
    if argv and not argv[0].startswith("-"):  # the model as the positional argument stays first
        return rest[:1] + words + rest[1:]
    return words + rest


def refused_mode(args):
    """The flag of REFUSED that vLLM's parsed arguments (`serve`'s argparse Namespace) turn on, or None.
    This sees what refused_flag cannot: argparse's unambiguous abbreviations (`--headl`), and a `--config`
    file config_argv could not read but vLLM could."""
    for flag in REFUSED:
        if getattr(args, flag[2:].replace("-", "_"), None):
            return flag
    return None


def _refusal(flag):
    return ("fastrestart-vllm: %s is refused with the socket fastrestartd passed (engine.listen = "
            "\"supervisor\"): %s" % (flag, REFUSED[flag]))


def backlog_of(sock):
    """The accept queue length `sock` listens with: FASTRESTART_LISTEN_BACKLOG when set (fastrestartd sets
    it to engine.listen_backlog beside every socket it passes, unless engine.env does), else what the
    kernel holds for the socket (TCP_INFO of a listening socket: tcpi_sacked is sk_max_ack_backlog, the
    backlog fastrestartd's listen() set, already capped at net.core.somaxconn; what `ss -ltn` shows as
    Send-Q). A bad variable raises ValueError naming it."""
    value = os.environ.get(BACKLOG_ENV)
    if value is not None:
        if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= 65535:
            raise ValueError("%s: expected an integer 1..65535, got %r" % (BACKLOG_ENV, value))
        return int(value)
    # struct tcp_info (linux/tcp.h): 8 one-byte fields, then u32 rto, ato, snd_mss, rcv_mss, unacked, sacked.
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 32)
    return struct.unpack_from("=I", info, 28)[0]


def _source_mentions(name, word):
    """Whether the source file of module `name` exists and contains `word`, found without importing
    anything of vLLM (only its top-level package's location is looked up)."""
    top, _, rest = name.partition(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    for base in spec.submodule_search_locations:
        path = os.path.join(base, *rest.split("."))
        for candidate in (path + ".py", os.path.join(path, "__init__.py")):
            try:
                with open(candidate, encoding="utf-8", errors="replace") as f:
                    if word in f.read():
                        return True
            except OSError:
                continue
    return False


class _Patcher(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """An import hook: for each module of `patches`, the spec the other finders find, with a loader that
    runs the module's own code and then the patch. Nothing is imported ahead of vLLM."""

    def __init__(self, patches):
        self.patches = patches      # module name -> function(module)
        self.patched = []           # (name, what) in the order vLLM imported them

    def find_spec(self, name, path=None, target=None):
        if name not in self.patches:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is None:
                    return spec
                spec.loader = _PatchingLoader(spec.loader, self, name)
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner, patcher, name):
        self.inner, self.patcher, self.name = inner, patcher, name

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        # A compatibility shim replaces sys.modules[name] with the module it aliases: patch that one.
        real = sys.modules.get(self.name, module)
        what = self.patcher.patches[self.name](real)
        if what:
            self.patcher.patched.append((self.name, what))
            _say("patched %s in %s" % (what, self.name))

    def __getattr__(self, attr):  # get_code, get_source, is_package...: the real loader's
        return getattr(self.inner, attr)


def install(sock, modules=MODULES, backlog=None):
    """Arranges for vLLM's socket factory to return `sock` (already bound and listening) and, with
    `backlog`, for uvicorn's Config to take it, and wraps `ServeSubcommand.cmd` (the refusal guard on the
    parsed arguments) and `run_multi_api_server` (its line about the backlog): installs the import hook
    (and patches at once what is imported already). Returns the hook; its `patched` lists (module, what)
    as vLLM imports them.
    A vLLM in which no module of `modules` mentions the factory raises SystemExit naming them.
    The factory's first call gets the socket; a second call (vLLM wanting another TCP socket) is an error,
    never a second bind of the engine's port."""
    if not any(name in sys.modules and hasattr(sys.modules[name], FACTORY) or _source_mentions(name, FACTORY)
               for name in modules):
        version = "unknown"
        try:
            from importlib.metadata import version as dist_version
            version = dist_version("vllm")
        except Exception:  # noqa: BLE001 -- only for the message
            pass
        raise SystemExit("fastrestart-vllm: vLLM %s has no %s in any of %s: this launcher does not know where "
                         "this vLLM binds its port; run vLLM with engine.listen = \"engine\" (docs/vllm.md, "
                         "\"The port\")" % (version, FACTORY, ", ".join(modules)))
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

    def patch_factory(mod):
        if not hasattr(mod, FACTORY) or getattr(mod, FACTORY) is create_server_socket:
            return None
        setattr(mod, FACTORY, create_server_socket)
        return FACTORY

    def patch_uvicorn(mod):
        config = getattr(mod, "Config", None)
        if config is None or getattr(config.__init__, "_fastrestart_backlog", None) is not None:
            return None
        inner = config.__init__

        def __init__(self, *args, **kwargs):
            given = kwargs.get("backlog")
            if given is not None and given != backlog:
                _say("uvicorn backlog %s replaced by %d (the passed socket's, engine.listen_backlog)"
                     % (given, backlog))
            kwargs["backlog"] = backlog
            inner(self, *args, **kwargs)

        __init__._fastrestart_backlog = backlog
        config.__init__ = __init__
        return "Config(backlog=%d)" % backlog

    def patch_serve(mod):
        command = getattr(mod, "ServeSubcommand", None)
        # A staticmethod in every vLLM checked; any other shape is left alone (the argv check still runs).
        if command is None or not isinstance(command.__dict__.get("cmd"), staticmethod) \
                or getattr(command.cmd, "_fastrestart_guard", False):
            return None
        inner = command.cmd

        def cmd(args):
            # The second check, on what vLLM parsed: by now the general plugins ran (a standby was parked
            # and released), so this is later than main()'s check of argv, but still before vLLM binds,
            # serves elsewhere or starts an engine.
            flag = refused_mode(args)
            if flag:
                raise SystemExit(_refusal(flag))
            return inner(args)

        cmd._fastrestart_guard = True
        command.cmd = staticmethod(cmd)
        what = ["ServeSubcommand.cmd"]
        multi = getattr(mod, "run_multi_api_server", None)
        if multi is not None and not getattr(multi, "_fastrestart_guard", False):
            def run_multi_api_server(args, *rest, **kwargs):
                # Served on the passed socket still (setup_server gets it), but by child processes this
                # launcher does not reach: each API server process's uvicorn, or the Rust front end given
                # the descriptor, calls listen() with its own backlog, and the kernel keeps the last one.
                _say(MULTI_SERVER_BACKLOG)
                return multi(args, *rest, **kwargs)

            run_multi_api_server._fastrestart_guard = True
            mod.run_multi_api_server = run_multi_api_server
            what.append("run_multi_api_server")
        return ", ".join(what)

    patches = {name: patch_factory for name in modules}
    patches.update({name: patch_serve for name in SERVE_MODULES})
    if backlog is not None:
        patches[UVICORN_CONFIG] = patch_uvicorn
    hook = _Patcher(patches)
    for name, patch in patches.items():  # imported before the hook: patched now
        if name in sys.modules:
            what = patch(sys.modules[name])
            if what:
                hook.patched.append((name, what))
    sys.meta_path.insert(0, hook)
    return hook


def kv_arena_argv(argv, environ=os.environ):
    """`serve`'s argv without `--kv-arena NAME` (or `--kv-arena=NAME`), which vLLM does not know: NAME goes
    to FASTRESTART_KV_ARENA in `environ` (inherited by the engine core and the workers vLLM starts) and
    `--worker-cls fastrestart_vllm.worker.Worker` is added, the worker class that puts the KV cache in the
    arena (docs/vllm.md). Another `--worker-cls` is refused with one line: it would not use the arena.
    Words after a bare `--` are left alone."""
    out, name, words = [], None, iter(argv)
    for word in words:
        if word == "--":
            out.append(word)
            out.extend(words)
            break
        flag, eq, value = word.partition("=")
        if flag.replace("_", "-") == KV_ARENA_FLAG:
            name = value if eq else next(words, "")
            if not name or name.startswith("-"):
                raise SystemExit("fastrestart-vllm: --kv-arena needs the arena's name (the weight daemon's "
                                 "KV arena, docs/weightd.md)")
            continue
        out.append(word)
    if name is None:
        return out
    cls = _flag_value(out, "--worker-cls")
    if cls is not None and cls != WORKER_CLS:
        raise SystemExit("fastrestart-vllm: --kv-arena needs --worker-cls %s, not %s: only that worker class "
                         "puts the KV cache in the arena" % (WORKER_CLS, cls))
    environ["FASTRESTART_KV_ARENA"] = name
    if cls is None:
        end = out.index("--") if "--" in out else len(out)
        out[end:end] = ["--worker-cls", WORKER_CLS]
    return out


def _flag_value(argv, name):
    """The value of `name` in argv (`--a_b` and `=value` forms; the last one wins), None without it; words after
    a bare `--` are not flags."""
    value, words = None, iter(argv)
    for word in words:
        if word == "--":
            break
        flag, eq, v = word.partition("=")
        if flag.replace("_", "-") == name:
            value = v if eq else next(words, "")
    return value


def arena_size_argv(argv, name, environ=os.environ, find=None):
    """`serve`'s argv with `--kv-cache-memory-bytes N`, N the bytes of the arena `name` that the weight daemon
    holds, so that vLLM sizes the KV cache from the arena without profiling the memory beside a live engine
    (the worker checks the arena against the engine's share once vLLM's request_memory computed it). The
    daemon is the first GPU's (`cuda:0` as this process sees CUDA_VISIBLE_DEVICES), or the host's for
    `--device cpu` (the reproduction). Unchanged, with one line, when the daemon holds no such arena (the
    first start: the profile sizes it, the first lease makes the arena that size) or cannot be asked (the
    worker then falls back and says why). An explicit `--kv-cache-memory-bytes` of another size is refused
    with one line naming the arena and both sizes. `find`: fastrestart.find_arena (a test passes its own)."""
    device = "host" if _flag_value(argv, "--device") == "cpu" else "cuda:0"
    try:
        if find is None:
            from fastrestart import find_arena as find
        held = find(name, device=device, socket_dir=environ.get("FASTRESTART_SOCKET_DIR") or None)
    except (ImportError, RuntimeError, ValueError) as e:
        _say("kv arena '%s': the daemon of %s could not be asked for its size (%s); vLLM sizes the KV cache "
             "itself" % (name, device, e))
        return argv
    if held is None:
        _say("kv arena '%s': the daemon of %s holds none yet; vLLM sizes the KV cache itself, and its first "
             "lease makes the arena that size" % (name, device))
        return argv
    nbytes = int(held["bytes"])
    given = _flag_value(argv, KV_BYTES_FLAG)
    if given is not None:
        if given.strip() == str(nbytes):
            return argv
        raise SystemExit("fastrestart-vllm: %s %s, but kv arena '%s' on the daemon of %s holds %d bytes: the KV "
                         "cache is the arena, so its size is the arena's (leave the flag out)"
                         % (KV_BYTES_FLAG, given, name, device, nbytes))
    _say("kv arena '%s': %d bytes on the daemon of %s: %s %d" % (name, nbytes, device, KV_BYTES_FLAG, nbytes))
    end = argv.index("--") if "--" in argv else len(argv)
    return argv[:end] + [KV_BYTES_FLAG, str(nbytes)] + argv[end:]


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        env = {}
        argv = ["serve"] + kv_arena_argv(argv[1:], env)
        if env:
            os.environ.update(env)
            argv = ["serve"] + arena_size_argv(argv[1:], env["FASTRESTART_KV_ARENA"])
    if argv[:1] == ["serve"] and os.environ.get("LISTEN_FDS"):
        from fastrestart import listen
        try:
            sock = listen.inherited_socket(listen.FDNAME)
        except ValueError as e:
            raise SystemExit("fastrestart-vllm: the socket fastrestartd passed: %s" % e)
        if sock is not None:
            # Refused here, before vLLM's main() runs (so before its plugins, and a standby's gate),
            # when argv or its --config file spells the flag out; install()'s guard on
            # ServeSubcommand.cmd catches the rest (abbreviations).
            flag = refused_flag(config_argv(argv[1:]))
            if flag:
                raise SystemExit(_refusal(flag))
            try:
                backlog = backlog_of(sock)
            except ValueError as e:
                raise SystemExit("fastrestart-vllm: %s" % e)
            install(sock, backlog=backlog)
            host, port = sock.getsockname()[:2]
            _say("serving on the socket fastrestartd passed (%s:%d, backlog %d); %s, uvicorn's Config and "
                 "ServeSubcommand.cmd are patched as vLLM imports them" % (host, port, backlog, FACTORY))
    sys.argv = ["vllm"] + argv
    from vllm.entrypoints.cli.main import main as vllm_main
    return vllm_main()


if __name__ == "__main__":
    sys.exit(main())

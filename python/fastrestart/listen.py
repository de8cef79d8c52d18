"""fastrestart.listen: the listening socket fastrestartd hands down to the engine (docs/python.md).

With ``engine.listen = "supervisor"`` fastrestartd binds the engine's address once and passes the listening
socket to every engine, standby and restored snapshot it starts, with systemd's socket-activation convention:
the socket is descriptor 3, ``LISTEN_FDS=1``, ``LISTEN_PID`` the engine's pid and
``LISTEN_FDNAMES=fastrestart-engine``. Connections made while no engine accepts wait in the kernel's
queue instead of being refused, so the engine must serve on this socket instead of binding its own:

    sock = fastrestart.inherited_socket()        # None: nothing was passed, bind as before
    ...                                          # load, warm up: connections wait in the backlog
    server = make_server(sock)                   # accept only once requests can be served

Pure Python (the socket module and os.environ): it does not use the compiled binding.
"""

import os as _os
import socket as _socket

__all__ = ["inherited_socket", "inherited_sockets", "FDNAME", "PROBE_FDNAME", "FIRST_FD"]

FDNAME = "fastrestart-engine"  # LISTEN_FDNAMES of the socket fastrestartd passes
# The engine's private endpoint (readiness.endpoint = "private", docs/listen-socket.md): passed as fd 4
# beside FDNAME; fastrestartd's readiness and health checks come there, never through the clients' queue.
PROBE_FDNAME = "fastrestart-probe"
FIRST_FD = 3                   # SD_LISTEN_FDS_START: the passed descriptors are 3, 4, ...
_VARS = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


def _int(var, value, minimum):
    # Digits only: int() would also take spaces, a sign and underscores ("1_0").
    if not (value.isascii() and value.isdigit()) or int(value) < minimum:
        raise ValueError("%s: expected an integer >= %d, got %r" % (var, minimum, value))
    return int(value)


def _pick(count, names, name):
    """The index of the socket to use among `count` passed ones."""
    if names is not None:
        split = names.split(":")
        if len(split) != count:
            raise ValueError("LISTEN_FDNAMES: %r names %d socket(s), LISTEN_FDS passes %d"
                             % (names, len(split), count))
        if name is not None:
            if name not in split:
                raise ValueError("LISTEN_FDNAMES: %r has no socket named %r" % (names, name))
            return split.index(name)
    if count != 1:
        raise ValueError("LISTEN_FDS: %d sockets passed; name the one to serve on (inherited_socket(name=...) "
                         "with LISTEN_FDNAMES)" % count)
    return 0


def inherited_socket(name=None):
    """The listening socket passed to this process (systemd's LISTEN_FDS convention), or None.

    None when LISTEN_PID or LISTEN_FDS is unset, LISTEN_FDS is 0, or LISTEN_PID is another process's
    (the variables were inherited from a parent they were meant for). With `name`, the socket of that
    name in LISTEN_FDNAMES (fastrestartd's is FDNAME); without, the only one passed. Returns a blocking
    socket.socket on the descriptor, not inheritable by processes this one starts. Once LISTEN_PID is
    this process's, the three variables are removed from the environment, on success or error, so that
    processes started afterwards (workers, the engine core) do not take the socket for theirs: call it once,
    before starting any. A malformed variable, or a descriptor that is not a listening stream socket, raises
    ValueError naming the variable (and the descriptor).
    """
    if name is not None and (not isinstance(name, str) or not name or ":" in name):
        raise ValueError("name: expected a non-empty str without ':', got %r" % (name,))
    pid, fds = _os.environ.get("LISTEN_PID"), _os.environ.get("LISTEN_FDS")
    if pid is None or fds is None:
        return None
    if _int("LISTEN_PID", pid, 1) != _os.getpid():
        return None
    try:
        count = _int("LISTEN_FDS", fds, 0)
        if count == 0:
            return None
        fd = FIRST_FD + _pick(count, _os.environ.get("LISTEN_FDNAMES"), name)
        try:
            sock = _socket.socket(fileno=fd)
        except OSError as e:
            raise ValueError("LISTEN_FDS: descriptor %d is not a socket: %s" % (fd, e.strerror)) from None
        try:
            if sock.type != _socket.SOCK_STREAM or not sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_ACCEPTCONN):
                raise ValueError("LISTEN_FDS: descriptor %d is not a listening stream socket" % fd)
            sock.set_inheritable(False)
            sock.setblocking(True)
        except BaseException:
            sock.detach()  # not ours to close: the error leaves the descriptor as it was
            raise
        return sock
    finally:
        for var in _VARS:
            _os.environ.pop(var, None)


def inherited_sockets():
    """(serve, probe): the listening socket and the engine's private endpoint, each None when not passed.

    One call takes both (the LISTEN_* variables are removed after the first look, as inherited_socket
    does). Serve the same routes on both, and accept on `probe` no later than on `serve`: fastrestartd's
    readiness request waits there, and READY follows its answer. Errors as inherited_socket.
    """
    names = _os.environ.get("LISTEN_FDNAMES")
    if names is None or PROBE_FDNAME not in names.split(":"):
        return inherited_socket(FDNAME), None
    saved = {var: _os.environ.get(var) for var in _VARS}
    serve = inherited_socket(FDNAME)
    if serve is None:
        return None, None
    for var, value in saved.items():  # put back for the second look, then removed by it
        if value is not None:
            _os.environ[var] = value
    try:
        return serve, inherited_socket(PROBE_FDNAME)
    except BaseException:
        serve.detach()
        raise

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
import stat as _stat

__all__ = ["inherited_socket", "inherited_sockets", "FDNAME", "PROBE_FDNAME", "FIRST_FD"]

# The names are fastrestartd's (fastrestart/listen_names.h); tests/common/listen_names_test.cc holds these equal.
FDNAME = "fastrestart-engine"  # LISTEN_FDNAMES of the socket fastrestartd passes
# The engine's private endpoint (readiness.endpoint = "private", docs/listen-socket.md): passed as fd 4
# beside FDNAME; fastrestartd's readiness and health checks come there, never through the clients' queue.
PROBE_FDNAME = "fastrestart-probe"
FIRST_FD = 3                   # SD_LISTEN_FDS_START: the passed descriptors are 3, 4, ...
_VARS = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


_FAMILIES = {_socket.AF_INET: "IPv4 (AF_INET)", _socket.AF_INET6: "IPv6 (AF_INET6)", _socket.AF_UNIX: "Unix (AF_UNIX)"}
_TYPES = {_socket.SOCK_STREAM: "stream", _socket.SOCK_DGRAM: "datagram", _socket.SOCK_SEQPACKET: "seqpacket",
          _socket.SOCK_RAW: "raw"}


def _say(msg):
    # One line on fd 2, as the C++ helper writes it: the engine's output is what the supervisor logs.
    _os.write(2, ("fastrestart: %s\n" % msg).encode("utf-8", "backslashreplace"))


def _file_kind(mode):
    for test, kind in ((_stat.S_ISREG, "a regular file"), (_stat.S_ISDIR, "a directory"),
                       (_stat.S_ISCHR, "a character device"), (_stat.S_ISBLK, "a block device"),
                       (_stat.S_ISFIFO, "a pipe")):
        if test(mode):
            return kind
    return "not a socket"


def _not_a_tcp_listener(sock):
    """None when `sock` is a listening TCP socket (IPv4 or IPv6), else what it is ("a listening Unix (AF_UNIX)
    stream socket"), as the C++ helper (fastrestart/listen_socket.h) words it."""
    family, stype, proto = sock.family, sock.type, sock.proto
    listening = bool(sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_ACCEPTCONN))
    inet = family in (_socket.AF_INET, _socket.AF_INET6)
    if inet and stype == _socket.SOCK_STREAM and proto == _socket.IPPROTO_TCP and listening:
        return None
    what = ("a listening " if listening else "a non-listening ") + _FAMILIES.get(family, "family %d" % family)
    if inet:
        what += {_socket.IPPROTO_TCP: " TCP", _socket.IPPROTO_UDP: " UDP"}.get(proto, " protocol %d" % proto)
    return what + " %s socket" % _TYPES.get(stype, "other")


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
    before starting any. A malformed variable, or a descriptor that is not a listening TCP socket (IPv4 or
    IPv6), raises ValueError naming the variable, the descriptor and what it is instead ("LISTEN_FDS:
    descriptor 3 is a listening Unix (AF_UNIX) stream socket, not a listening TCP socket"). A LISTEN_PID of
    another process is said in one line on stderr (then None).
    """
    if name is not None and (not isinstance(name, str) or not name or ":" in name):
        raise ValueError("name: expected a non-empty str without ':', got %r" % (name,))
    pid, fds = _os.environ.get("LISTEN_PID"), _os.environ.get("LISTEN_FDS")
    if pid is None or fds is None:
        return None
    if _int("LISTEN_PID", pid, 1) != _os.getpid():
        # Not ours (systemd's rule). Said in one line: under fastrestartd it means a wrapper between it and
        # the engine forked instead of exec'ing, and the engine would next bind the port itself and fail.
        if fds != "0":
            _say("LISTEN_PID=%s is not this process (pid %d): the passed socket (LISTEN_FDS) is another "
                 "process's; not using it (a wrapper between the supervisor and the engine must exec it, not fork)"
                 % (pid, _os.getpid()))
        return None
    try:
        count = _int("LISTEN_FDS", fds, 0)
        if count == 0:
            return None
        fd = FIRST_FD + _pick(count, _os.environ.get("LISTEN_FDNAMES"), name)
        try:
            st = _os.fstat(fd)
        except OSError as e:
            raise ValueError("LISTEN_FDS: descriptor %d is not open (%s)" % (fd, e.strerror)) from None
        if not _stat.S_ISSOCK(st.st_mode):
            raise ValueError("LISTEN_FDS: descriptor %d is %s, not a listening TCP socket" % (fd, _file_kind(st.st_mode)))
        try:
            sock = _socket.socket(fileno=fd)
        except OSError as e:
            raise ValueError("LISTEN_FDS: descriptor %d is not a socket: %s" % (fd, e.strerror)) from None
        try:
            why = _not_a_tcp_listener(sock)
            if why:
                raise ValueError("LISTEN_FDS: descriptor %d is %s, not a listening TCP socket" % (fd, why))
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

"""For the tests: start a process the way fastrestartd does with engine.listen = "supervisor" (systemd's
socket-activation convention): a listening socket as descriptor 3, LISTEN_FDS=1, LISTEN_PID=<its pid>,
LISTEN_FDNAMES=fastrestart-engine."""

import os
import socket
import subprocess
import sys

FDNAME = "fastrestart-engine"
PROBE_FDNAME = "fastrestart-probe"


def listening_socket(backlog=16):
    """A TCP socket listening on a free loopback port, bound as fastrestartd binds (SO_REUSEADDR)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(backlog)
    return s


# Runs in the child between fork and the engine's exec: descriptor 3 and LISTEN_PID, which only the process
# itself knows before exec (execv keeps the pid), as fastrestartd's child sets them.
_TRAMPOLINE = """import fcntl, os, sys
src = int(sys.argv[1])
probe = os.environ.pop("FR_TEST_PROBE_FD", None)
if probe is not None:  # the private endpoint at 4: both moved above 4 first, then into place
    s, p = fcntl.fcntl(src, fcntl.F_DUPFD, 10), fcntl.fcntl(int(probe), fcntl.F_DUPFD, 10)
    os.dup2(s, 3)
    os.dup2(p, 4)
    for fd in {s, p, src, int(probe)} - {3, 4}:
        os.close(fd)
elif src != 3:
    os.dup2(src, 3)
    os.close(src)
if sys.argv[2] == "self":
    os.environ["LISTEN_PID"] = str(os.getpid())
os.execvpe(sys.argv[3], sys.argv[3:], os.environ)
"""


def popen_with_socket(argv, sock, env=None, names=FDNAME, fds="1", pid=None, keep=(), probe=None, **kwargs):
    """Popen(argv) with `sock` as its descriptor 3 and the LISTEN_* variables: LISTEN_PID the child's own
    pid unless `pid` names another; `names` None leaves LISTEN_FDNAMES unset. sock None: descriptor 3 is
    whatever `kwargs["pass_fds"][0]` is (a pipe, a file: the error cases). `keep`: other descriptors the
    child inherits under their own numbers (a standby's socket), never 3. `probe`: a second listening socket,
    the private endpoint, put at descriptor 4 (LISTEN_FDS=2, LISTEN_FDNAMES=fastrestart-engine:fastrestart-probe
    unless `fds`/`names` say otherwise)."""
    if 3 in keep:
        raise ValueError("keep: descriptor 3 is the listening socket's")
    env = dict(os.environ if env is None else env)
    env["LISTEN_FDS"] = fds
    env.pop("LISTEN_PID", None)
    if names is None:
        env.pop("LISTEN_FDNAMES", None)
    else:
        env["LISTEN_FDNAMES"] = names
    if pid is not None:
        env["LISTEN_PID"] = str(pid)
    src = sock.fileno() if sock is not None else kwargs.pop("pass_fds")[0]
    if probe is not None:
        env["FR_TEST_PROBE_FD"] = str(probe.fileno())
        if fds == "1":
            env["LISTEN_FDS"] = "2"
        if names == FDNAME:
            env["LISTEN_FDNAMES"] = FDNAME + ":" + PROBE_FDNAME
        keep = tuple(keep) + (probe.fileno(),)
    return subprocess.Popen([sys.executable, "-c", _TRAMPOLINE, str(src), "self" if pid is None else "given"]
                            + list(argv), env=env, pass_fds=(src,) + tuple(keep), **kwargs)

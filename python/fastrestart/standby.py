"""fastrestart.standby: the engine's side of the standby gate protocol (docs/standby.md, docs/python.md).

    import fastrestart.standby as standby
    standby.gate("pre_gpu")        # before anything initializes CUDA (before torch.cuda)
    ...                            # context, weights, warm-up forward
    standby.gate("warmed")         # before binding the port

A process that fastrestartd did not start as a standby passes every gate at once; a standby parks at the
gate of its configured level until fastrestartd releases it (gate() returns True) or tells it to exit (the
process exits 0 from inside gate(), which never returns then).
"""

import os as _os

from . import _fastrestart

__all__ = ["gate", "is_standby", "FD_ENV", "LEVEL_ENV", "LEVELS"]

FD_ENV = "FASTRESTART_STANDBY_FD"
LEVEL_ENV = "FASTRESTART_STANDBY_LEVEL"
LEVELS = ("pre_gpu", "warmed")


def is_standby():
    """True when this process was started as a standby and has not been released yet."""
    return bool(_os.environ.get(FD_ENV))


def gate(level):
    """The standby gate at `level` ("pre_gpu" or "warmed").

    Returns False at once when this process is not a standby or waits at the other level; True once
    fastrestartd released it (the socket is closed and both variables are gone from os.environ, so
    processes started afterwards are not standbys). Told to exit, or with fastrestartd gone, the process
    exits with status 0 without returning (no atexit handlers run). A bad level or variable raises
    ValueError; a malformed reply or an I/O failure raises RuntimeError, naming the message.
    While parked Python's own signal handlers do not run (SIGINT is not a KeyboardInterrupt); a signal
    whose action ends the process (SIGTERM by default) ends it.
    """
    if not isinstance(level, str):
        raise ValueError("level: expected 'pre_gpu' or 'warmed'")
    released = _fastrestart.standby_gate(level)
    if released:
        # The C library removed them from the process environment; os.environ is Python's copy, which
        # subprocess passes on.
        _os.environ.pop(FD_ENV, None)
        _os.environ.pop(LEVEL_ENV, None)
    return released

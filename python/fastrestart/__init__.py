"""fastrestart: attach an engine to weights a fastrestart-weightd holds, or publish them (docs/python.md).

    r = fastrestart.attach(files, config)          # identifies the files (stat) before anything reads them
    if r.hit:
        weights = {name: torch.from_dlpack(t) for name, t in r.tensors.items()}   # no copy
    else:
        weights = load_from_disk(files)
        fastrestart.publish(r.key, weights)         # under the identities taken BEFORE the read

Tensors export themselves through DLPack (``__dlpack__``/``__dlpack_device__``); host tensors also give a
numpy view with ``.numpy()``. In zero_copy mode the memory is a read-only mapping of the daemon's pool.
A standby engine waits at ``fastrestart.standby.gate(level)`` (docs/standby.md). An engine serves on the
listening socket fastrestartd passes, when it passes one: ``fastrestart.inherited_socket()`` (docs/python.md).
An engine's KV cache can live in a KV arena the daemon holds: ``reserve_arena``/``lease_arena``
(docs/engine_loader.md, "KV arenas"); ``arena_line``/``arena_fallback_line`` give the line that tells
fastrestartd what came of it, and ``fastrestart.kv_stats`` tells it the KV cache's survival (docs/kv-survival.md).
"""

import os as _os

from ._fastrestart import Arena, ArenaView, AttachResult, Key, SnapshotAgent, Tensor
from . import _fastrestart
from . import standby
from . import listen
from . import kv_stats
from .listen import inherited_socket, inherited_sockets

__all__ = ["identify", "open_checkpoint", "OpenCheckpoint", "attach", "publish", "snapshot_agent", "standby",
           "listen", "kv_stats", "inherited_socket", "inherited_sockets",
           "reserve_arena", "lease_arena", "find_arena", "arena_line", "arena_fallback_line",
           "Arena", "ArenaView", "AttachResult", "Key", "SnapshotAgent", "Tensor"]


def _files(files):
    if isinstance(files, (str, bytes, _os.PathLike)):
        files = [files]
    try:
        out = [_os.fsdecode(_os.fspath(f)) for f in files]
    except TypeError:
        raise ValueError("files: expected a path or a list of paths") from None
    if not out:
        raise ValueError("files: at least one checkpoint file is required")
    for i, f in enumerate(out):
        try:
            _os.stat(f)
        except OSError as e:
            raise ValueError("files[%d]: %s: %s" % (i, f, e.strerror)) from None
    return out


def _config(config):
    if config is None:
        return {}
    if not hasattr(config, "items"):
        raise ValueError("config: expected a dict of str -> str")
    out = {}
    for k, v in config.items():
        if not isinstance(k, str):
            raise ValueError("config: keys must be str, got %r" % (k,))
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, (int, float)):
            v = str(v)
        elif not isinstance(v, str):
            raise ValueError("config[%r]: expected str, int or float, got %s" % (k, type(v).__name__))
        out[k] = v
    return out


def _number(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError("%s: expected a number of seconds" % name)
    return float(v)


def _str_or_none(name, v):
    if v is None:
        return ""
    if isinstance(v, _os.PathLike):
        v = _os.fspath(v)
    if not isinstance(v, str):
        raise ValueError("%s: expected str" % name)
    return v


def identify(files, config=None, *, fds=None):
    """Identify the checkpoint files now (stat(2) only, never a read) and return a Key.

    Take it BEFORE reading the files and publish under it: the daemon refuses a publish whose files
    changed since, so old bytes are never stored under a new file's identity. With ``fds`` (one open
    descriptor per file, in order; see open_checkpoint) the files are identified through the descriptors
    the engine reads: a symlink retargeted during the load cannot put one version's bytes under another's
    identity (docs/engine_loader.md, "Identify what you read").
    """
    files = _files(files)
    if fds is None:
        return _fastrestart.identify(files, _config(config))
    fds = list(fds)
    if any(isinstance(f, bool) or not isinstance(f, int) for f in fds):
        raise ValueError("fds: expected a list of open file descriptors (int)")
    return _fastrestart.identify(files, _config(config), fds)


class OpenCheckpoint:
    """The checkpoint's files, each opened once: read them through ``paths`` (``/proc/self/fd/N``, which
    any reader that takes a path accepts) and identify them with ``key(config)``. Whatever a symlink on the
    way (``current -> v2``) leads to later, these are the files that were opened. Close it (or use it as a
    context manager) once the weights are read."""

    def __init__(self, files):
        self.files = _files(files)
        self.fds = []
        try:
            for f in self.files:
                self.fds.append(_os.open(f, _os.O_RDONLY | _os.O_CLOEXEC))
        except OSError:
            self.close()
            raise
        self.paths = ["/proc/self/fd/%d" % fd for fd in self.fds]

    def key(self, config=None):
        return identify(self.files, config, fds=self.fds)

    def close(self):
        for fd in self.fds:
            _os.close(fd)
        self.fds = []
        self.paths = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_checkpoint(files):
    """Open every checkpoint file once (see OpenCheckpoint)."""
    return OpenCheckpoint(files)


def _key(what, files, config):
    if isinstance(files, Key):
        if config is not None:
            raise ValueError("%s: config is part of the Key; pass one or the other" % what)
        return files
    return identify(files, config)


def attach(files, config=None, *, mode="zero_copy", fallback=True, connect_timeout_s=5.0,
           state_timeout_s=300.0, verify=False, socket_dir=None, device="host"):
    """Ask the daemon of `device` for the weights of (files, config), or of a Key from identify().

    Returns an AttachResult: hit, reason, differs, timings (dict, seconds), digest, fingerprint, key (the
    Key it asked for: publish under it after a miss), and tensors (dict name -> Tensor). With fallback (the
    default) an absent daemon or a refusal is a miss with a reason; with fallback=False it raises
    RuntimeError. Bad arguments raise ValueError.
    """
    if not isinstance(mode, str):
        raise ValueError("mode: expected 'zero_copy' or 'copy'")
    if not isinstance(device, str):
        raise ValueError("device: expected 'host' or 'cuda:<ordinal>'")
    return _fastrestart.attach(_key("attach", files, config), mode, bool(fallback),
                               _number("connect_timeout_s", connect_timeout_s),
                               _number("state_timeout_s", state_timeout_s), bool(verify),
                               _str_or_none("socket_dir", socket_dir), device)


def publish(key, tensors, *, socket_dir=None, device="host", connect_timeout_s=5.0):
    """Copy `tensors` (dict name -> array) into a new daemon pool under `key`.

    `key` is the Key taken before the tensors were read from its files: the miss's ``AttachResult.key``,
    or ``identify(files, config)`` called before the load. The daemon re-checks the files and refuses
    (RuntimeError naming the file) a publish whose files changed since; keep serving what was read.
    Host: objects with the buffer protocol (C-contiguous numpy arrays, ...) or ``__dlpack__`` (e.g. a CPU
    bf16 torch tensor). cuda:N: objects with ``__dlpack__`` on that device. Returns a dict with
    fingerprint, digest, bytes and seconds. Failures raise RuntimeError (busy: the key is already held).
    """
    if not isinstance(key, Key):
        raise ValueError("publish: key must be the fastrestart.Key taken before the files were read "
                         "(AttachResult.key of the miss, or fastrestart.identify(files, config) before loading); "
                         "identifying the files at publish time could store old bytes under a new file's identity")
    if not isinstance(device, str):
        raise ValueError("device: expected 'host' or 'cuda:<ordinal>'")
    if not isinstance(tensors, dict):
        raise ValueError("tensors: expected a dict of name -> array")
    return _fastrestart.publish(key, tensors, _str_or_none("socket_dir", socket_dir),
                                device, _number("connect_timeout_s", connect_timeout_s))


def snapshot_agent(results, *, quiesce=None, resume=None, socket_path=None, arenas=()):
    """Serves the snapshot prepare/resume exchange (docs/snapshot.md) for the weights of `results` (hits of
    attach()) and the KV arenas `arenas` (Arena objects: a prepare unmaps them after the weights, keeping
    their address ranges; a resume leases and maps them again at the same addresses). `quiesce()` runs
    before the release (stop reading the weights and the arenas, drop caches); `resume()` after the
    re-attach and the leases; both on the agent's thread. socket_path None: $FASTRESTART_SNAPSHOT_SOCKET;
    when that is unset too, returns None (the engine is not asked to take part). Keep the returned agent
    alive."""
    for r in results:
        if not isinstance(r, AttachResult):
            raise TypeError("snapshot_agent: results must be AttachResult objects")
    for name, f in (("quiesce", quiesce), ("resume", resume)):
        if f is not None and not callable(f):
            raise TypeError(f"snapshot_agent: {name} must be callable or None")
    return _fastrestart.snapshot_agent(list(results), quiesce, resume, _str_or_none("socket_path", socket_path) or "",
                                       list(arenas))


def _arena_args(name, nbytes, wait_s, connect_timeout_s, device, socket_dir):
    if not isinstance(name, str):
        raise ValueError("name: expected str")
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
        raise ValueError("bytes: expected a positive int, got %r" % (nbytes,))
    if not isinstance(device, str):
        raise ValueError("device: expected 'host', 'host:<name>' or 'cuda:<ordinal>'")
    return (name, nbytes, _number("wait_s", wait_s), _number("connect_timeout_s", connect_timeout_s), device,
            _str_or_none("socket_dir", socket_dir))


def reserve_arena(name="kv", bytes=None, *, wait_s=30.0, device="host", socket_dir=None,  # noqa: A002
                  connect_timeout_s=5.0):
    """Reserve a KV arena's address range in this process, backed by the placeholder (docs/engine_loader.md,
    "KV arenas"); the daemon is not asked yet. Returns an Arena: ``base``, ``bytes`` (rounded up to the page
    or VMM granule), ``leased``, ``placeholder_bytes``, ``lease`` (the last swap_in's dict, or None),
    ``view(offset, shape, dtype)`` (a DLPack tensor over the range: ``torch.from_dlpack(arena.view(...))``)
    and ``swap_in()``, which leases the arena from the daemon of `device` (waiting at most `wait_s` for the
    previous holder's exit, without the GIL) and maps it at the same address; it returns the lease's fields
    (created, resized, previous_bytes, previous_holder_pid, waited_s, leases, generation, seconds).

    The placeholder aliases: until swap_in(), only memory rewritten before it is read after the swap may
    live in the range. Errors: ValueError naming the argument, TimeoutError for a lease that waited
    `wait_s`, RuntimeError with the library's message otherwise (no daemon, another size held by this
    process, ...). A failed swap_in() leaves the placeholder; it can be retried.
    """
    return _fastrestart.reserve_arena(*_arena_args(name, bytes, wait_s, connect_timeout_s, device, socket_dir))


def lease_arena(name="kv", bytes=None, *, wait_s=30.0, device="host", socket_dir=None,  # noqa: A002
                connect_timeout_s=5.0):
    """reserve_arena() then swap_in(): the arena's memory at once (a live start). The lease's fields are in
    the returned Arena's ``lease``."""
    a = reserve_arena(name, bytes, wait_s=wait_s, device=device, socket_dir=socket_dir,
                      connect_timeout_s=connect_timeout_s)
    a.swap_in()
    return a


def find_arena(name="kv", *, device="host", socket_dir=None, connect_timeout_s=5.0):
    """What the daemon of `device` holds under `name`, from its status (nothing is leased or made): a dict
    with name, bytes (reserve exactly this many to lease it without a resize), holder_pid (None: none),
    leases and waiting (leases waiting now for the holder's exit); None when it holds no such arena. RuntimeError when there is no daemon."""
    if not isinstance(name, str):
        raise ValueError("name: expected str")
    return _fastrestart.find_arena(name, _number("connect_timeout_s", connect_timeout_s), device,
                                   _str_or_none("socket_dir", socket_dir))


def arena_line(arena):
    """The engine's arena line for `arena`'s last lease (docs/supervisor.md, "The engine's arena line"), the
    line an engine prints so that fastrestartd records its lease: ``fastrestart-arena: leased name=kv
    bytes=... waited_s=... swap_s=... generation=...`` without a newline; "" when it was never leased.
    engine_loader writes it (fastrestart::arena_line), for every engine."""
    if not isinstance(arena, Arena):
        raise TypeError("arena_line: expected an Arena, got %s" % type(arena).__name__)
    return _fastrestart.arena_line(arena)


def arena_fallback_line(reason):
    """The engine's arena line when it allocates its KV cache itself: ``fastrestart-arena: fallback
    reason="..."``, `reason` (its str()) made one line, cut at 512 bytes and quoted (engine_loader's
    fastrestart::arena_fallback_line)."""
    return _fastrestart.arena_fallback_line(str(reason))

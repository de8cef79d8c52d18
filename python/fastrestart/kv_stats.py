"""An engine's word on its KV cache's survival, for fastrestartd's status and /metrics (docs/kv-survival.md,
"In fastrestartd's status"); the Python twin of engine_loader's ``fastrestart/kv_stats.h``, same text form.

    r = fastrestart.kv_stats.KvStatsReporter()      # the file from $FASTRESTART_KV_STATS_FILE, a random id
    print(r.line(stats), flush=True)                  # once, after the cache was rebuilt from the arena
    r.write(stats)                                    # whenever the counters changed (atomic rename)

``stats`` is a ``KvStats``: location (arena | private), header (empty | valid | the mismatch that dropped
the index), blocks, block_tokens, recovered, dropped ({reason: blocks}), requests, query_tokens, hit_tokens.
"""

import os
import re

ENV = "FASTRESTART_KV_STATS_FILE"
_WORD = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class KvStats:
    __slots__ = ("location", "header", "blocks", "block_tokens", "recovered", "dropped", "requests",
                 "query_tokens", "hit_tokens")

    def __init__(self, location="arena", header="empty", blocks=0, block_tokens=0, recovered=0, dropped=None,
                 requests=0, query_tokens=0, hit_tokens=0):
        self.location = location
        self.header = header
        self.blocks = blocks
        self.block_tokens = block_tokens
        self.recovered = recovered
        self.dropped = dict(dropped or {})
        self.requests = requests
        self.query_tokens = query_tokens
        self.hit_tokens = hit_tokens


def _word(w):
    return w if _WORD.match(str(w)) else "unknown"


def _count(v):
    v = int(v)
    if v < 0:
        raise ValueError("a count below 0: %d" % v)
    return v


def kv_stats_text(stats, id_):
    """The text form: 'fastrestart-kv: id=<id> location=... ...' (no newline). Reasons that are not a word
    are left out, as engine_loader does."""
    out = ["fastrestart-kv:", "id=" + id_, "location=" + _word(stats.location), "header=" + _word(stats.header),
           "blocks=%d" % _count(stats.blocks), "block_tokens=%d" % _count(stats.block_tokens),
           "recovered=%d" % _count(stats.recovered)]
    for reason in sorted(stats.dropped):
        if _WORD.match(reason):
            out.append("dropped.%s=%d" % (reason, _count(stats.dropped[reason])))
    out += ["requests=%d" % _count(stats.requests), "query_tokens=%d" % _count(stats.query_tokens),
            "hit_tokens=%d" % _count(stats.hit_tokens)]
    return " ".join(out)


class KvStatsReporter:
    """The engine's reporter: a random id; ``path`` (default $FASTRESTART_KV_STATS_FILE; none: no file)."""

    def __init__(self, path=None):
        self.path = path if path else os.environ.get(ENV) or None
        self.id = os.urandom(8).hex()

    def line(self, stats):
        return kv_stats_text(stats, self.id)

    def write(self, stats):
        """Rewrites the file (a temporary file renamed over it); nothing without a path. OSError names it."""
        if not self.path:
            return
        tmp = "%s.tmp.%d" % (self.path, os.getpid())
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(self.line(stats) + "\n")
            os.rename(tmp, self.path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

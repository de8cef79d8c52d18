"""The loader's options: vLLM's ``--model-loader-extra-config`` JSON object, checked (docs/vllm-plugin.md).

vLLM hands the object to the loader unchanged as ``LoadConfig.model_loader_extra_config``. Every key is
checked here, before anything is loaded, so a typo fails the engine start naming the key instead of
silently selecting a default (vLLM's own ipc_cache loader rejects unknown keys the same way).
"""

import dataclasses
import math
import os

__all__ = ["Options", "OptionsError", "parse_options", "KEYS"]


class OptionsError(ValueError):
    """A bad ``--model-loader-extra-config`` for ``--load-format fastrestart``; the message names the key."""


@dataclasses.dataclass(frozen=True)
class Options:
    mode: str = "zero_copy"            # zero_copy: map the daemon's pool read-only; copy: own copy
    fallback: bool = True              # on a miss or an unusable daemon, load from disk (False: fail)
    connect_timeout_s: float = 5.0     # wait this long for the daemon's socket
    state_timeout_s: float = 300.0     # wait this long while the daemon is still loading the key
    socket_dir: str | None = None      # the daemon's socket directory (None: the default, docs/weightd.md)
    verify: bool = False               # rehash the mapped bytes against the daemon's digest


# key -> (default, checker). The checker returns the value to use or raises OptionsError.
def _mode(key, v):
    if v not in ("zero_copy", "copy"):
        raise OptionsError("%s: expected \"zero_copy\" or \"copy\", got %r" % (key, v))
    return v


def _bool(key, v):
    if not isinstance(v, bool):
        raise OptionsError("%s: expected true or false, got %r" % (key, v))
    return v


def _seconds(key, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= 86400:
        raise OptionsError("%s: expected a number of seconds within 0..86400, got %r" % (key, v))
    return float(v)


def _socket_dir(key, v):
    if v is None:
        return None
    if not isinstance(v, str) or not v or "\0" in v:
        raise OptionsError("%s: expected a directory path, got %r" % (key, v))
    if not os.path.isabs(v):
        raise OptionsError("%s: %r must be an absolute path (engines start in varying directories)" % (key, v))
    return v


KEYS = {
    "mode": _mode,
    "fallback": _bool,
    "connect_timeout_s": _seconds,
    "state_timeout_s": _seconds,
    "socket_dir": _socket_dir,
    "verify": _bool,
}


def parse_options(extra_config):
    """Options from vLLM's ``model_loader_extra_config`` (a dict, or None for none given).

    Raises OptionsError naming the first unknown key (with the accepted ones) or the key whose value is bad.
    """
    if extra_config is None:
        extra_config = {}
    if not isinstance(extra_config, dict):
        raise OptionsError("model_loader_extra_config: expected a JSON object for --load-format fastrestart, got %s"
                           % type(extra_config).__name__)
    unknown = sorted(str(k) for k in extra_config if k not in KEYS)
    if unknown:
        raise OptionsError("model_loader_extra_config: unknown key %r for --load-format fastrestart (accepted: %s)"
                           % (unknown[0], ", ".join(KEYS)))
    values = {k: KEYS[k]("model_loader_extra_config." + k, v) for k, v in extra_config.items()}
    return Options(**values)

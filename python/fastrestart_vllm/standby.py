"""The standby gate of a vLLM engine (docs/vllm.md, "Standby engines"; the protocol: docs/standby.md).

register() runs in every process vLLM starts, and calls gate(). Only one process may park on the single
descriptor fastrestartd passes, and it must park before any process of the engine initializes CUDA: that is
the first process, the one `vllm serve` runs in. It loads the plugins while it builds its CLI parser
(vllm/entrypoints/cli/main.py -> make_arg_parser -> AsyncEngineArgs.add_cli_args, vllm/engine/arg_utils.py),
before it parses the arguments, before setup_server binds the port and before it starts the engine core
process, which starts the workers; the release removes FASTRESTART_STANDBY_FD and FASTRESTART_STANDBY_LEVEL
from its environment, so none of the processes it starts afterwards parks: their gate passes at once.

Only the `pre_gpu` level exists here: a `warmed` vLLM standby would need the gate in the worker after
its CUDA graphs, across every worker of a tensor-parallel engine, which one descriptor cannot serve.
"""

import os
import time

__all__ = ["gate", "LEVELS", "StandbyError"]

LEVELS = ("pre_gpu",)


class StandbyError(RuntimeError):
    """fastrestartd asked for a standby this plugin cannot be (the engine must not start serving instead)."""


def _say(msg):
    # Straight to fd 2, like the result line (result_line.py): vLLM's logging may not reach it.
    os.write(2, f"fastrestart-standby: {msg} (pid {os.getpid()})\n".encode())


def gate():
    """Parks this process when fastrestartd started it as a standby: returns True once released, False
    when it is no standby (every process vLLM starts after a release). On `exit`, or when fastrestartd goes
    away, fastrestart.standby ends the process with status 0 and this never returns."""
    if not os.environ.get("FASTRESTART_STANDBY_FD"):
        return False
    level = os.environ.get("FASTRESTART_STANDBY_LEVEL", "")
    if level not in LEVELS:
        # Passing the gate would let a standby load, bind and serve: refuse, so fastrestartd counts a failure.
        raise StandbyError(f"FASTRESTART_STANDBY_LEVEL={level!r}: the vLLM plugin has a pre_gpu gate only "
                           f"([standby] level = \"pre_gpu\", docs/vllm.md)")
    try:
        import fastrestart.standby as standby
    except ImportError as e:
        raise StandbyError(f"FASTRESTART_STANDBY_FD is set but the fastrestart binding is missing: {e}") from None
    _say(f"parked at {level}")
    t = time.monotonic()
    released = standby.gate(level)
    if released:
        _say(f"released at {level} after {time.monotonic() - t:.3f} s parked")
    return released

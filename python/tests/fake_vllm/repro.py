"""The vLLM reproduction's own plumbing (not a vLLM module): its log lines and its process start.

Each step of an engine start writes `fake-vllm: step=NAME role=ROLE pid=PID` to stderr, in vLLM's order, so
tests can read the order back. A process of vLLM's structure (the engine core, a worker) is a real process,
started as multiprocessing's spawn starts vLLM's (a fresh interpreter, the environment, no inherited
descriptors), running spawn_main.py with the role and the parsed arguments.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def step(name, role, **extra):
    more = "".join(" %s=%s" % kv for kv in extra.items())
    sys.stderr.write("fake-vllm: step=%s role=%s pid=%d%s\n" % (name, role, os.getpid(), more))
    sys.stderr.flush()


def role_line(role):
    """The line each process of --processes writes once its plugins are loaded."""
    sys.stderr.write("fake-vllm: role=%s pid=%d standby_fd=%s listen_fds=%s\n" % (
        role, os.getpid(), os.environ.get("FASTRESTART_STANDBY_FD", "-"), os.environ.get("LISTEN_FDS", "-")))
    sys.stderr.flush()


def spawn(role, args):
    """Runs `role` (engine_core, worker) in a new process with `args` (an argparse Namespace); its exit code.
    The parser's `dispatch_function` stays behind: vLLM hands its engine core a VllmConfig built from the
    engine arguments, never the CLI's namespace, and the function is no JSON."""
    values = {k: v for k, v in vars(args).items() if k != "dispatch_function"}
    return subprocess.run([sys.executable, os.path.join(HERE, "spawn_main.py"), role, json.dumps(values)],
                          close_fds=True).returncode

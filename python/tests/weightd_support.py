"""What the Python tests share: a safetensors writer, a real fastrestart-weightd started and stopped, a
test's engine started with a standby's gate socket (spawn_engine), the gate's messages read from it
(read_gate_message), whether the binding has the gate at all (NO_GATE), and the end of a test's child
processes (stop_processes).

Used by test_binding, test_torch, test_arena, test_refengine, test_refengine_standby, test_refengine_tp, test_vllm_launch
and test_vllm_plugin (python/tests is their working directory).
"""

import json
import os
import signal
import socket
import struct
import subprocess
import tempfile
import time

import numpy as np

try:
    import fastrestart.standby  # noqa: F401 -- the engine's gate; the tests only need to know it is there
except ImportError as e:
    NO_GATE = f"the fastrestart binding has no standby module ({e})"
else:
    NO_GATE = ""

# What fake_torch (python/tests/fake_torch) prints when anything reaches CUDA.
CUDA_TOUCHED = "fake torch: torch.cuda."

DTYPES = {np.dtype("float32"): "F32", np.dtype("float16"): "F16", np.dtype("int64"): "I64",
          np.dtype("uint8"): "U8", np.dtype("bool"): "BOOL", np.dtype("float64"): "F64"}


def stop_processes(procs):
    """A test's end for the child processes it started (subprocess.Popen): each one still running is killed,
    every one is reaped and its pipes closed."""
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
        for f in (p.stdin, p.stdout, p.stderr):
            if f is not None:
                f.close()


def spawn_engine(test, env, level, launch):
    """A test's engine process, a standby when `level` is set: `env` gets FASTRESTART_STANDBY_FD (the child's
    end of a socket pair) and FASTRESTART_STANDBY_LEVEL (docs/standby.md, "The gate protocol"); launch(out,
    fds) starts it with its output to the file `out` and the descriptors `fds` inherited. Sets test.log (that
    file: engine-N.log in test.tmp) and appends the process to test.procs. Returns (the process, our end of
    the pair, with a 120 s timeout; None without `level`)."""
    ours = theirs = None
    fds = ()
    if level:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env.update(FASTRESTART_STANDBY_FD=str(theirs.fileno()), FASTRESTART_STANDBY_LEVEL=level)
        fds = (theirs.fileno(),)
    test.log = os.path.join(test.tmp, f"engine-{len(test.procs)}.log")
    with open(test.log, "wb") as out:
        p = launch(out, fds)
    if theirs is not None:
        theirs.close()
        ours.settimeout(120)
    test.procs.append(p)
    return p, ours


def checkpoint_dirs(prefix):
    """A test's temporary folder (named after `prefix`), the daemon's run folder in it and the path of the
    checkpoint file in it: (tmp, run_dir, ckpt)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    return tmp, os.path.join(tmp, "run"), os.path.join(tmp, "model.safetensors")


def read_text(path):
    """The whole text of the file at `path` (a child's log, read again at each check)."""
    with open(path) as f:
        return f.read()


def fake_model_dir(path, config):
    """A model directory as the reference engine reads it on fake_torch: config.json holding `config` and an
    empty model.safetensors (found by the engine's glob, never read)."""
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    open(os.path.join(path, "model.safetensors"), "wb").close()


def read_gate_message(test, sock, why):
    """The next message of a standby's gate on `sock` (one JSON line, docs/standby.md "The gate protocol"),
    parsed. Each read asserts, through `test`, that the socket is still open, with why() (called at each
    read, e.g. the engine's output so far) as the message."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(4096)
        test.assertTrue(chunk, why())
        data += chunk
    return json.loads(data)


def snapshot_exchange(path, op, timeout=30):
    """One request of the snapshot exchange (docs/snapshot.md, "The prepare/resume exchange") on the Unix
    socket `path`: {"op": op}, and the reply line parsed."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall((json.dumps({"op": op}) + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return json.loads(data)


def write_safetensors(path, tensors):
    """The safetensors format by hand (numpy arrays): u64 LE header length, JSON header, then the data."""
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        data = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": DTYPES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


class Weightd:
    """A fastrestart-weightd on `backend` ("host", or "cuda" on GPU 0) with its socket in run_dir and its
    output in log_path. start() returns once its socket accepts; a daemon that exits or never accepts fails
    the test `case` with its log."""

    def __init__(self, binary, run_dir, log_path, backend="host"):
        self.argv = [binary, "--socket-dir", run_dir, "--backend", backend] + (["--gpu", "0"] if backend == "cuda" else [])
        self.run_dir, self.log_path, self.backend = run_dir, log_path, backend
        self.proc = None

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def start(self, case, timeout=60):
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                case.fail("fastrestart-weightd (%s) exited: %s" % (self.backend, self.log()))
            names = os.listdir(self.run_dir) if os.path.isdir(self.run_dir) else []
            for name in (n for n in names if n.endswith(".sock")):
                try:
                    with socket.socket(socket.AF_UNIX) as s:
                        s.connect(os.path.join(self.run_dir, name))
                    return self
                except OSError:
                    pass
            time.sleep(0.02)
        case.fail("fastrestart-weightd (%s) did not accept: %s" % (self.backend, self.log()))

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Sends sig (unless it has exited) and waits; returns the exit code (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout)
        self.proc = None
        return rc

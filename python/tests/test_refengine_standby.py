"""The reference engine as a standby (docs/standby.md, "The gate protocol"), on a machine without torch.

The engine runs as a real process with a real socket pair (one end passed to it with pass_fds, as
fastrestartd does) and fake_torch/ in place of torch and transformers: it gets through its imports, the
config and the model on the meta device, then reaches the pre_gpu gate. Anything on CUDA fails in the
fake, naming the call, so these tests see exactly when the engine first touches the GPU and when it binds
its port. With real torch and a GPU, test_refengine covers the warmed level and the CUDA graph.

Run: PYTHONPATH=<build>/python python3 -m unittest -v test_refengine_standby   (ctest python_refengine_standby)
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINE = os.path.join(HERE, "..", "refengine", "fastrestart_refengine.py")
FAKE = os.path.join(HERE, "fake_torch")

try:
    import fastrestart.standby  # noqa: F401 -- the engine's gate; the test only needs to know it is there
except ImportError as e:
    NO_GATE = f"the fastrestart binding has no standby module ({e})"
else:
    NO_GATE = ""

CUDA_TOUCHED = "fake torch: torch.cuda."


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port):
    """True when nobody has the port bound (binding it ourselves succeeds)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@unittest.skipIf(bool(NO_GATE), NO_GATE)
class StandbyGateTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fr-refsb-")
        self.model = os.path.join(self.tmp, "model")
        os.makedirs(self.model)
        with open(os.path.join(self.model, "config.json"), "w") as f:
            json.dump({"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16", "vocab_size": 256}, f)
        open(os.path.join(self.model, "model.safetensors"), "wb").close()  # found by the glob, never read
        self.port = free_port()
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def start(self, level="pre_gpu", standby=True):
        """The engine with one end of a socket pair as FASTRESTART_STANDBY_FD; returns (proc, our end)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([FAKE, env.get("PYTHONPATH", "")])
        env.pop("FASTRESTART_STANDBY_FD", None)
        ours = theirs = None
        fds = ()
        if standby:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            env["FASTRESTART_STANDBY_FD"] = str(theirs.fileno())
            env["FASTRESTART_STANDBY_LEVEL"] = level
            fds = (theirs.fileno(),)
        self.log = os.path.join(self.tmp, f"engine-{len(self.procs)}.log")
        with open(self.log, "wb") as out:
            p = subprocess.Popen([sys.executable, ENGINE, "serve", self.model, "--port", str(self.port),
                                  "--load-format", "disk"], stdout=out, stderr=subprocess.STDOUT, env=env,
                                 pass_fds=fds)
        if theirs is not None:
            theirs.close()
            ours.settimeout(120)
        self.procs.append(p)
        return p, ours

    def output(self):
        with open(self.log) as f:
            return f.read()

    def read_parked(self, sock):
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(4096)
            self.assertTrue(chunk, "the socket closed before a parked message:\n" + self.output())
            data += chunk
        return json.loads(data)

    def test_pre_gpu_parks_before_cuda_binds_no_port_and_proceeds_on_release(self):
        p, sock = self.start("pre_gpu")
        with sock:
            msg = self.read_parked(sock)
            self.assertEqual(msg, {"op": "parked", "v": 1, "level": "pre_gpu", "pid": p.pid})
            out = self.output()
            self.assertIn("standby: parked at pre_gpu", out)
            self.assertNotIn(CUDA_TOUCHED, out)       # imports, config and the meta model done; no CUDA
            self.assertNotIn("listening on", out)
            self.assertTrue(port_is_free(self.port), "a parked standby has the engine's port bound")
            sock.sendall(b'{"op":"release"}\n')
            self.assertEqual(p.wait(120), 1)           # the fake's CUDA fails: the load fails, exit 1
        out = self.output()
        released, listening, cuda = (out.find("standby: released at pre_gpu"), out.find("listening on"),
                                     out.find(CUDA_TOUCHED))
        self.assertNotEqual(released, -1, out)
        self.assertTrue(0 <= released < listening < cuda, out)  # release, then the port, then the GPU

    def test_exit_and_end_of_file_end_a_parked_standby_with_status_0(self):
        for how in ("exit", "eof"):
            p, sock = self.start("pre_gpu")
            with sock:
                self.read_parked(sock)
                if how == "exit":
                    sock.sendall(b'{"op":"exit"}\n')
                else:
                    sock.shutdown(socket.SHUT_RDWR)
                self.assertEqual(p.wait(60), 0, how)
            out = self.output()
            self.assertNotIn(CUDA_TOUCHED, out, how)
            self.assertNotIn("listening on", out, how)

    def test_warmed_standby_passes_the_pre_gpu_gate_without_binding_the_port(self):
        p, sock = self.start("warmed")
        with sock:
            self.assertEqual(p.wait(120), 1)           # on to CUDA (fails in the fake) without parking
            sock.settimeout(5)
            self.assertEqual(sock.recv(4096), b"", "a warmed standby parked at pre_gpu")
        out = self.output()
        self.assertIn(CUDA_TOUCHED, out)
        self.assertNotIn("standby: parked", out)
        self.assertNotIn("listening on", out)          # its port would open after the warmed gate only

    def test_sigterm_ends_a_parked_standby(self):
        p, sock = self.start("pre_gpu")
        with sock:
            self.read_parked(sock)
            p.send_signal(signal.SIGTERM)
            self.assertEqual(p.wait(60), -signal.SIGTERM)
        self.assertNotIn(CUDA_TOUCHED, self.output())

    def test_an_engine_that_is_no_standby_binds_its_port_first(self):
        p, _ = self.start(standby=False)
        self.assertEqual(p.wait(120), 1)
        out = self.output()
        self.assertNotIn("standby:", out)
        self.assertTrue(0 <= out.find("listening on") < out.find(CUDA_TOUCHED), out)


if __name__ == "__main__":
    unittest.main()

"""The reference engine as a standby (docs/standby.md, "The gate protocol"), on a machine without torch.

The engine runs as a real process with a real socket pair (one end passed to it with pass_fds, as
fastrestartd does) and fake_torch/ in place of torch and transformers: it gets through its imports, the
config and the model on the meta device, then reaches the pre_gpu gate. Anything on CUDA fails in the
fake, naming the call, so these tests see exactly when the engine first touches the GPU and when it binds
its port. With real torch and a GPU, test_refengine covers the warmed level and the CUDA graph.

Run: PYTHONPATH=<build>/python python3 -m unittest -v test_refengine_standby   (ctest python_refengine_standby)
"""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import types
import unittest

from listen_support import listening_socket, popen_with_socket
from weightd_support import (CUDA_TOUCHED, NO_GATE, fake_model_dir, read_gate_message, read_text, spawn_engine,
                             stop_processes)

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINE = os.path.join(HERE, "..", "refengine", "fastrestart_refengine.py")
FAKE = os.path.join(HERE, "fake_torch")



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
        fake_model_dir(self.model, {"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16", "vocab_size": 256})
        self.port = free_port()
        self.procs = []

    def tearDown(self):
        stop_processes(self.procs)

    def start(self, level="pre_gpu", standby=True):
        """The engine with one end of a socket pair as FASTRESTART_STANDBY_FD; returns (proc, our end)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([FAKE, env.get("PYTHONPATH", "")])
        env.pop("FASTRESTART_STANDBY_FD", None)
        return spawn_engine(self, env, level if standby else None, lambda out, fds: subprocess.Popen(
            [sys.executable, ENGINE, "serve", self.model, "--port", str(self.port), "--load-format", "disk"],
            stdout=out, stderr=subprocess.STDOUT, env=env, pass_fds=fds))

    def output(self):
        return read_text(self.log)

    def read_parked(self, sock):
        return read_gate_message(self, sock, lambda: "the socket closed before a parked message:\n" + self.output())

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


def still_queued(ls, client):
    """True when `client`'s connection is still in `ls`'s accept queue: nobody accepted it (we take it now)."""
    ls.settimeout(5)
    try:
        conn, peer = ls.accept()
    except socket.timeout:
        return False
    with conn:
        return peer == client.getsockname()


@unittest.skipIf(bool(NO_GATE), NO_GATE)
class InheritedSocketTest(unittest.TestCase):
    """engine.listen = "supervisor": the listening socket passed as descriptor 3 (docs/refengine.md, "The
    socket fastrestartd passes"). The fake's CUDA fails, so the engine never gets ready: it must never
    accept, and the connections made meanwhile must still wait in the queue afterwards."""

    setUp, tearDown = StandbyGateTest.setUp, StandbyGateTest.tearDown
    output, read_parked = StandbyGateTest.output, StandbyGateTest.read_parked

    def start_inherited(self, ls, level=None, probe=None):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([FAKE, env.get("PYTHONPATH", "")])
        # --port names another port: the engine must serve on the passed socket, never bind its own.
        return spawn_engine(self, env, level, lambda out, fds: popen_with_socket(
            [sys.executable, ENGINE, "serve", self.model, "--port", str(self.port), "--load-format", "disk"], ls,
            env=env, keep=fds, probe=probe, stdout=out, stderr=subprocess.STDOUT))

    def test_an_engine_that_is_not_ready_never_accepts_and_binds_nothing(self):
        with listening_socket() as ls:
            client = socket.create_connection(ls.getsockname(), timeout=30)
            with client:
                p, _ = self.start_inherited(ls)
                self.assertEqual(p.wait(120), 1)  # the fake's CUDA fails: the load fails, exit 1
                out = self.output()
                self.assertIn("holding the socket fastrestartd passed", out)
                self.assertIn(CUDA_TOUCHED, out)
                self.assertNotIn("listening on", out)
                self.assertNotIn("accepting on the socket", out)
                self.assertTrue(port_is_free(self.port), out)
                self.assertTrue(still_queued(ls, client), "the engine accepted before it could serve:\n" + out)

    def test_the_private_endpoint_is_taken_and_not_accepted_on_before_ready(self):
        """readiness.endpoint = "private": the endpoint passed as descriptor 4 beside the socket is taken
        (no error for LISTEN_FDS=2) and, like the socket, never accepted on by an engine that is not ready."""
        with listening_socket() as ls, listening_socket() as probe:
            client = socket.create_connection(ls.getsockname(), timeout=30)
            check = socket.create_connection(probe.getsockname(), timeout=30)
            with client, check:
                p, _ = self.start_inherited(ls, probe=probe)
                self.assertEqual(p.wait(120), 1)  # the fake's CUDA fails: the load fails, exit 1
                out = self.output()
                self.assertIn("holding the socket fastrestartd passed", out)
                self.assertIn(CUDA_TOUCHED, out)
                self.assertNotIn("the socket fastrestartd passed:", out)  # no LISTEN_* error
                self.assertTrue(still_queued(ls, client), "the engine accepted before it could serve:\n" + out)
                self.assertTrue(still_queued(probe, check), "the engine accepted a check before it could serve:\n" + out)

    def test_a_parked_standby_holds_the_socket_without_accepting(self):
        with listening_socket() as ls:
            p, sock = self.start_inherited(ls, level="pre_gpu")
            with sock:
                self.read_parked(sock)
                client = socket.create_connection(ls.getsockname(), timeout=30)  # arrives while parked
                with client:
                    sock.sendall(b'{"op":"release"}\n')
                    self.assertEqual(p.wait(120), 1)  # released, then the fake's CUDA fails
                    out = self.output()
                    self.assertTrue(0 <= out.find("holding the socket") < out.find("standby: parked at pre_gpu")
                                    < out.find("standby: released") < out.find(CUDA_TOUCHED), out)
                    self.assertNotIn("accepting on the socket", out)
                    self.assertTrue(port_is_free(self.port), out)
                    self.assertTrue(still_queued(ls, client), "the standby accepted:\n" + out)

    def test_a_malformed_variable_fails_the_start_naming_it(self):
        with listening_socket() as ls:
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([FAKE, os.environ.get("PYTHONPATH", "")]))
            p = popen_with_socket([sys.executable, ENGINE, "serve", self.model, "--port", str(self.port)], ls,
                                  env=env, names="other", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            out = p.communicate(timeout=120)[0].decode()
            self.assertEqual(p.returncode, 1, out)
            self.assertIn("the socket fastrestartd passed: LISTEN_FDNAMES: 'other' has no socket named "
                          "'fastrestart-engine'", out)


class InheritedSocketServerTest(unittest.TestCase):
    """The HTTP server on a passed socket (fastrestart_refengine.http_server), in this process: answers on
    it, including a connection that waited in the queue before the server existed."""

    def test_serves_on_the_passed_socket(self):
        sys.path.insert(0, os.path.dirname(ENGINE))
        try:
            import fastrestart_refengine as ref
        finally:
            sys.path.pop(0)
        engine = types.SimpleNamespace(state="ready")
        args = types.SimpleNamespace(host="127.0.0.1", port=1)  # never bound: the socket is given
        with listening_socket() as ls:
            port = ls.getsockname()[1]
            early = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            early.connect()  # queued before the server exists
            server = ref.http_server(engine, args, ls)
            self.assertIs(server.socket, ls)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            try:
                for conn in (early, http.client.HTTPConnection("127.0.0.1", port, timeout=30)):
                    conn.request("GET", "/health")
                    r = conn.getresponse()
                    self.assertEqual((r.status, json.loads(r.read())), (200, {"status": "ok"}))
                    conn.close()
            finally:
                server.shutdown()
                server.server_close()


if __name__ == "__main__":
    unittest.main()

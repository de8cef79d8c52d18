"""fastrestart_vllm.launch against fastrestartd's vLLM stand-in (tests/supervisor/vllm_standin/vllm: NOT
vLLM; docs/vllm.md, "The port"). The stand-in binds --host:--port first as vLLM's API server does
(SO_REUSEADDR, no SO_REUSEPORT) and listens only once started; through the launcher, with a listening
socket passed as fastrestartd passes it (descriptor 3, LISTEN_FDS), it serves on that socket instead.
(The same against the vLLM reproduction with plugins and a standby: test_vllm_plugin.LaunchTest.)

Run: PYTHONPATH=<build>/python python3 -m unittest -v test_vllm_launch   (ctest python_vllm_launch)
"""

import errno
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from listen_support import listening_socket, popen_with_socket
from weightd_support import stop_processes

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(HERE, os.pardir, os.pardir, "tests", "supervisor", "vllm_standin")
VLLM = os.path.join(STANDIN, "vllm")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandinLaunchTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fr-vllm-launch-")
        self.model = os.path.join(self.tmp, "model")
        os.makedirs(self.model)
        self.procs = []

    def tearDown(self):
        stop_processes(self.procs)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def env(self):
        e = dict(os.environ)
        # The stand-in's package (the launcher imports vllm.entrypoints.cli.main from it) and the binding.
        e["PYTHONPATH"] = os.pathsep.join([os.path.join(STANDIN, "lib"), e.get("PYTHONPATH", "")])
        return e

    def log(self, i):
        return os.path.join(self.tmp, "engine-%d.log" % i)

    def output(self, i):
        with open(self.log(i)) as f:
            return f.read()

    def launch(self, ls, port, *flags):
        """`python3 -m fastrestart_vllm.launch serve MODEL --port PORT` with ls passed as descriptor 3."""
        i = len(self.procs)
        with open(self.log(i), "w") as out:
            p = popen_with_socket([sys.executable, "-m", "fastrestart_vllm.launch", "serve", self.model, "--host",
                                   "127.0.0.1", "--port", str(port)] + list(flags), ls, env=self.env(),
                                  stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p, i

    def wait_for(self, i, text, p):
        deadline = time.monotonic() + 120
        while text not in self.output(i):
            self.assertIsNone(p.poll(), self.output(i))
            self.assertLess(time.monotonic(), deadline, "no %r in:\n%s" % (text, self.output(i)))
            time.sleep(0.02)

    @staticmethod
    def get(conn, method, path, body=None):
        conn.request(method, path, body=json.dumps(body) if body is not None else None)
        r = conn.getresponse()
        return r.status, r.read()

    def test_without_the_hand_down_a_second_serve_fails_at_bind(self):
        with listening_socket() as live:  # the live engine, listening on its port
            p = subprocess.run([VLLM, "serve", self.model, "--host", "127.0.0.1", "--port",
                                str(live.getsockname()[1])], capture_output=True, text=True, timeout=60,
                               env=self.env())
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("OSError: [Errno %d] Address already in use" % errno.EADDRINUSE, p.stderr)
        self.assertNotIn("Application startup complete", p.stderr)

    def test_without_the_hand_down_it_accepts_only_once_started(self):
        port = free_port()
        with open(self.log(0), "w") as out:
            p = subprocess.Popen([VLLM, "serve", self.model, "--host", "127.0.0.1", "--port", str(port),
                                  "--standin-startup-delay", "1"], stdout=out, stderr=subprocess.STDOUT,
                                 env=self.env())
        self.procs.append(p)
        self.wait_for(0, "vLLM server version", p)
        while True:  # bound, not listening: refused until uvicorn's start, and then ready at once
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                conn.connect()
                break
            except ConnectionRefusedError:
                self.assertIsNone(p.poll(), self.output(0))
                time.sleep(0.02)
        self.assertEqual(self.get(conn, "GET", "/health")[0], 200)  # the first connection: never a 503
        conn.close()
        self.wait_for(0, "Application startup complete", p)

    def test_through_the_launcher_it_serves_on_the_passed_socket_and_a_second_one_starts_too(self):
        # vLLM's --port: not the socket's. Held here, listening: a stand-in that bound it would fail.
        with listening_socket() as held, listening_socket() as ls:
            other = held.getsockname()[1]
            port = ls.getsockname()[1]
            early = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            early.connect()  # before any engine: it waits in the queue
            p, i = self.launch(ls, other, "--standin-startup-delay", "0.3")
            self.assertEqual(self.get(early, "GET", "/health")[0], 200)  # answered once started, never 503
            status, body = self.get(early, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})
            self.assertEqual(status, 200, body)
            early.close()
            out = self.output(i)
            self.assertIn("fastrestart-vllm: serving on the socket fastrestartd passed (127.0.0.1:%d; "
                          "create_server_socket patched in vllm.entrypoints.openai.api_server)" % port, out)
            self.assertIn("--port %d ignored" % other, out)
            # A second engine on the same passed socket (a standby's start) gets past the bind that
            # fails without the hand-down, and serves as well.
            p2, i2 = self.launch(ls, port, "--standin-startup-delay", "0.1")
            self.wait_for(i2, "Application startup complete", p2)
            for proc in (p, p2):
                proc.send_signal(signal.SIGTERM)
                self.assertEqual(proc.wait(60), 0)
            # The passed socket is still fastrestartd's: listening after both engines are gone.
            with socket.create_connection(("127.0.0.1", port), timeout=30):
                pass

    def test_a_passed_socket_that_is_not_tcp_is_one_line_and_no_traceback(self):
        # A listening Unix socket at descriptor 3: refused before vLLM runs, naming what it is.
        with tempfile.TemporaryDirectory() as d, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as u:
            u.bind(os.path.join(d, "s"))
            u.listen(4)
            p, i = self.launch(u, free_port())
            self.assertEqual(p.wait(60), 1, self.output(i))
        out = self.output(i)
        self.assertEqual(out, "fastrestart-vllm: the socket fastrestartd passed: LISTEN_FDS: descriptor 3 is a "
                              "listening Unix (AF_UNIX) stream socket, not a listening TCP socket\n")

    def test_a_listen_pid_of_another_process_is_named(self):
        # The variables were meant for another process (a wrapper forked): said in one line, and vLLM then
        # binds --port itself (held here: it fails at bind, as it would on fastrestartd's port).
        with listening_socket() as held, listening_socket() as ls:
            with open(self.log(0), "w") as out:
                p = popen_with_socket([sys.executable, "-m", "fastrestart_vllm.launch", "serve", self.model, "--host",
                                       "127.0.0.1", "--port", str(held.getsockname()[1])], ls, env=self.env(), pid=1,
                                      stdout=out, stderr=subprocess.STDOUT)
            self.procs.append(p)
            self.assertEqual(p.wait(60), 1, self.output(0))
        out = self.output(0)
        self.assertRegex(out, r"(?m)^fastrestart: LISTEN_PID=1 is not this process \(pid %d\): the passed socket "
                              r"\(LISTEN_FDS\) is another process's; not using it" % p.pid)
        self.assertIn("Address already in use", out)

    def test_other_subcommands_and_a_start_without_listen_fds_are_vllm_as_is(self):
        port = free_port()
        env = self.env()
        for k in ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"):
            env.pop(k, None)
        with open(self.log(0), "w") as out:
            p = subprocess.Popen([sys.executable, "-m", "fastrestart_vllm.launch", "serve", self.model, "--host",
                                  "127.0.0.1", "--port", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                 env=env)
        self.procs.append(p)
        self.wait_for(0, "Application startup complete", p)
        self.assertNotIn("fastrestart-vllm:", self.output(0))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.assertEqual(self.get(conn, "GET", "/health")[0], 200)
        conn.close()
        r = subprocess.run([sys.executable, "-m", "fastrestart_vllm.launch", "bogus"], capture_output=True,
                           text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage: vllm {serve,preload}", r.stderr)


if __name__ == "__main__":
    unittest.main()

"""fastrestart.inherited_socket (docs/python.md, "The socket fastrestartd passes"): real processes started
with a listening socket as descriptor 3 and the LISTEN_* variables, as fastrestartd starts an engine with
engine.listen = "supervisor".

Run: PYTHONPATH=<build>/python python3 -m unittest -v test_listen   (ctest python_listen)
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

import fastrestart
from listen_support import FDNAME, listening_socket, popen_with_socket

# The child: takes the socket, reports what it got and what a process it starts sees, then serves the
# connections already waiting in the backlog (one line each).
CHILD = r"""
import json, os, subprocess, sys
import fastrestart
name = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != "-" else None
try:
    s = fastrestart.inherited_socket(name)
except ValueError as e:
    print(json.dumps({"error": str(e), "env": {k: os.environ.get(k) for k in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")}}))
    sys.exit(3)
if s is None:
    print(json.dumps({"socket": None, "env": {k: os.environ.get(k) for k in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")}}))
    sys.exit(0)
grandchild = subprocess.run([sys.executable, "-c",
    "import json, os, fastrestart\n"
    "try:\n    os.fstat(3); fd3 = True\nexcept OSError:\n    fd3 = False\n"
    "print(json.dumps({'fd3': fd3, 'listen': [k for k in os.environ if k.startswith('LISTEN_')], "
    "'again': fastrestart.inherited_socket() is not None}))"], capture_output=True, text=True, check=True)
print(json.dumps({"socket": {"fd": s.fileno(), "port": s.getsockname()[1], "inheritable": s.get_inheritable(),
                             "blocking": s.getblocking()},
                  "env": [k for k in os.environ if k.startswith("LISTEN_")],
                  "again": fastrestart.inherited_socket() is not None,
                  "grandchild": json.loads(grandchild.stdout)}), flush=True)
for _ in range(int(os.environ.get("SERVE", "0"))):
    c, _ = s.accept()
    with c:
        c.sendall(b"served by %d\n" % os.getpid())
"""


# Takes both sockets with inherited_sockets(): the two listening sockets are put at 3 and 4 first (argv:
# their descriptors, then LISTEN_FDNAMES), as fastrestartd passes them with readiness.endpoint = "private".
BOTH = r"""
import json, os, sys
import fastrestart
a, b = int(sys.argv[1]), int(sys.argv[2])
os.dup2(a, 3); os.dup2(b, 4)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS=sys.argv[3], LISTEN_FDNAMES=sys.argv[4])
try:
    serve, probe = fastrestart.inherited_sockets()
except ValueError as e:
    print(json.dumps({"error": str(e)}))
    sys.exit(0)
print(json.dumps({"serve": serve and serve.fileno(), "probe": probe and probe.fileno(),
                  "env": [k for k in os.environ if k.startswith("LISTEN_")],
                  "inheritable": [s.get_inheritable() for s in (serve, probe) if s]}))
"""


class InheritedSocketsTest(unittest.TestCase):
    def both(self, fds, names, second_listens=True):
        with listening_socket() as a, socket.socket() as b:
            b.bind(("127.0.0.1", 0))
            if second_listens:
                b.listen(4)
            out = subprocess.run([sys.executable, "-c", BOTH, str(a.fileno()), str(b.fileno()), fds, names],
                                 pass_fds=(a.fileno(), b.fileno()), capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            return json.loads(out.stdout)

    def test_the_socket_and_the_private_endpoint_are_taken_together(self):
        self.assertEqual(self.both("2", "fastrestart-engine:fastrestart-probe"),
                         {"serve": 3, "probe": 4, "env": [], "inheritable": [False, False]})

    def test_without_the_endpoint_only_the_socket(self):
        self.assertEqual(self.both("1", "fastrestart-engine"), {"serve": 3, "probe": None, "env": [], "inheritable": [False]})

    def test_an_endpoint_that_does_not_listen_is_an_error_naming_it(self):
        got = self.both("2", "fastrestart-engine:fastrestart-probe", second_listens=False)
        self.assertIn("descriptor 4 is a non-listening IPv4 (AF_INET) TCP stream socket, not a listening TCP socket", got.get("error", ""), got)


class InheritedSocketTest(unittest.TestCase):
    def run_child(self, sock, *args, pass_fds=None, **kw):
        extra = {"pass_fds": pass_fds} if pass_fds is not None else {}
        p = popen_with_socket([sys.executable, "-c", CHILD] + list(args), sock, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, **kw, **extra)
        out, err = p.communicate(timeout=60)
        self.stderr = err
        lines = out.splitlines()
        self.assertTrue(lines, "no output; stderr:\n" + err)
        return p.returncode, json.loads(lines[0]), p

    def test_an_engine_takes_the_socket_and_serves_what_waited_in_the_backlog(self):
        with listening_socket() as ls:
            port = ls.getsockname()[1]
            # Connected before the engine even started: the kernel holds them in the accept queue.
            clients = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(3)]
            env = dict(os.environ, SERVE="3")
            code, got, p = self.run_child(ls, FDNAME, env=env)
            self.assertEqual(code, 0, got)
            self.assertEqual(got["socket"], {"fd": 3, "port": port, "inheritable": False, "blocking": True})
            self.assertEqual(got["env"], [])          # LISTEN_* gone from its environment
            self.assertFalse(got["again"])            # a second call finds nothing
            self.assertEqual(got["grandchild"], {"fd3": False, "listen": [], "again": False})
            for c in clients:
                with c:
                    self.assertEqual(c.makefile().readline(), "served by %d\n" % p.pid)

    def test_without_a_name_or_without_names_the_only_socket_is_taken(self):
        with listening_socket() as ls:
            for name, names in (("-", FDNAME), (FDNAME, None), ("-", None)):
                code, got, _ = self.run_child(ls, name, names=names)
                self.assertEqual(code, 0, (name, names, got))
                self.assertEqual(got["socket"]["fd"], 3, (name, names))

    def test_nothing_passed_or_passed_to_another_process_is_none(self):
        saved = {k: os.environ.pop(k, None) for k in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")}
        try:
            self.assertIsNone(fastrestart.inherited_socket())
            os.environ["LISTEN_FDS"] = "1"           # LISTEN_PID unset: not for us
            self.assertIsNone(fastrestart.inherited_socket())
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v
        with listening_socket() as ls:
            # LISTEN_PID another process's (a parent's variables, inherited): left alone for the one they name.
            code, got, _ = self.run_child(ls, pid=1)
            self.assertEqual(code, 0, got)
            self.assertIsNone(got["socket"])
            self.assertEqual(got["env"], {"LISTEN_PID": "1", "LISTEN_FDS": "1", "LISTEN_FDNAMES": FDNAME})
            # ... and said in one line (a wrapper that forked instead of exec'ing the engine).
            self.assertRegex(self.stderr, r"^fastrestart: LISTEN_PID=1 is not this process \(pid \d+\): the passed socket "
                                          r"\(LISTEN_FDS\) is another process's; not using it \(a wrapper [^\n]*\)\n$")
            code, got, _ = self.run_child(ls, fds="0")
            self.assertEqual((code, got["socket"]), (0, None))
            self.assertEqual(got["env"], {"LISTEN_PID": None, "LISTEN_FDS": None, "LISTEN_FDNAMES": None})

    def test_malformed_variables_are_errors_naming_them(self):
        with listening_socket() as ls:
            cases = [
                (dict(fds="x"), "LISTEN_FDS: expected an integer >= 0, got 'x'"),
                (dict(fds=" 1"), "LISTEN_FDS: expected an integer >= 0, got ' 1'"),
                (dict(fds="1_0"), "LISTEN_FDS: expected an integer >= 0, got '1_0'"),
                (dict(pid="12abc"), "LISTEN_PID: expected an integer >= 1, got '12abc'"),
                (dict(fds="2", names=FDNAME), "LISTEN_FDNAMES: 'fastrestart-engine' names 1 socket(s), LISTEN_FDS passes 2"),
                (dict(names="other"), "LISTEN_FDNAMES: 'other' has no socket named 'fastrestart-engine'"),
                (dict(fds="2", names=None), "LISTEN_FDS: 2 sockets passed; name the one to serve on"),
            ]
            for kw, want in cases:
                code, got, _ = self.run_child(ls, FDNAME if "names" in kw and kw["names"] == "other" else "-", **kw)
                self.assertEqual(code, 3, (kw, got))
                self.assertIn(want, got["error"], kw)
                if "pid" not in kw:  # ours: removed even on an error, so no child takes it
                    self.assertEqual(got["env"], {"LISTEN_PID": None, "LISTEN_FDS": None, "LISTEN_FDNAMES": None})

    def test_a_descriptor_that_is_no_listening_socket_is_an_error_naming_it(self):
        r, w = os.pipe()
        try:
            code, got, _ = self.run_child(None, pass_fds=(r,))
            self.assertEqual(code, 3, got)
            self.assertIn("LISTEN_FDS: descriptor 3 is a pipe, not a listening TCP socket", got["error"])
        finally:
            os.close(r)
            os.close(w)
        with socket.socket() as unbound:  # a stream socket that does not listen
            code, got, _ = self.run_child(unbound)
            self.assertEqual(code, 3, got)
            self.assertIn("LISTEN_FDS: descriptor 3 is a non-listening IPv4 (AF_INET) TCP stream socket, not a "
                          "listening TCP socket", got["error"])

    def test_a_listening_socket_of_another_family_is_an_error_naming_it(self):
        # A Unix socket that listens (a socket unit's, a wrapper's): not what the engine serves HTTP on.
        with tempfile.TemporaryDirectory() as d, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as u:
            u.bind(os.path.join(d, "s"))
            u.listen(4)
            code, got, _ = self.run_child(u)
            self.assertEqual(code, 3, got)
            self.assertEqual(got["error"], "LISTEN_FDS: descriptor 3 is a listening Unix (AF_UNIX) stream socket, "
                                           "not a listening TCP socket")
            self.assertEqual(got["env"], {"LISTEN_PID": None, "LISTEN_FDS": None, "LISTEN_FDNAMES": None})
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as v6:  # IPv6 TCP: the right kind
            try:
                v6.bind(("::1", 0))
            except OSError as e:
                self.skipTest("no IPv6 loopback here: %s" % e)
            v6.listen(4)
            code, got, _ = self.run_child(v6)
            self.assertEqual(code, 0, got)
            self.assertEqual(got["socket"]["fd"], 3)

    def test_a_bad_name_argument_is_an_error(self):
        for bad in ("", "a:b", 3):
            with self.assertRaisesRegex(ValueError, "^name: "):
                fastrestart.inherited_socket(bad)


if __name__ == "__main__":
    unittest.main()

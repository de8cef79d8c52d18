"""fastrestart_vllm.launch against the vLLM reproduction (fake_vllm/: NOT vLLM; docs/vllm.md, "The port"),
with its stand-in engine (the `vllm` fastrestartd's tests run: tests/supervisor/vllm_standin/vllm) and
with its model loader's engine (fake_vllm/serve.py). The reproduction loads the general plugins while it
builds its parser, binds --host:--port (SO_REUSEADDR, no SO_REUSEPORT) in setup_server, starts the engine,
and listens through uvicorn's Config(backlog=2048) once started; through the launcher, with a listening
socket passed as fastrestartd passes it (descriptor 3, LISTEN_FDS), it serves on that socket instead, with
that socket's backlog, and refuses the flags under which vLLM would not serve on it.
(The same with the loader plugin installed and a standby: test_vllm_plugin.LaunchTest.)

Run: PYTHONPATH=<build>/python python3 -m unittest -v test_vllm_launch   (ctest python_vllm_launch)
"""

import errno
import http.client
import importlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import struct
import sys
import tempfile
import time
import unittest

from listen_support import listening_socket, popen_with_socket
from weightd_support import stop_processes

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "fake_vllm")
VLLM = os.path.join(HERE, os.pardir, os.pardir, "tests", "supervisor", "vllm_standin", "vllm")


def backlog(sock):
    """The accept queue length a listening socket has now (TCP_INFO's tcpi_sacked, what ss shows as Send-Q)."""
    return struct.unpack_from("=I", sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 32), 28)[0]


def somaxconn():
    with open("/proc/sys/net/core/somaxconn") as f:
        return int(f.read())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Procs(unittest.TestCase):
    """Engines started through the launcher or as `vllm`, killed at the end."""

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
        # The reproduction's package (the launcher imports vllm.entrypoints.cli.main from it) and the binding.
        e["PYTHONPATH"] = os.pathsep.join([FAKE, e.get("PYTHONPATH", "")])
        return e

    def log(self, i):
        return os.path.join(self.tmp, "engine-%d.log" % i)

    def layout(self, files):
        """A package tree of `files` ({relative path: text}) under the test's folder, every folder a
        package (an empty __init__.py where `files` gives none): its root."""
        root = os.path.join(self.tmp, "layout")
        for path, text in files.items():
            folder = os.path.dirname(path)
            while folder:
                os.makedirs(os.path.join(root, folder), exist_ok=True)
                init = os.path.join(root, folder, "__init__.py")
                if not os.path.exists(init) and os.path.join(folder, "__init__.py") not in files:
                    open(init, "w").close()
                folder = os.path.dirname(folder)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        return root

    def run_installed(self, root, body):
        """A Python process with `root` first on its path that makes a listening socket `s`, installs the
        launcher's hook on it (`hook`) and runs `body` (socket, sys and types imported)."""
        script = ("import socket, sys, types\n"
                  "from fastrestart_vllm import launch\n"
                  "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(5)\n"
                  "hook = launch.install(s)\n" + body)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)

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


class StandinLaunchTest(_Procs):
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
            self.assertIn("fastrestart-vllm: serving on the socket fastrestartd passed (127.0.0.1:%d, backlog 16)"
                          % port, out)
            # patched as vLLM imported them, after its parser (and the plugins) and before its bind
            self.assertLess(out.index("fake-vllm: step=plugins role=api_server"),
                            out.index("fastrestart-vllm: patched create_server_socket in "
                                      "vllm.entrypoints.launchers.launcher"))
            self.assertIn("fastrestart-vllm: patched Config(backlog=16) in uvicorn.config", out)
            self.assertIn("--port %d ignored" % other, out)
            self.assertEqual(backlog(ls), 16)  # uvicorn listened again with the socket's own backlog
            # vLLM's order, in the stand-in engine too
            steps = [x.split("step=")[1].split()[0] for x in out.splitlines() if x.startswith("fake-vllm: step=")]
            self.assertEqual(steps, ["plugins", "bind", "engine_core_spawn", "profile", "kv_cache", "graph_capture",
                                     "listen"], out)
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



class RefusalTest(_Procs):
    """Flags under which vLLM would not serve HTTP on the one socket create_server_socket returns: refused
    with a passed socket (one line naming the flag and why, exit 1, before vLLM's main runs); passed
    through untouched without one."""

    FORMS = {"--uds": [["--uds", "/tmp/x.sock"], ["--uds=/tmp/x.sock"]],
             "--grpc": [["--grpc"]],
             "--headless": [["--headless"]],
             "--data-parallel-multi-port-external-lb": [["--data-parallel-multi-port-external-lb"],
                                                        ["--data_parallel_multi_port_external_lb"]]}

    def test_each_refused_flag_is_named_and_vllm_never_starts(self):
        from fastrestart_vllm import launch
        self.assertEqual(sorted(launch.REFUSED), sorted(self.FORMS))
        for flag, forms in self.FORMS.items():
            for form in forms:
                with self.subTest(form=form), listening_socket() as ls:
                    p, i = self.launch(ls, ls.getsockname()[1], *form)
                    self.assertEqual(p.wait(60), 1, self.output(i))
                    out = self.output(i)
                    self.assertEqual(out, "fastrestart-vllm: %s is refused with the socket fastrestartd passed "
                                          "(engine.listen = \"supervisor\"): %s\n" % (flag, launch.REFUSED[flag]))
                    self.assertNotIn("fake-vllm:", out)  # vLLM's main never ran: no parser, no plugins

    def test_the_negated_boolean_and_values_that_look_like_flags_are_not_refused(self):
        from fastrestart_vllm import launch
        self.assertIsNone(launch.refused_flag(["m", "--no-data-parallel-multi-port-external-lb"]))
        self.assertIsNone(launch.refused_flag(["m", "--served-model-name", "x", "--", "--grpc"]))
        self.assertIsNone(launch.refused_flag(["m", "--grpc-port", "1"]))
        self.assertEqual(launch.refused_flag(["m", "--port", "1", "--headless"]), "--headless")
        # read as vLLM's parser reads it: the last of a boolean and its --no- form wins; --uds "" or None
        # (vLLM's optional_type) is no Unix socket, and the value after --uds is not a flag
        self.assertIsNone(launch.refused_flag(["m", "--data-parallel-multi-port-external-lb",
                                               "--no-data_parallel_multi_port_external_lb"]))
        self.assertEqual(launch.refused_flag(["m", "--no-data-parallel-multi-port-external-lb",
                                              "--data-parallel-multi-port-external-lb"]),
                         "--data-parallel-multi-port-external-lb")
        for form in (["--uds", "None"], ["--uds="], ["--uds", ""], ["--uds=None"]):
            self.assertIsNone(launch.refused_flag(["m"] + form), form)
        self.assertEqual(launch.refused_flag(["m", "--uds", "--grpc"]), "--uds")

    @unittest.skipIf(importlib.util.find_spec("yaml") is None, "PyYAML is not installed (vLLM's --config)")
    def test_a_refused_setting_in_the_config_file_is_refused_before_vllm_runs(self):
        from fastrestart_vllm import launch
        cases = (("grpc: true\n", "--grpc"), ("uds: /tmp/x.sock\n", "--uds"),
                 ("data_parallel_multi_port_external_lb: true\n", "--data-parallel-multi-port-external-lb"))
        for text, flag in cases:
            path = os.path.join(self.tmp, "serve.yaml")
            with open(path, "w") as f:
                f.write("port: 8000\n" + text)
            with self.subTest(config=text), listening_socket() as ls:
                p, i = self.launch(ls, ls.getsockname()[1], "--config", path)
                self.assertEqual(p.wait(60), 1, self.output(i))
                self.assertEqual(self.output(i), launch._refusal(flag) + "\n")  # no parser, no plugins
        # where vLLM puts the file's settings: after the model, before the rest, so the command line wins
        with open(path, "w") as f:
            f.write("data-parallel-multi-port-external-lb: true\nuds: null\nheadless: false\n")
        argv = ["m", "--config", path, "--no-data-parallel-multi-port-external-lb"]
        self.assertEqual(launch.config_argv(argv), ["m", "--data-parallel-multi-port-external-lb", "--uds", "None",
                                                    "--no-headless", "--no-data-parallel-multi-port-external-lb"])
        self.assertIsNone(launch.refused_flag(launch.config_argv(argv)))
        # a file vLLM cannot read either is left to vLLM, which says what is wrong with it
        self.assertEqual(launch.config_argv(["m", "--config", os.path.join(self.tmp, "none.yaml")]),
                         ["m", "--config", os.path.join(self.tmp, "none.yaml")])

    def test_what_only_the_parsed_arguments_show_is_refused_before_the_bind(self):
        # argparse takes an unambiguous abbreviation (vLLM's FlexibleArgumentParser keeps allow_abbrev) and
        # a --config file sets arguments too: neither is in argv as the flag's name, so the check of argv
        # lets them through, and ServeSubcommand.cmd's guard refuses them from what vLLM parsed. That is
        # after the plugins (the parser is built) and before setup_server binds or any engine starts.
        from fastrestart_vllm import launch
        for form, flag in ((["--headl"], "--headless"), (["--gr"], "--grpc"),
                           (["--data-parallel-multi"], "--data-parallel-multi-port-external-lb")):
            with self.subTest(form=form), listening_socket() as ls:
                self.assertIsNone(launch.refused_flag(["m"] + form))
                p = popen_with_socket([sys.executable, os.path.join(FAKE, "launch.py"), "serve", self.model,
                                       "--port", str(ls.getsockname()[1])] + form, ls, env=self.env(),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                self.procs.append(p)
                err = p.communicate(timeout=60)[1]
                self.assertEqual(p.returncode, 1, err)
                lines = err.splitlines()
                self.assertEqual([x for x in lines if "is refused" in x], [launch._refusal(flag)], err)
                self.assertIn("fastrestart-vllm: patched ServeSubcommand.cmd, run_multi_api_server in "
                              "vllm.entrypoints.cli.serve", lines)
                plugins = [i for i, x in enumerate(lines)
                           if x.startswith("fake-vllm: step=plugins role=api_server")]
                self.assertLess(plugins[0], lines.index(launch._refusal(flag)))  # vLLM's parser was built first
                self.assertNotIn("step=bind", err)
                self.assertNotIn("not reproduced", err)  # vLLM's own cmd never ran

    def test_several_api_servers_are_served_but_said_to_lose_the_backlog(self):
        # run_multi_api_server serves the passed socket from child processes the launcher does not reach:
        # not refused, but one line says that their listen() replaces the backlog.
        from fastrestart_vllm import launch
        with listening_socket() as ls:
            p = popen_with_socket([sys.executable, os.path.join(FAKE, "launch.py"), "serve", self.model,
                                   "--port", str(ls.getsockname()[1]), "--api-server-count", "2"], ls,
                                  env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.procs.append(p)
            err = p.communicate(timeout=60)[1]
        self.assertEqual(p.returncode, 2, err)  # the reproduction stops where vLLM would start API servers
        lines = err.splitlines()
        self.assertEqual(lines.count("fastrestart-vllm: " + launch.MULTI_SERVER_BACKLOG), 1, err)
        self.assertIn("fastrestart-vllm: patched ServeSubcommand.cmd, run_multi_api_server in "
                      "vllm.entrypoints.cli.serve", lines)
        self.assertLess(lines.index("fastrestart-vllm: " + launch.MULTI_SERVER_BACKLOG),
                        lines.index("fake-vllm: --api-server-count 2 is not reproduced (vLLM would start API "
                                    "server processes)"))
        self.assertNotIn("is refused", err)

    def test_the_serve_guard_in_the_alias_layout_is_installed_once_and_refuses(self):
        # vLLM's frontend layout (055e47c2): vllm/entrypoints/cli/serve.py a sys.modules alias of
        # vllm/frontend/entrypoints/cli/serve.py, whose module also has run_multi_api_server.
        serve = ("import sys\n"
                 "class ServeSubcommand:\n"
                 "    name = 'serve'\n"
                 "    @staticmethod\n"
                 "    def cmd(args):\n"
                 "        if args.api_server_count > 1:\n"
                 "            return run_multi_api_server(args)\n"
                 "        return 'served'\n"
                 "def run_multi_api_server(args):\n"
                 "    return 'several'\n")
        files = {
            "vllm/entrypoints/cli/serve.py":
                "import importlib, sys\n"
                "sys.modules[__name__] = importlib.import_module('vllm.frontend.entrypoints.cli.serve')\n",
            "vllm/frontend/entrypoints/cli/serve.py": serve,
            "vllm/frontend/entrypoints/launchers/launcher.py":
                "def create_server_socket(addr, *, reuse_port):\n    pass\n",
        }
        root = self.layout(files)
        r = self.run_installed(root,
                               "from vllm.entrypoints.cli.serve import ServeSubcommand\n"
                               "args = lambda **kw: types.SimpleNamespace(**dict(dict(uds=None, grpc=False,\n"
                               "    headless=False, data_parallel_multi_port_external_lb=False, api_server_count=1),\n"
                               "    **kw))\n"
                               "print(sorted(hook.patched))\n"
                               "print(ServeSubcommand.cmd(args()), ServeSubcommand.cmd(args(api_server_count=2)))\n"
                               "ServeSubcommand.cmd(args(grpc=True))\n")
        from fastrestart_vllm import launch
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stdout.splitlines(), [str([("vllm.frontend.entrypoints.cli.serve",
                                                       "ServeSubcommand.cmd, run_multi_api_server")]),
                                                 "served several"])
        err = r.stderr.splitlines()
        self.assertEqual(err.count("fastrestart-vllm: " + launch.MULTI_SERVER_BACKLOG), 1, r.stderr)
        self.assertEqual(err[-1], launch._refusal("--grpc"))

    def test_refused_mode_reads_the_parsed_arguments(self):
        from fastrestart_vllm import launch
        ns = lambda **kw: type("Args", (), dict(dict(uds=None, grpc=False, headless=False,  # noqa: E731
                                                    data_parallel_multi_port_external_lb=False), **kw))()
        self.assertIsNone(launch.refused_mode(ns()))
        self.assertEqual(launch.refused_mode(ns(uds="/tmp/x.sock")), "--uds")
        self.assertEqual(launch.refused_mode(ns(data_parallel_multi_port_external_lb=True)),
                         "--data-parallel-multi-port-external-lb")

    def test_without_a_passed_socket_they_pass_through_untouched(self):
        env = self.env()
        for k in ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"):
            env.pop(k, None)
        for flag, forms in self.FORMS.items():
            with self.subTest(flag=flag):
                r = subprocess.run([sys.executable, "-m", "fastrestart_vllm.launch", "serve", self.model, "--port",
                                    str(free_port()), "--standin-startup-delay", "0", "--standin-fail", "stop here"]
                                   + [os.path.join(self.tmp, "x.sock") if w == "/tmp/x.sock" else w for w in forms[0]],
                                   capture_output=True, text=True, env=env, timeout=60)
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertNotIn("fastrestart-vllm", r.stderr)
                self.assertIn("fake-vllm: step=plugins role=api_server", r.stderr)  # vLLM's main ran
                self.assertIn("stop here", r.stderr)

    def test_uds_without_a_passed_socket_is_served_by_vllm_as_asked(self):
        path = os.path.join(self.tmp, "vllm.sock")
        env = self.env()
        with open(self.log(0), "w") as out:
            p = subprocess.Popen([sys.executable, "-m", "fastrestart_vllm.launch", "serve", self.model, "--uds", path,
                                  "--standin-startup-delay", "0"], stdout=out, stderr=subprocess.STDOUT, env=env)
        self.procs.append(p)
        self.wait_for(0, "Application startup complete", p)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as u:
            u.settimeout(30)
            u.connect(path)
            u.sendall(b"GET /health HTTP/1.0\r\n\r\n")
            self.assertTrue(u.recv(64).startswith(b"HTTP/1.0 200"))


class BacklogTest(_Procs):
    """uvicorn listens again on the socket it serves with config.backlog (2048 by default; vLLM has no
    --backlog flag): through the launcher the passed socket's own backlog reaches uvicorn's Config."""

    def test_the_hook_gives_uvicorns_config_the_backlog_and_the_factory_the_socket(self):
        from fastrestart_vllm import launch
        sys.path.insert(0, FAKE)
        saved = {k: v for k, v in sys.modules.items() if k == "uvicorn" or k.startswith(("uvicorn.", "vllm"))}
        for k in saved:
            del sys.modules[k]
        hook = None
        try:
            with listening_socket(backlog=37) as ls:
                hook = launch.install(ls, backlog=launch.backlog_of(ls))
                self.assertEqual(hook.patched, [])  # nothing of vLLM or uvicorn imported by the launcher
                self.assertNotIn("uvicorn", sys.modules)
                launcher = importlib.import_module("vllm.entrypoints.launchers.launcher")  # as vLLM imports it
                self.assertEqual(hook.patched, [("uvicorn.config", "Config(backlog=37)"),
                                                ("vllm.entrypoints.launchers.launcher", "create_server_socket")])
                import uvicorn
                self.assertEqual(uvicorn.Config(app=None).backlog, 37)
                self.assertEqual(uvicorn.Config(app=None, backlog=2048).backlog, 37)  # fastrestartd's queue wins
                args = type("Args", (), {"host": "", "port": 1, "uds": None})()
                self.assertIs(launcher.setup_server(args)[1], ls)
                with self.assertRaisesRegex(RuntimeError, "asked for a second server socket"):
                    launcher.setup_server(args)
                launcher.serve_http(lambda s: None, ls, host="", port=1)
                self.assertEqual(backlog(ls), 37)
        finally:
            if hook is not None:
                sys.meta_path.remove(hook)
            for k in [k for k in sys.modules if k == "uvicorn" or k.startswith(("uvicorn.", "vllm"))]:
                del sys.modules[k]
            sys.modules.update(saved)
            sys.path.remove(FAKE)

    def test_an_alias_layout_and_a_by_name_import_both_get_the_socket(self):
        # vLLM's later layout: launchers/launcher.py a sys.modules alias of frontend/.../launcher.py, and
        # utils/listen.py taking the factory by name (`from ..launcher import create_server_socket`).
        files = {
            "vllm/entrypoints/launchers/launcher.py":
                "import importlib, sys\n"
                "sys.modules[__name__] = importlib.import_module('vllm.frontend.entrypoints.launchers.launcher')\n",
            "vllm/entrypoints/launchers/utils/listen.py": "from ..launcher import create_server_socket\n",
            "vllm/frontend/entrypoints/launchers/launcher.py":
                "def create_server_socket(addr, *, reuse_port):\n    raise OSError('bound')\n",
        }
        root = self.layout(files)
        r = self.run_installed(root,
                               "assert 'vllm' not in sys.modules\n"
                               "from vllm.entrypoints.launchers.utils import listen\n"
                               "from vllm.entrypoints.launchers import launcher\n"
                               "assert listen.create_server_socket(('', 1), reuse_port=False) is s\n"
                               "print(sorted(hook.patched))\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        # patched once, in the defining module, before listen.py took it by name: listen.py holds the patch
        self.assertEqual(r.stdout.strip(), str([("vllm.frontend.entrypoints.launchers.launcher",
                                                 "create_server_socket")]))

    def test_a_vllm_without_the_factory_is_refused_before_anything_is_imported(self):
        from fastrestart_vllm import launch
        with listening_socket() as ls:
            with self.assertRaisesRegex(SystemExit, "has no create_server_socket in any of json, vllm.no_such_module"
                                        ".*engine.listen = \"engine\""):
                launch.install(ls, modules=("json", "vllm.no_such_module"))

    def test_without_the_launcher_uvicorn_resets_the_queue_to_2048(self):
        # The reproduction itself, handed the socket by hand as the launcher would without its Config patch.
        r = subprocess.run([sys.executable, "-c", "import socket, sys; sys.path.insert(0, %r)\n"
                            "from vllm.entrypoints.launchers import launcher\n"
                            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(37)\n"
                            "launcher.serve_http(lambda s: None, s, host='', port=0)\n"
                            "import struct; print(struct.unpack_from('=I', s.getsockopt(socket.IPPROTO_TCP, "
                            "socket.TCP_INFO, 32), 28)[0])" % FAKE], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(int(r.stdout), min(2048, somaxconn()))

    def test_through_the_launcher_the_passed_backlog_survives_uvicorns_listen(self):
        with listening_socket(backlog=37) as ls:
            p, i = self.launch(ls, ls.getsockname()[1], "--standin-startup-delay", "0")
            self.wait_for(i, "Application startup complete", p)
            self.assertEqual(backlog(ls), 37)
            self.assertIn("(127.0.0.1:%d, backlog 37)" % ls.getsockname()[1], self.output(i))

    def test_fastrestart_listen_backlog_overrides_and_a_bad_value_is_named(self):
        with listening_socket(backlog=37) as ls:
            env = self.env()
            env["FASTRESTART_LISTEN_BACKLOG"] = "64"
            with open(self.log(0), "w") as out:
                p = popen_with_socket([sys.executable, "-m", "fastrestart_vllm.launch", "serve", self.model, "--port",
                                       str(ls.getsockname()[1]), "--standin-startup-delay", "0"], ls, env=env,
                                      stdout=out, stderr=subprocess.STDOUT)
            self.procs.append(p)
            self.wait_for(0, "Application startup complete", p)
            self.assertEqual(backlog(ls), 64)
            env["FASTRESTART_LISTEN_BACKLOG"] = "0"
            with open(self.log(1), "w") as out:
                p = popen_with_socket([sys.executable, "-m", "fastrestart_vllm.launch", "serve", self.model], ls,
                                      env=env, stdout=out, stderr=subprocess.STDOUT)
            self.procs.append(p)
            self.assertEqual(p.wait(60), 1)
            self.assertEqual(self.output(1), "fastrestart-vllm: FASTRESTART_LISTEN_BACKLOG: expected an integer "
                                             "1..65535, got '0'\n")


@unittest.skipIf(importlib.util.find_spec("numpy") is None, "numpy is not installed (the loader engine's tensors)")
class OrderTest(unittest.TestCase):
    """vLLM's order, through the reproduction with its loader engine and vLLM's process structure
    (--processes) and a general plugin installed through its entry point: in the API server the plugin
    loads while the parser is built, before the bind; the engine core starts after the bind and loads
    the plugin itself, then the worker does, then the worker's init_device, load_model, profile, KV cache
    and graph capture; uvicorn listens last, with the passed socket's backlog through the launcher."""

    def setUp(self):
        sys.path.insert(0, HERE)
        from test_vllm_plugin import make_model
        sys.path.remove(HERE)
        self.tmp = tempfile.mkdtemp(prefix="fr-vllm-order-")
        self.model = os.path.join(self.tmp, "model")
        make_model(self.model)
        site = os.path.join(self.tmp, "site")
        os.makedirs(os.path.join(site, "orderplug-0.dist-info"))
        with open(os.path.join(site, "orderplug-0.dist-info", "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: orderplug\nVersion: 0\n")
        with open(os.path.join(site, "orderplug-0.dist-info", "entry_points.txt"), "w") as f:
            f.write("[vllm.general_plugins]\norderplug = orderplug:register\n")
        with open(os.path.join(site, "orderplug.py"), "w") as f:
            f.write("import os\ndef register():\n    os.write(2, b'orderplug: loaded pid=%d\\n' % os.getpid())\n")
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join([site, FAKE, os.environ.get("PYTHONPATH", "")]))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def steps(self, err):
        return [line for line in err.splitlines() if line.startswith(("orderplug:", "fake-vllm: step="))]

    def test_plugins_at_parser_build_then_bind_then_engine_core_then_profile_kv_graphs(self):
        with listening_socket(backlog=29) as ls:
            p = popen_with_socket([sys.executable, os.path.join(FAKE, "launch.py"), "serve", self.model, "--port",
                                   str(ls.getsockname()[1]), "--processes"], ls, env=self.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            out, err = p.communicate(timeout=300)
        self.assertEqual(p.returncode, 0, err)
        api, names = p.pid, []
        for line in self.steps(err):
            pid = int(line.split("pid=")[1].split()[0])
            who = "api" if pid == api else "child"
            names.append("%s %s" % (who, line.split("step=")[1].split()[0] if "step=" in line else "plugin"))
        # the engine core and worker are separate processes: each loads the plugin once
        self.assertEqual(names, ["api plugin", "api plugins", "api bind", "api engine_core_spawn",
                                 "child plugin", "child plugins", "child worker_spawn",
                                 "child plugin", "child plugins", "child init_device", "child load_model",
                                 "child profile", "child kv_cache", "child graph_capture", "api listen"], err)
        self.assertIn("fake-vllm: step=listen role=api_server pid=%d backlog=29" % api, err)
        server = [json.loads(x) for x in out.splitlines() if x.startswith('{"server"')][0]["server"]
        self.assertEqual(server["backlog"], 29)

    def test_without_the_launcher_uvicorn_listens_with_2048(self):
        p = subprocess.run([sys.executable, os.path.join(FAKE, "serve.py"), self.model, "--host", "127.0.0.1",
                            "--port", "0"], capture_output=True, text=True, env=self.env, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["server"]["backlog"], min(2048, somaxconn()))
        self.assertLess(p.stderr.index("orderplug: loaded"), p.stderr.index("fake-vllm: step=bind"))


if __name__ == "__main__":
    unittest.main()

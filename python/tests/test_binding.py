"""The Python binding against a real fastrestart-weightd (host backend).

Run: PYTHONPATH=<build>/python FR_WEIGHTD_BIN=<build>/src/daemon/fastrestart-weightd \
     /usr/bin/python3 -m unittest -v test_binding       (ctest: python_binding)
"""

import gc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import unittest

import numpy as np

import fastrestart
import fastrestart.standby
from weightd_support import Weightd, checkpoint_dirs, snapshot_exchange, write_safetensors

WEIGHTD = os.environ.get("FR_WEIGHTD_BIN", "")

def to_numpy(t):
    """np.from_dlpack (no copy); numpy < 1.25 imports no DLPack bool, so BOOL goes through .numpy()."""
    if t.dtype == "BOOL" and np.lib.NumpyVersion(np.__version__) < "1.25.0":
        return t.numpy()
    return np.from_dlpack(t)


def make_tensors(seed):
    rng = np.random.default_rng(seed)
    return {
        "model.embed.weight": rng.standard_normal((64, 32)).astype(np.float32),
        "model.layers.0.w": rng.standard_normal((8, 4, 2)).astype(np.float16),
        "model.layers.0.ids": np.arange(17, dtype=np.int64),
        "model.mask": rng.integers(0, 2, size=(5, 3)).astype(bool),
        "model.bytes": rng.integers(0, 256, size=(3,), dtype=np.uint8),
        "model.scale": np.array(3.5, dtype=np.float64),
    }


@unittest.skipUnless(WEIGHTD and os.access(WEIGHTD, os.X_OK), "FR_WEIGHTD_BIN is not set to fastrestart-weightd")
class BindingTest(unittest.TestCase):
    def setUp(self):
        self.tmp, self.run_dir, self.ckpt = checkpoint_dirs("fr-py-")
        self.tensors = make_tensors(7)
        write_safetensors(self.ckpt, self.tensors)
        self.config = {"arch": "TestForCausalLM", "dtype": "mixed", "tp_rank": 0}
        self.daemon = None

    def tearDown(self):
        self.stop_daemon()
        gc.collect()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start_daemon(self):
        self.daemon = Weightd(WEIGHTD, self.run_dir, os.path.join(self.tmp, "weightd.log")).start(self)

    def stop_daemon(self, sig=signal.SIGTERM):
        if self.daemon is not None:
            self.daemon.stop(sig, timeout=20)
            self.daemon = None

    def attach(self, **kw):
        kw.setdefault("socket_dir", self.run_dir)
        return fastrestart.attach([self.ckpt], self.config, **kw)

    def publish(self, key=None):
        key = key or fastrestart.identify(self.ckpt, self.config)
        return fastrestart.publish(key, self.tensors, socket_dir=self.run_dir)

    def assert_equal_arrays(self, arrays):
        self.assertEqual(sorted(arrays), sorted(self.tensors))
        for name, want in self.tensors.items():
            got = arrays[name]
            self.assertEqual(got.dtype, want.dtype, name)
            self.assertEqual(got.shape, want.shape, name)
            np.testing.assert_array_equal(got, want, err_msg=name)

    def test_miss_publish_hit_zero_copy(self):
        self.start_daemon()
        miss = self.attach()
        self.assertFalse(miss.hit)
        self.assertTrue(miss.reason)
        self.assertEqual(miss.tensors, {})

        pub = self.publish(miss.key)
        self.assertEqual(pub["fingerprint"], miss.key.fingerprint)
        self.assertGreaterEqual(pub["bytes"], sum(a.nbytes for a in self.tensors.values()))  # + alignment
        self.assertEqual(len(pub["digest"]), 16)
        self.assertTrue(pub["fingerprint"])

        r = self.attach()
        self.assertTrue(r.hit, r.reason)
        self.assertEqual(r.digest, pub["digest"])
        self.assertEqual(r.fingerprint, pub["fingerprint"])
        self.assertIn("total_s", r.timings)
        t = r.tensors["model.embed.weight"]
        self.assertEqual(t.__dlpack_device__(), (1, 0))
        self.assertEqual((t.dtype, t.shape, t.readonly), ("F32", (64, 32), True))

        arrays = {name: to_numpy(t) for name, t in r.tensors.items()}
        self.assert_equal_arrays(arrays)
        # No copy: the array is the mapping.
        a = arrays["model.embed.weight"]
        self.assertEqual(a.__array_interface__["data"][0], t.data_ptr)
        # Read-only in zero_copy: numpy refuses the write instead of faulting on the read-only mapping.
        for arr in (a, t.numpy()):
            self.assertFalse(arr.flags.writeable)
            with self.assertRaises(ValueError):
                arr[0, 0] = 1.0
        np.testing.assert_array_equal(t.numpy(), self.tensors["model.embed.weight"])

        # Publishing the same key again is refused (busy), as a RuntimeError with the library's message.
        with self.assertRaisesRegex(RuntimeError, "busy"):
            self.publish()

    def _maps_line(self, addr):
        with open("/proc/self/maps") as f:
            for line in f:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                if lo <= addr < hi:
                    return line
        return ""

    def _exchange(self, path, op):
        return snapshot_exchange(path, op)

    def test_release_and_reattach_keep_the_address(self):
        self.start_daemon()
        self.publish()
        r = self.attach()
        self.assertTrue(r.hit, r.reason)
        t = r.tensors["model.embed.weight"]
        before = t.data_ptr
        self.assertIn("memfd:fastrestart-pool", self._maps_line(before))
        info = r.release_mapping()
        self.assertFalse(info["mapped"])
        self.assertEqual(info["fingerprint"], r.fingerprint)
        line = self._maps_line(before)
        self.assertTrue(line.split()[1].startswith("---"), line)  # reserved, inaccessible, no memfd
        self.assertNotIn("memfd", line)
        info = r.reattach()
        self.assertTrue(info["mapped"])
        self.assertEqual(t.data_ptr, before)
        self.assertIn("memfd:fastrestart-pool", self._maps_line(before))
        np.testing.assert_array_equal(t.numpy(), self.tensors["model.embed.weight"])

    def test_reattach_fails_when_the_daemon_lost_the_entry(self):
        self.start_daemon()
        self.publish()
        r = self.attach()
        r.release_mapping()
        self.stop_daemon()
        self.start_daemon()  # empty: nothing was preloaded
        with self.assertRaisesRegex(RuntimeError, "no longer holds the weights"):
            r.reattach()

    def test_snapshot_agent_serves_prepare_and_resume(self):
        self.start_daemon()
        self.publish()
        r = self.attach()
        calls = []
        path = os.path.join(self.tmp, "x.sock")
        if not os.environ.get("FASTRESTART_SNAPSHOT_SOCKET"):
            self.assertIsNone(fastrestart.snapshot_agent([r]))  # not asked to take part
        agent = fastrestart.snapshot_agent([r], quiesce=lambda: calls.append("quiesce"),
                                           resume=lambda: calls.append("resume"), socket_path=path)
        self.assertEqual(agent.socket_path, path)
        p = self._exchange(path, "prepare")
        self.assertTrue(p["ok"], p)
        self.assertEqual(len(p["weights"]), 1)
        w = p["weights"][0]
        self.assertTrue(w["base"] <= r.tensors["model.embed.weight"].data_ptr < w["base"] + w["bytes"], w)
        self.assertFalse(p["weights"][0]["mapped"])
        self.assertEqual(p["weights"][0]["key"]["files"][0]["path"], self.ckpt)
        self.assertTrue(agent.prepared)
        q = self._exchange(path, "resume")
        self.assertTrue(q["ok"], q)
        self.assertEqual(calls, ["quiesce", "resume"])
        np.testing.assert_array_equal(r.tensors["model.embed.weight"].numpy(), self.tensors["model.embed.weight"])
        agent.stop()
        self.assertFalse(os.path.exists(path))

    def test_versioned_dlpack_capsule(self):
        self.start_daemon()
        self.publish()
        r = self.attach()
        cap = r.tensors["model.mask"].__dlpack__(max_version=(1, 0))
        self.assertIn("dltensor_versioned", repr(cap))
        cap = r.tensors["model.mask"].__dlpack__()
        self.assertIn('"dltensor"', repr(cap))
        with self.assertRaises(BufferError):
            r.tensors["model.mask"].__dlpack__(stream=1)

    def test_copy_mode(self):
        self.start_daemon()
        self.publish()
        r = self.attach(mode="copy")
        self.assertTrue(r.hit, r.reason)
        arrays = {name: to_numpy(t) for name, t in r.tensors.items()}
        self.assert_equal_arrays(arrays)
        self.assertFalse(r.tensors["model.bytes"].readonly)
        own = r.tensors["model.bytes"].numpy()
        self.assertTrue(own.flags.writeable)
        own[0] = own[0] ^ 0xFF  # our own memory: writing does not touch the daemon's pool
        again = self.attach()
        np.testing.assert_array_equal(np.from_dlpack(again.tensors["model.bytes"]), self.tensors["model.bytes"])

    def test_arrays_outlive_the_daemon_and_the_result(self):
        self.start_daemon()
        self.publish()
        r = self.attach()
        self.assertTrue(r.hit, r.reason)
        arrays = {name: to_numpy(t) for name, t in r.tensors.items()}
        view = r.tensors["model.layers.0.w"].numpy()
        del r
        gc.collect()
        self.stop_daemon(signal.SIGKILL)
        self.assert_equal_arrays(arrays)
        np.testing.assert_array_equal(view, self.tensors["model.layers.0.w"])

    def test_miss_without_daemon_falls_back_with_reason(self):
        r = self.attach(connect_timeout_s=0.2)
        self.assertFalse(r.hit)
        self.assertIn(self.run_dir, r.reason)
        self.assertEqual(r.tensors, {})

    def test_missing_socket_is_a_fast_miss_that_does_not_wait(self):
        # No daemon and none starting: the miss says so at once, however long the caller would wait.
        r = self.attach(connect_timeout_s=600)
        self.assertFalse(r.hit)
        self.assertIn("does not exist and no daemon is starting", r.reason)  # no retry loop ran

    def test_socket_dir_defaults_to_the_environment(self):
        # fastrestartd exports weights.socket_dir as FASTRESTART_SOCKET_DIR to its engine.
        self.start_daemon()
        self.publish()
        os.environ["FASTRESTART_SOCKET_DIR"] = self.run_dir
        try:
            r = fastrestart.attach([self.ckpt], self.config)
        finally:
            del os.environ["FASTRESTART_SOCKET_DIR"]
        self.assertTrue(r.hit, r.reason)

    def assert_publish_refused(self, change, field):
        self.start_daemon()
        miss = self.attach()          # identifies the file: the key the engine reads under
        self.assertFalse(miss.hit)
        change(self.ckpt)             # the checkpoint changes after the key was taken (while "reading")
        with self.assertRaises(RuntimeError) as e:
            self.publish(miss.key)
        self.assertIn(self.ckpt, str(e.exception))
        self.assertIn(field + " differs", str(e.exception))
        # Nothing was stored: neither the old key nor the file as it is now hits.
        self.assertFalse(fastrestart.attach(miss.key, socket_dir=self.run_dir).hit)
        now = self.attach()
        self.assertFalse(now.hit)
        self.assertEqual(now.reason, "no entries")

    def test_publish_refuses_a_file_replaced_by_rename_after_the_key(self):
        def rename_over(path):
            shutil.copyfile(path, path + ".next")
            os.rename(path + ".next", path)
        self.assert_publish_refused(rename_over, "ino")

    def test_publish_refuses_an_in_place_rewrite_with_the_mtime_restored(self):
        def rewrite(path):
            st = os.stat(path)
            with open(path, "r+b") as f:
                f.seek(-1, os.SEEK_END)
                b = f.read(1)
                f.seek(-1, os.SEEK_END)
                f.write(bytes([b[0] ^ 0x5A]))
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
            self.assertEqual(os.stat(path).st_mtime_ns, st.st_mtime_ns)
        self.assert_publish_refused(rewrite, "ctime_ns")

    def test_publish_needs_a_key_taken_before_the_read(self):
        with self.assertRaisesRegex(ValueError, "identify"):
            fastrestart.publish(self.ckpt, self.tensors, socket_dir=self.run_dir)
        key = fastrestart.identify(self.ckpt, self.config)
        self.assertEqual(key.files[0]["path"], os.path.realpath(self.ckpt))
        self.assertEqual(key.config["tp_rank"], "0")
        self.assertEqual(len(key.fingerprint), 16)
        self.assertEqual(key, fastrestart.identify(self.ckpt, self.config))

    def test_no_fallback_raises(self):
        with self.assertRaisesRegex(RuntimeError, "weightd-host.sock"):
            self.attach(fallback=False, connect_timeout_s=0.2)

    def test_changed_config_is_a_miss_naming_the_field(self):
        self.start_daemon()
        self.publish()
        r = fastrestart.attach(self.ckpt, dict(self.config, dtype="other"), socket_dir=self.run_dir)
        self.assertFalse(r.hit)
        self.assertIn("config.dtype", r.differs)

    def test_bad_arguments_raise_value_error_naming_them(self):
        cases = [
            (dict(mode="fast"), "mode"),
            (dict(device="gpu0"), "device"),
            (dict(connect_timeout_s=-1), "connect_timeout_s"),
            (dict(state_timeout_s="x"), "state_timeout_s"),
        ]
        for kw, name in cases:
            with self.assertRaisesRegex(ValueError, name):
                self.attach(**kw)
        with self.assertRaisesRegex(ValueError, "files"):
            fastrestart.attach([], socket_dir=self.run_dir)
        with self.assertRaisesRegex(ValueError, r"files\[0\]"):
            fastrestart.attach(os.path.join(self.tmp, "absent.safetensors"), socket_dir=self.run_dir)
        with self.assertRaisesRegex(ValueError, "config"):
            fastrestart.attach(self.ckpt, {"a": object()}, socket_dir=self.run_dir)
        with self.assertRaisesRegex(ValueError, "tensors"):
            fastrestart.publish(fastrestart.identify(self.ckpt, self.config), {"w": np.ones((4, 4), np.float32)[:, ::2]},
                                socket_dir=self.run_dir)
        with self.assertRaisesRegex(ValueError, "tensors"):
            fastrestart.publish(fastrestart.identify(self.ckpt, self.config), {"w": np.ones(2, np.complex64)},
                                socket_dir=self.run_dir)


# A standby's gate in a child process; this test plays fastrestartd on the other end of a socket pair. The
# child prints what gate() returned and what it left behind, or the exception it raised.
GATE_CHILD = r"""
import json, os, subprocess, sys
import fastrestart
fd = int(os.environ["FASTRESTART_STANDBY_FD"])
try:
    released = fastrestart.standby.gate(sys.argv[1])
except Exception as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e)}))
    sys.exit(0)
try:
    os.fstat(fd)
    fd_open = True
except OSError:
    fd_open = False
inherited = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('FASTRESTART_STANDBY_FD'))"],
                           capture_output=True, text=True).stdout.strip()
print(json.dumps({"released": released, "fd_open": fd_open, "is_standby": fastrestart.standby.is_standby(),
                  "env": os.environ.get("FASTRESTART_STANDBY_FD"), "child_env": inherited}))
"""


class StandbyTest(unittest.TestCase):
    def start(self, env_level, gate_level):
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        env = dict(os.environ, FASTRESTART_STANDBY_FD=str(theirs.fileno()), FASTRESTART_STANDBY_LEVEL=env_level)
        child = subprocess.Popen([sys.executable, "-c", GATE_CHILD, gate_level], env=env, pass_fds=[theirs.fileno()],
                                 stdout=subprocess.PIPE, text=True)
        theirs.close()
        self.addCleanup(child.kill)
        ours.settimeout(60)  # a guard against a hang, not a timed assertion
        return ours, child

    def parked(self, ours, child, level):
        line = ours.makefile("r").readline()
        msg = json.loads(line)
        self.assertEqual(msg, {"op": "parked", "v": 1, "level": level, "pid": child.pid})

    def finish(self, child):
        out, _ = child.communicate(timeout=60)
        return child.returncode, json.loads(out) if out.strip() else None

    def test_release_returns_true_and_leaves_no_standby_behind(self):
        ours, child = self.start("pre_gpu", "pre_gpu")
        self.parked(ours, child, "pre_gpu")
        ours.sendall(b'{"op":"release"}\n')
        code, out = self.finish(child)
        self.assertEqual(code, 0)
        self.assertEqual(out, {"released": True, "fd_open": False, "is_standby": False, "env": None,
                               "child_env": "None"})

    def test_exit_and_end_of_file_exit_zero_without_returning(self):
        for how in ("exit", "eof"):
            ours, child = self.start("warmed", "warmed")
            self.parked(ours, child, "warmed")
            if how == "exit":
                ours.sendall(b'{"op":"exit"}\n')
            else:
                ours.close()
            self.assertEqual(self.finish(child), (0, None), how)

    def test_another_level_passes_without_a_message(self):
        ours, child = self.start("warmed", "pre_gpu")
        code, out = self.finish(child)
        self.assertEqual(out["released"], False)
        self.assertTrue(out["is_standby"])
        self.assertEqual(ours.recv(1), b"")  # the child is gone and never wrote

    def test_a_malformed_reply_raises_runtime_error_naming_it(self):
        ours, child = self.start("pre_gpu", "pre_gpu")
        self.parked(ours, child, "pre_gpu")
        ours.sendall(b'{"op":"dance"}\n')
        code, out = self.finish(child)
        self.assertEqual(out["error"], "RuntimeError")
        self.assertIn('unknown op: {"op":"dance"}', out["message"])

    def test_no_variable_passes_and_bad_values_raise_value_error(self):
        saved = {k: os.environ.pop(k, None) for k in ("FASTRESTART_STANDBY_FD", "FASTRESTART_STANDBY_LEVEL")}
        try:
            self.assertFalse(fastrestart.standby.is_standby())
            self.assertFalse(fastrestart.standby.gate("pre_gpu"))
            self.assertFalse(fastrestart.standby.gate("warmed"))
            with self.assertRaisesRegex(ValueError, '"hot"'):
                fastrestart.standby.gate("hot")
            os.environ["FASTRESTART_STANDBY_FD"] = "x1"
            os.environ["FASTRESTART_STANDBY_LEVEL"] = "warmed"
            self.assertTrue(fastrestart.standby.is_standby())
            with self.assertRaisesRegex(ValueError, "FASTRESTART_STANDBY_FD=x1: not a file descriptor number"):
                fastrestart.standby.gate("warmed")
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v


if __name__ == "__main__":
    unittest.main()

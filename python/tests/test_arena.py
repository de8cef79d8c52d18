"""KV arenas from Python (fastrestart.reserve_arena / lease_arena / find_arena) against a real
fastrestart-weightd on the host backend: the placeholder, the swap at the same address, views without a copy,
and the lease that passes to a second process only once the first has exited.

Run: PYTHONPATH=<build>/python FR_WEIGHTD_BIN=<build>/src/daemon/fastrestart-weightd \
     /usr/bin/python3 -m unittest -v test_arena       (ctest: python_arena)
"""

import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import numpy as np

import fastrestart
from weightd_support import Weightd, snapshot_exchange, stop_processes

WEIGHTD = os.environ.get("FR_WEIGHTD_BIN", "")

# A process that leases the arena, reports its lease and the state of a pid it was given as it was at the
# grant, writes a canary, then waits for a line on stdin before it exits.
HOLDER = textwrap.dedent("""
    import json, os, sys
    import fastrestart
    run_dir, nbytes, canary, watch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    a = fastrestart.reserve_arena("kv", nbytes, wait_s=60, socket_dir=run_dir)
    lease = a.swap_in()
    state = "gone"
    if watch > 0:
        try:
            with open("/proc/%d/stat" % watch) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            pass
    v = a.view(0, (4,), "I64").numpy()
    seen = v.tolist()
    v[:] = canary
    print(json.dumps({"lease": lease, "seen": seen, "watched_state": state, "pid": os.getpid()}), flush=True)
    sys.stdin.readline()
""")


# A process that leases the arena on cuda:0 and keeps queuing kernels that write into it until killed.
KILLED_WRITER = textwrap.dedent("""
    import sys
    import fastrestart
    import torch
    a = fastrestart.lease_arena("kv", int(sys.argv[2]), device="cuda:0", socket_dir=sys.argv[1])
    t = torch.from_dlpack(a.view(0, (a.bytes // 4,), "float32"))
    t.add_(1)
    torch.cuda.synchronize()
    print("writing", flush=True)
    while True:
        t.add_(1)
""")


@unittest.skipUnless(WEIGHTD and os.access(WEIGHTD, os.X_OK), "FR_WEIGHTD_BIN is not set to fastrestart-weightd")
class ArenaTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fr-arena-")
        self.run_dir = os.path.join(self.tmp, "run")
        os.mkdir(self.run_dir, 0o700)
        self.daemon = Weightd(WEIGHTD, self.run_dir, os.path.join(self.tmp, "weightd.log")).start(self)
        self.children = []

    def tearDown(self):
        stop_processes(self.children)
        self.daemon.stop()
        gc.collect()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def holder(self, nbytes, canary, watch=0):
        p = subprocess.Popen([sys.executable, "-c", HOLDER, self.run_dir, str(nbytes), str(canary), str(watch)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.children.append(p)
        return p

    def test_placeholder_aliases_and_the_swap_keeps_the_address(self):
        a = fastrestart.reserve_arena("kv", 1 << 20, socket_dir=self.run_dir)
        self.assertFalse(a.leased)
        self.assertIsNone(a.lease)
        self.assertGreaterEqual(a.bytes, 1 << 20)
        chunk = a.placeholder_bytes
        self.assertTrue(0 < chunk < a.bytes, chunk)
        base = a.base
        # A view written over the placeholder: every chunk of the range is the same memory.
        first = a.view(0, (chunk // 4,), "float32").numpy()
        first[:] = 3.0
        again = a.view(a.bytes - chunk, (chunk // 4,), "F32").numpy()
        self.assertTrue((again == 3.0).all())
        lease = a.swap_in()
        self.assertTrue(lease["created"])
        self.assertEqual(lease["generation"], 1)
        self.assertIsNone(lease["previous_holder_pid"])
        self.assertEqual(a.lease, lease)
        self.assertTrue(a.leased)
        self.assertEqual(a.placeholder_bytes, 0)
        self.assertEqual(a.base, base)
        # The same numpy arrays (same address) now see the arena: new, so zero-filled, and no longer aliased.
        self.assertTrue((first == 0).all())
        first[:] = 5.0
        self.assertTrue((again == 0).all())
        info = fastrestart.find_arena("kv", socket_dir=self.run_dir)
        self.assertEqual(info["bytes"], a.bytes)
        self.assertEqual(info["holder_pid"], os.getpid())
        self.assertEqual(info["leases"], 1)
        with self.assertRaisesRegex(RuntimeError, "already leased"):
            a.swap_in()

    def test_the_snapshot_agent_unmaps_the_arena_and_leases_it_again_at_its_address(self):
        """docs/snapshot.md, "Snapshots without the KV cache": prepare unmaps the arena (its range stays
        reserved and inaccessible), resume leases it again and maps it where it was, with its bytes."""
        a = fastrestart.lease_arena("kv", 1 << 20, socket_dir=self.run_dir)
        view = a.view(0, (4,), "I32").numpy()
        view[:] = [7, 8, 9, 10]
        sock = os.path.join(self.tmp, "x.sock")
        leased_at_resume = []
        agent = fastrestart.snapshot_agent([], resume=lambda: leased_at_resume.append(a.leased), socket_path=sock,
                                           arenas=[a])

        def exchange(op):
            return snapshot_exchange(sock, op)

        def maps_line():
            with open("/proc/self/maps") as f:
                return next((l for l in f if l.startswith("%x-" % a.base)), "")

        try:
            prep = exchange("prepare")
            self.assertTrue(prep["ok"], prep)
            self.assertEqual(len(prep["arenas"]), 1, prep)
            self.assertEqual((prep["arenas"][0]["base"], prep["arenas"][0]["mapped"]), (a.base, False))
            self.assertTrue(a.unmapped)
            self.assertIn(" ---p ", maps_line())
            self.assertNotIn("memfd", maps_line())
            res = exchange("resume")
            self.assertTrue(res["ok"], res)
            self.assertEqual(res["arenas"][0]["mapped"], True)
            self.assertEqual(leased_at_resume, [True])
            self.assertEqual(view.tolist(), [7, 8, 9, 10])  # the daemon's memory, through the same array
            self.assertEqual(a.lease["generation"], res["arenas"][0]["generation"])
        finally:
            agent.stop()
        with self.assertRaisesRegex(TypeError, "arenas must be Arena objects"):
            fastrestart.snapshot_agent([], socket_path=sock, arenas=["kv"])

    def test_the_arena_line_is_engine_loaders_for_the_last_lease(self):
        a = fastrestart.reserve_arena("kv", 1 << 20, socket_dir=self.run_dir)
        self.assertEqual(fastrestart.arena_line(a), "", "no lease yet")
        lease = a.swap_in()
        self.assertEqual(fastrestart.arena_line(a),
                         f"fastrestart-arena: leased name=kv bytes={a.bytes} waited_s={lease['waited_s']:.6f} "
                         f"swap_s={lease['seconds']:.6f} generation={lease['generation']}")
        self.assertEqual(fastrestart.arena_fallback_line('no "arena"\n  here\\'),
                         'fastrestart-arena: fallback reason="no \\"arena\\" here\\\\"')
        self.assertEqual(len(fastrestart.arena_fallback_line("x" * 2000)), len('fastrestart-arena: fallback reason=""') + 512)
        with self.assertRaises(TypeError):
            fastrestart.arena_line("kv")

    def test_view_is_a_dlpack_tensor_that_outlives_the_arena_object(self):
        a = fastrestart.lease_arena("kv", 4096 * 3, socket_dir=self.run_dir)
        self.assertTrue(a.lease["created"])
        v = a.view(4096, (2, 3), "I32")
        self.assertEqual((v.shape, v.dtype, v.nbytes), ((2, 3), "I32", 24))
        self.assertEqual(v.data_ptr, a.base + 4096)
        self.assertEqual(v.__dlpack_device__(), (1, 0))
        v.numpy()[:] = np.arange(6, dtype=np.int32).reshape(2, 3)
        x = np.from_dlpack(v)  # read-only in numpy < 2.1, but the same memory
        capsule = a.view(0, (8,), "BF16").__dlpack__(max_version=(1, 0))
        self.assertIn("dltensor_versioned", repr(capsule))
        del a, v, capsule
        gc.collect()
        # The array holds the Arena: the range stays mapped (and leased) while it lives.
        self.assertEqual(x.tolist(), [[0, 1, 2], [3, 4, 5]])

    def test_a_second_process_gets_the_lease_only_after_the_first_exits(self):
        first = self.holder(8192, 42)
        got = json.loads(first.stdout.readline())
        self.assertTrue(got["lease"]["created"])
        second = self.holder(8192, 7, watch=first.pid)
        # The daemon counts the second lease as waiting while the first process lives.
        deadline = time.monotonic() + 60
        while (fastrestart.find_arena("kv", socket_dir=self.run_dir) or {}).get("waiting", 0) < 1:
            self.assertIsNone(second.poll(), "the second holder exited without waiting")
            self.assertLess(time.monotonic(), deadline, "the second lease never waited")
            time.sleep(0.02)
        self.assertIsNone(second.poll())
        first.stdin.write("\n")
        first.stdin.flush()
        # Not reaped by this test until the second lease is granted: the daemon follows the exit (its pidfd),
        # not the reap, and so the first process is a zombie (or gone) when the second is granted.
        got2 = json.loads(second.stdout.readline())
        self.assertIn(got2["watched_state"], ("Z", "gone"))
        self.assertEqual(got2["lease"]["previous_holder_pid"], first.pid)
        self.assertFalse(got2["lease"]["created"])
        self.assertEqual(got2["lease"]["generation"], 2)
        self.assertGreater(got2["lease"]["waited_s"], 0)
        # What the first holder wrote is what the next one maps.
        self.assertEqual(got2["seen"], [42] * 4)
        self.assertEqual(first.wait(), 0)

    def test_a_lease_that_waits_in_vain_is_a_timeout_error_and_the_placeholder_stays(self):
        first = self.holder(8192, 1)
        json.loads(first.stdout.readline())
        a = fastrestart.reserve_arena("kv", 8192, wait_s=0.2, socket_dir=self.run_dir)
        with self.assertRaisesRegex(TimeoutError, "still leased to pid %d" % first.pid):
            a.swap_in()
        self.assertFalse(a.leased)
        self.assertGreater(a.placeholder_bytes, 0)
        first.stdin.write("\n")
        first.stdin.flush()
        first.wait()
        lease = a.swap_in()  # a retry, once the holder is gone: nothing to wait for
        self.assertEqual((lease["created"], lease["generation"]), (False, 2))

    def test_find_arena_before_any_lease_and_without_a_daemon(self):
        self.assertIsNone(fastrestart.find_arena("kv", socket_dir=self.run_dir))
        self.daemon.stop()
        with self.assertRaisesRegex(RuntimeError, "no daemon"):
            fastrestart.find_arena("kv", socket_dir=self.run_dir, connect_timeout_s=0)
        a = fastrestart.reserve_arena("kv", 4096, socket_dir=self.run_dir, connect_timeout_s=0)
        with self.assertRaisesRegex(RuntimeError, "no daemon"):
            a.swap_in()

    def test_another_size_in_the_holding_process_is_busy(self):
        a = fastrestart.lease_arena("kv", 8192, socket_dir=self.run_dir)
        b = fastrestart.reserve_arena("kv", 4 * 8192, socket_dir=self.run_dir)
        with self.assertRaisesRegex(RuntimeError, "busy"):
            b.swap_in()
        self.assertTrue(a.leased)

    def test_bad_arguments_raise_value_error_naming_them(self):
        d = self.run_dir
        for kwargs, what in [(dict(bytes=0), "bytes"), (dict(bytes=-1), "bytes"), (dict(bytes=1.5), "bytes"),
                             (dict(bytes=4096, name="a/b"), "name"), (dict(bytes=4096, wait_s=-1), "wait_s"),
                             (dict(bytes=4096, wait_s="x"), "wait_s"), (dict(bytes=4096, device="tpu:0"), "device")]:
            with self.subTest(kwargs=kwargs), self.assertRaisesRegex(ValueError, what):
                fastrestart.reserve_arena(**dict(dict(name="kv", socket_dir=d), **kwargs))
        a = fastrestart.reserve_arena("kv", 4096, socket_dir=d)
        with self.assertRaisesRegex(ValueError, "outside the arena"):
            a.view(0, (a.bytes + 1,), "U8")
        with self.assertRaisesRegex(ValueError, "not a dtype"):
            a.view(0, (1,), "complex7")
        with self.assertRaisesRegex(ValueError, "multiple of the dtype"):
            a.view(2, (1,), "F32")
        with self.assertRaisesRegex(ValueError, "negative"):
            a.view(0, (-1,), "F32")


try:
    import torch
    HAVE_CUDA = torch.cuda.is_available()
    WHY_NO_CUDA = "no CUDA device visible to torch"
except ImportError:
    HAVE_CUDA, WHY_NO_CUDA = False, "torch is not installed"


@unittest.skipUnless(WEIGHTD and os.access(WEIGHTD, os.X_OK), "FR_WEIGHTD_BIN is not set to fastrestart-weightd")
@unittest.skipUnless(HAVE_CUDA, WHY_NO_CUDA)
class CudaArenaTorchTest(unittest.TestCase):
    """On the GPU (scripts/gpu-run.sh tests-torch): a torch tensor over a cuda:0 arena, a CUDA graph captured over
    the placeholder, and the same graph writing into the leased arena at the same address."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fr-arena-cuda-")
        self.run_dir = os.path.join(self.tmp, "run")
        os.mkdir(self.run_dir, 0o700)
        self.daemon = Weightd(WEIGHTD, self.run_dir, os.path.join(self.tmp, "weightd.log"), backend="cuda").start(self)

    def tearDown(self):
        self.daemon.stop()
        gc.collect()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_a_graph_captured_over_the_placeholder_writes_the_leased_arena(self):
        a = fastrestart.reserve_arena("kv", 64 << 20, device="cuda:0", socket_dir=self.run_dir)
        n = a.placeholder_bytes // 4
        t = torch.from_dlpack(a.view(0, (a.bytes // 4,), "float32"))
        self.assertEqual((t.device, t.data_ptr()), (torch.device("cuda:0"), a.base))
        t[:n].fill_(3)
        torch.cuda.synchronize()
        self.assertTrue(bool((t[-n:] == 3).all()))  # the placeholder aliases: every chunk is the same memory
        x = t[:1024]
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            x.add_(1)
        lease = a.swap_in()
        self.assertTrue(lease["created"])
        self.assertEqual(t.data_ptr(), a.base)
        self.assertEqual(float(t.abs().sum()), 0.0)  # the new arena, zero-filled by the daemon
        g.replay()
        torch.cuda.synchronize()
        self.assertTrue(bool((x == 1).all()))
        self.assertEqual(float(t[1024:].abs().sum()), 0.0)  # no longer aliased


    def test_a_killed_writer_never_writes_over_the_next_holders_canary(self):
        """The lease waits for the holder's exit, not its connection's close: a process whose kernels keep
        writing into the arena is killed with -9; the next lease is granted after its exit, and a canary the
        new holder writes is intact afterwards (no kernel of the dead process wrote after the grant)."""
        nbytes = 1 << 30
        writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, self.run_dir, str(nbytes)],
                                  stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(writer.stdout.readline().strip(), "writing")
            time.sleep(0.2)  # kernels queued and running
            writer.send_signal(9)
            a = fastrestart.reserve_arena("kv", nbytes, device="cuda:0", socket_dir=self.run_dir)
            lease = a.swap_in()  # granted once the writer has exited
        finally:
            writer.kill()
            writer.wait()
            writer.stdout.close()
        self.assertFalse(lease["created"])
        t = torch.from_dlpack(a.view(0, (a.bytes // 4,), "float32"))
        self.assertGreater(float(t[:1024].mean()), 0.0)  # what the writer wrote before it died is there
        t.fill_(7.0)
        torch.cuda.synchronize()
        time.sleep(0.5)
        self.assertTrue(bool((t == 7.0).all()), "a write landed after the lease was granted")
        print(f"killed writer: lease waited {lease['waited_s']:.3f} s for pid {lease['previous_holder_pid']}")

    def test_a_graph_over_the_arena_reads_it_again_after_an_unmap_and_a_new_lease(self):
        """The snapshot's prepare/resume on the GPU: a graph captured over the leased arena still reads and
        writes it after the arena was unmapped (range kept) and leased again at the same address."""
        a = fastrestart.lease_arena("kv", 64 << 20, device="cuda:0", socket_dir=self.run_dir)
        t = torch.from_dlpack(a.view(0, (a.bytes // 4,), "float32"))
        t.fill_(2)
        x = t[:4096]
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            x.mul_(3)
        torch.cuda.synchronize()
        agent = fastrestart.snapshot_agent([], socket_path=os.path.join(self.tmp, "x.sock"), arenas=[a])
        try:
            for op in ("prepare", "resume"):
                reply = snapshot_exchange(os.path.join(self.tmp, "x.sock"), op)
                self.assertTrue(reply["ok"], reply)
                self.assertEqual(reply["arenas"][0]["mapped"], op == "resume")
        finally:
            agent.stop()
        self.assertEqual(t.data_ptr(), a.base)
        self.assertTrue(bool((t == 2).all()))  # the daemon's memory again
        g.replay()
        torch.cuda.synchronize()
        self.assertTrue(bool((x == 6).all()))


if __name__ == "__main__":
    unittest.main()

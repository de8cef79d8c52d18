"""fastrestart-refengine (python/refengine) end to end on a GPU: disk, fallback + publish, attach, dummy.

The engine runs as a real process serving HTTP, with a real CUDA fastrestart-weightd; the logits of the
oracle prompt must be bitwise equal on the disk, fallback and attach paths. Needs torch, transformers and
a GPU (the H200 machine): elsewhere every test skips with the reason.

Run: PYTHONPATH=<build>/python FR_WEIGHTD_BIN=<...>/fastrestart-weightd python3 -m unittest -v test_refengine
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from test_torch import HAVE_CUDA, IMPORT_ERROR, WEIGHTD, TorchBase, torch
from weightd_support import Weightd, read_gate_message, snapshot_exchange

try:
    import fastrestart.standby  # noqa: F401
except ImportError:
    HAVE_STANDBY = False
else:
    HAVE_STANDBY = True

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINE = os.path.join(HERE, "..", "refengine", "fastrestart_refengine.py")
GEN = os.path.join(HERE, "..", "..", "bench", "gen_llama_checkpoint.py")

try:
    import transformers  # noqa: F401
except ImportError as e:
    NO_TRANSFORMERS = f"transformers is not installed ({e})"
else:
    NO_TRANSFORMERS = ""


# The single-request engine (--max-num-seqs 1 --enforce-eager): what these tests of the load paths were
# written for; the batched engine has its own test (test_batched_engine_...).
SINGLE = ("--max-num-seqs", "1", "--enforce-eager")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        return json.load(r)


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


@unittest.skipIf(torch is None, IMPORT_ERROR)
@unittest.skipIf(bool(NO_TRANSFORMERS), NO_TRANSFORMERS)
@unittest.skipUnless(HAVE_CUDA, "no CUDA device visible to torch")
@unittest.skipUnless(WEIGHTD and os.access(WEIGHTD, os.X_OK), "FR_WEIGHTD_BIN is not set to fastrestart-weightd")
class RefEngineTest(TorchBase):
    backend = "cuda"

    @classmethod
    def setUpClass(cls):
        cls.model_tmp = tempfile.TemporaryDirectory(prefix="fr-ref-")
        cls.model = os.path.join(cls.model_tmp.name, "tiny")
        subprocess.run([sys.executable, GEN, cls.model, "--shape", "tiny"], check=True, stdout=subprocess.DEVNULL)

    @classmethod
    def tearDownClass(cls):
        cls.model_tmp.cleanup()

    def serve(self, *flags, model=None, env=None):
        port = free_port()
        if "--max-num-seqs" not in flags:
            flags = SINGLE + flags
        log = open(os.path.join(self.tmp, f"engine-{port}.log"), "wb")
        with log:  # the child keeps its own copy of the descriptor
            p = subprocess.Popen([sys.executable, ENGINE, "serve", model or self.model, "--port", str(port),
                                  "--served-model-name", "tiny", "--fastrestart-socket-dir", self.run_dir, *flags],
                                 stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if p.poll() is not None:
                with open(log.name) as f:
                    return p, port, f.read()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        return p, port, None
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        p.kill()
        with open(log.name) as f:
            self.fail("the engine did not become healthy: " + f.read())

    def stop(self, p):
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(30), 0)

    def run_path(self, *flags):
        p, port, err = self.serve(*flags)
        self.assertIsNone(err)
        try:
            stats = get(port, "/stats")
            code, ans = post(port, {"model": "tiny", "prompt": "Hello", "max_tokens": 4, "logprobs": 0})
            self.assertEqual(code, 200, ans)
            self.assertEqual(len(ans["choices"][0]["token_ids"]), 4)
            return stats, ans
        finally:
            self.stop(p)

    def test_disk_fallback_attach_and_dummy(self):
        self.start()
        disk, disk_ans = self.run_path("--load-format", "disk")
        self.assertEqual(disk["load"]["path"], "disk")
        cold, cold_ans = self.run_path("--load-format", "fastrestart")
        self.assertEqual(cold["load"]["path"], "fallback", cold["load"])
        self.assertTrue(cold["load"]["published"], cold["load"])
        # the first life serves from the daemon's copy after its publish, its own freed
        self.assertTrue(cold["load"].get("adopted"), cold["load"])
        self.assertEqual(cold["load"]["mode"], "zero_copy")
        self.assertIn("adopt_s", cold["startup"]["phases"])
        warm, warm_ans = self.run_path("--load-format", "fastrestart")
        self.assertEqual(warm["load"]["path"], "attach", warm["load"])
        self.assertEqual(warm["load"]["mode"], "zero_copy")
        # bitwise-equal logits and the same answer on every path
        sha = {s["oracle"]["logits_sha256"] for s in (disk, cold, warm)}  # cold's oracle ran on the adopted copy
        self.assertEqual(len(sha), 1, sha)
        self.assertEqual(disk_ans["choices"][0]["token_ids"], warm_ans["choices"][0]["token_ids"])
        self.assertEqual(disk_ans["choices"][0]["logprobs"], warm_ans["choices"][0]["logprobs"])
        for k in ("import_s", "cuda_init_s", "build_meta_s", "load_s", "bind_s", "first_token_s"):
            self.assertIn(k, warm["startup"]["phases"])
        dummy, _ = self.run_path("--load-format", "dummy")
        self.assertEqual(dummy["load"]["path"], "dummy")

    def test_tensor_parallel_2_on_one_gpu_attaches_both_shards_or_neither(self):
        """docs/refengine.md "Tensor parallel": two ranks on one GPU (gloo). The disk load, the cold start
        (both ranks miss, load their shards and publish them) and the warm start (both attach) give bitwise
        the same logits and answers; each rank holds less than the whole model. With rank 1's shard evicted
        rank 0 still hits, but every rank loads from disk (no mix), and says why."""
        weightctl = os.path.join(os.path.dirname(WEIGHTD), "fastrestart-weightctl")
        if not os.access(weightctl, os.X_OK):
            self.skipTest(f"no fastrestart-weightctl next to {WEIGHTD}")
        self.start()
        tp2 = ("--tensor-parallel-size", "2", "--share-device", "--dist-backend", "gloo")
        whole, _ = self.run_path("--load-format", "disk")
        disk, disk_ans = self.run_path("--load-format", "disk", *tp2)
        cold, _ = self.run_path("--load-format", "fastrestart", *tp2)
        warm, warm_ans = self.run_path("--load-format", "fastrestart", *tp2)

        def paths(stats):
            return [r["path"] for r in stats["tensor_parallel"]["ranks"]]

        self.assertEqual(whole["tensor_parallel"]["size"], 1)
        self.assertEqual(paths(disk), ["disk", "disk"])
        self.assertEqual(paths(cold), ["fallback", "fallback"], cold["load"])
        self.assertTrue(cold["load"]["published"], cold["load"])
        self.assertTrue(cold["load"]["reason"].startswith("rank 0 missed: "), cold["load"])
        self.assertEqual(paths(warm), ["attach", "attach"], warm["tensor_parallel"])
        sha = {s["oracle"]["logits_sha256"] for s in (disk, cold, warm)}  # cold's oracle ran on the adopted copy
        self.assertEqual(len(sha), 1, sha)
        for s in (disk, cold, warm):  # the logits are replicated: every rank computed the same
            self.assertEqual({r["logits_sha256"] for r in s["tensor_parallel"]["ranks"]}, sha)
        self.assertEqual(disk_ans["choices"][0]["token_ids"], warm_ans["choices"][0]["token_ids"])
        self.assertEqual(disk_ans["choices"][0]["logprobs"], warm_ans["choices"][0]["logprobs"])
        full = whole["load"]["weight_bytes"]
        for r in warm["tensor_parallel"]["ranks"]:
            self.assertLess(r["weight_bytes"], full, r)
        self.assertEqual(len({r["pid"] for r in warm["tensor_parallel"]["ranks"]}), 2)

        fp = warm["tensor_parallel"]["ranks"][1]["fingerprint"]
        subprocess.run([weightctl, "--socket-dir", self.run_dir, "--device", "cuda:0", "evict", fp], check=True,
                       stdout=subprocess.DEVNULL, timeout=60)
        mixed, mixed_ans = self.run_path("--load-format", "fastrestart", *tp2)
        self.assertEqual(paths(mixed), ["fallback", "fallback"], mixed["tensor_parallel"])
        self.assertTrue(mixed["load"]["reason"].startswith("rank 1 missed: "), mixed["load"])
        self.assertTrue(mixed["load"]["dropped_attach"], mixed["load"])  # rank 0 had hit
        self.assertEqual(mixed["oracle"]["logits_sha256"], warm["oracle"]["logits_sha256"])
        self.assertEqual(mixed_ans["choices"][0]["token_ids"], warm_ans["choices"][0]["token_ids"])
        again, _ = self.run_path("--load-format", "fastrestart", *tp2)  # rank 1 published its shard again
        self.assertEqual(paths(again), ["attach", "attach"], again["tensor_parallel"])

    def test_snapshot_exchange_releases_and_remaps_the_pool(self):
        """docs/snapshot.md: prepare releases the daemon's pool keeping the address range (torch's tensors keep
        their pointers), resume re-maps it there; the answers before and after are the same."""
        self.start()
        self.run_path("--load-format", "fastrestart")  # a miss: loads from disk and publishes
        sock = os.path.join(self.tmp, "x.sock")
        p, port, err = self.serve("--load-format", "fastrestart", env=dict(os.environ, FASTRESTART_SNAPSHOT_SOCKET=sock))
        self.assertIsNone(err)

        def exchange(op):
            return snapshot_exchange(sock, op, timeout=60)

        try:
            req = {"model": "tiny", "prompt": "Hello", "max_tokens": 4, "logprobs": 0}
            code, before = post(port, req)
            self.assertEqual(code, 200, before)
            prep = exchange("prepare")
            self.assertTrue(prep["ok"], prep)
            self.assertEqual(len(prep["weights"]), 1, prep)
            self.assertFalse(prep["weights"][0]["mapped"])
            self.assertTrue(prep["weights"][0]["device"].startswith("cuda:"))
            res = exchange("resume")
            self.assertTrue(res["ok"], res)
            self.assertEqual(res["weights"][0]["base"], prep["weights"][0]["base"])
            code, after = post(port, req)
            self.assertEqual(code, 200, after)
            self.assertEqual(before["choices"][0]["token_ids"], after["choices"][0]["token_ids"])
            self.assertEqual(before["choices"][0]["logprobs"], after["choices"][0]["logprobs"])
        finally:
            self.stop(p)

    def test_snapshot_exchange_unmaps_the_kv_arena_and_leases_it_again(self):
        """The batched engine with --kv-arena under the snapshot exchange: prepare unmaps the arena (after the
        pool), resume leases it again at the same address; the graphs captured over it answer as before."""
        self.start()
        self.run_path("--load-format", "fastrestart")  # a miss: loads from disk and publishes
        sock = os.path.join(self.tmp, "a.sock")
        p, port, err = self.serve("--load-format", "fastrestart", "--max-num-seqs", "8", "--max-model-len", "256",
                                  "--kv-arena", "kv", env=dict(os.environ, FASTRESTART_SNAPSHOT_SOCKET=sock))
        self.assertIsNone(err, err)

        def exchange(op):
            return snapshot_exchange(sock, op, timeout=60)

        try:
            stats = get(port, "/stats")
            self.assertIsNone(stats["batch"]["kv_arena"].get("fallback"), stats["batch"]["kv_arena"])
            req = {"model": "tiny", "prompt": "Hello", "max_tokens": 8, "logprobs": 0}
            code, before = post(port, req)
            self.assertEqual(code, 200, before)
            prep = exchange("prepare")
            self.assertTrue(prep["ok"], prep)
            self.assertEqual([w["mapped"] for w in prep["weights"]], [False])
            self.assertEqual(len(prep["arenas"]), 1, prep)
            self.assertEqual((prep["arenas"][0]["mapped"], prep["arenas"][0]["base"]),
                             (False, stats["batch"]["kv_arena"]["base"]))
            res = exchange("resume")
            self.assertTrue(res["ok"], res)
            self.assertEqual((res["arenas"][0]["mapped"], res["arenas"][0]["base"]), (True, prep["arenas"][0]["base"]))
            code, after = post(port, req)
            self.assertEqual(code, 200, after)
            self.assertEqual(before["choices"][0]["token_ids"], after["choices"][0]["token_ids"])
        finally:
            self.stop(p)

    def test_cuda_graph_decode_step_is_bitwise_the_eager_step(self):
        """--cuda-graph: the engine checks at startup that the replayed decode step's logits are bitwise
        those of the same step run eagerly; the oracle (a prefill, never graphed) and the greedy answer are
        those of the engine without the graph."""
        eager, eager_ans = self.run_path("--load-format", "disk")
        graph, graph_ans = self.run_path("--load-format", "disk", "--cuda-graph")
        self.assertEqual(graph["cuda_graph"]["graph_check"], "bitwise_equal", graph["cuda_graph"])
        self.assertIn("graph_capture_s", graph["startup"]["phases"])
        self.assertEqual(graph["oracle"]["logits_sha256"], eager["oracle"]["logits_sha256"])
        self.assertEqual(graph_ans["choices"][0]["token_ids"], eager_ans["choices"][0]["token_ids"])
        self.assertFalse(eager["cuda_graph"]["enabled"])

    @unittest.skipUnless(HAVE_STANDBY, "the fastrestart binding has no standby module")
    def test_batched_engine_sizes_its_kv_cache_captures_graphs_and_decodes_concurrent_requests(self):
        """The default (batched) engine: a KV cache of max(--max-num-seqs, largest graph) slots x
        --max-model-len positions, vLLM's graph sizes for 8 sequences, the oracle of the single-request
        engine, concurrent answers equal to the same prompts alone, and a request longer than a slot refused."""
        single, _ = self.run_path("--load-format", "disk")
        p, port, err = self.serve("--load-format", "disk", "--max-num-seqs", "8", "--max-model-len", "256")
        self.assertIsNone(err, err)
        try:
            stats = get(port, "/stats")
            self.assertEqual(stats["oracle"]["logits_sha256"], single["oracle"]["logits_sha256"])
            kv = stats["batch"]["kv_cache"]
            self.assertEqual((kv["slots"], kv["positions"]), (16, 256))
            self.assertEqual(kv["bytes"], kv["slots"] * kv["positions"] * kv["bytes_per_position"])
            self.assertEqual(stats["cuda_graph"]["sizes"], [1, 2, 4, 8, 16])
            self.assertTrue(stats["batch"]["check"]["ok"], stats["batch"]["check"])
            for k in ("profile_s", "kv_alloc_s", "graph_capture_s", "first_token_s"):
                self.assertIn(k, stats["startup"]["phases"])
            prompts = [f"prompt number {i}" for i in range(8)]
            alone = [post(port, {"prompt": q, "max_tokens": 12})[1]["choices"][0]["token_ids"] for q in prompts]
            together = [None] * 8

            def one(i):
                together[i] = post(port, {"prompt": prompts[i], "max_tokens": 12})[1]["choices"][0]["token_ids"]

            import threading
            threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(together, alone)
            served = get(port, "/stats")["batch"]["serving"]
            self.assertGreater(served["rows"], served["steps"])  # some steps decoded several requests
            code, ans = post(port, {"prompt": "x" * 250, "max_tokens": 10})
            self.assertEqual(code, 400, ans)
            self.assertIn("max_tokens", ans["error"]["message"])
        finally:
            self.stop(p)

    def test_prefix_reuse_survives_kill_nine_with_the_index_in_a_host_arena(self):
        """Prefix reuse (docs/refengine.md, "Prefix reuse across a kill"): the batched engine with --kv-arena
        (the K/V on the GPU) and its index in a host daemon's arena; a prompt sharing a 96-token prefix with
        an earlier one reuses its positions; after kill -9 the next engine recovers the index (header valid,
        blocks recovered, none dropped), answers the same prompt exactly as before the kill, from the cache;
        another --max-model-len (another layout) drops the whole index; --no-enable-prefix-caching never
        hits and answers the first token as the cached path does."""
        self.start()
        host = Weightd(WEIGHTD, self.run_dir, os.path.join(self.tmp, "weightd-host.log"), "host")
        host.proc = subprocess.Popen(host.argv, stdout=open(host.log_path, "wb"), stderr=subprocess.STDOUT)
        self.addCleanup(host.stop)
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(self.run_dir, "weightd-host.sock")) and time.monotonic() < deadline:
            time.sleep(0.05)
        flags = ("--load-format", "disk", "--max-num-seqs", "4", "--max-model-len", "256", "--kv-arena", "kv")
        prefix = "".join(chr(65 + (i * 7) % 26) for i in range(96))  # 96 tokens: 6 blocks of 16
        first = {"prompt": prefix + " one?", "max_tokens": 6, "logprobs": 0}
        again = {"prompt": prefix + " two, please?", "max_tokens": 6, "logprobs": 0}

        def prefix_stats(port):
            return get(port, "/stats")["batch"]["prefix"]

        p, port, err = self.serve(*flags)
        self.assertIsNone(err, err)
        try:
            pre = prefix_stats(port)
            self.assertEqual((pre["location"], pre["recovery"]["header"]), ("arena", "empty"), pre)
            self.assertEqual(post(port, first)[0], 200)
            code, before = post(port, again)
            self.assertEqual(code, 200, before)
            pre = prefix_stats(port)
            self.assertGreaterEqual(pre["hit_tokens"], 96, pre)
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait(30)
        p, port, err = self.serve(*flags)
        self.assertIsNone(err, err)
        try:
            pre = prefix_stats(port)
            self.assertEqual(pre["recovery"]["header"], "valid", pre)
            self.assertGreaterEqual(pre["recovery"]["recovered"], 6, pre)
            self.assertEqual(pre["recovery"]["dropped"], {}, pre)
            code, after = post(port, again)
            self.assertEqual(code, 200, after)
            self.assertGreaterEqual(prefix_stats(port)["hit_tokens"], 96)
            # The same computation over the same K/V: bitwise the same answer.
            self.assertEqual(after["choices"][0]["token_ids"], before["choices"][0]["token_ids"])
            self.assertEqual(after["choices"][0]["logprobs"], before["choices"][0]["logprobs"])
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait(30)
        other = tuple(f if f != "256" else "240" for f in flags)
        p, port, err = self.serve(*other)
        self.assertIsNone(err, err)
        try:
            pre = prefix_stats(port)
            self.assertNotEqual(pre["recovery"]["header"], "valid", pre)
            self.assertEqual(pre["recovery"]["recovered"], 0, pre)
        finally:
            self.stop(p)
        p, port, err = self.serve(*(flags[:-2] + ("--no-enable-prefix-caching",)))
        self.assertIsNone(err, err)
        try:
            self.assertEqual(get(port, "/stats")["batch"]["prefix"], {"enabled": False})
            code, whole = post(port, again)
            self.assertEqual(code, 200, whole)
            # Computed whole, not over cached positions: the first token agrees (the logits are not
            # bitwise those of the suffix-only prefill: other kernel shapes).
            self.assertEqual(whole["choices"][0]["token_ids"][0], before["choices"][0]["token_ids"][0])
        finally:
            self.stop(p)

    def test_warmed_standby_parks_after_the_warm_up_and_binds_its_port_on_release(self):
        """docs/standby.md: a warmed standby has its context, weights and warm-up forward (and the graph)
        before it parks; its port opens only after the release; the oracle is that of a plain start."""
        plain, _ = self.run_path("--load-format", "disk", "--cuda-graph")
        port = free_port()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ, FASTRESTART_STANDBY_FD=str(theirs.fileno()), FASTRESTART_STANDBY_LEVEL="warmed")
        log = os.path.join(self.tmp, "standby.log")
        with open(log, "wb") as out:
            p = subprocess.Popen([sys.executable, ENGINE, "serve", self.model, "--port", str(port),
                                  "--served-model-name", "tiny", "--load-format", "disk", *SINGLE, "--cuda-graph"],
                                 stdout=out, stderr=subprocess.STDOUT, env=env, pass_fds=(theirs.fileno(),))
        theirs.close()
        try:
            with ours:
                ours.settimeout(180)
                parked = read_gate_message(self, ours, lambda: open(log).read())
                self.assertEqual(parked, {"op": "parked", "v": 1, "level": "warmed", "pid": p.pid})
                text = open(log).read()
                self.assertIn("cuda graph: decode step captured", text)  # captured before the gate
                self.assertNotIn("listening on", text)
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))  # nobody holds the engine's port
                ours.sendall(b'{"op":"release"}\n')
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    try:
                        stats = get(port, "/stats")
                        if stats["state"] == "ready":
                            break
                    except (OSError, urllib.error.URLError):
                        pass
                    time.sleep(0.02)
            self.assertEqual(stats["standby"]["level"], "warmed", stats["standby"])
            self.assertIn("release_to_ready_s", stats["standby"])
            self.assertEqual(stats["oracle"]["logits_sha256"], plain["oracle"]["logits_sha256"])
            self.assertIn("standby: released at warmed", open(log).read())
        finally:
            self.stop(p)

    def test_on_the_passed_socket_a_request_sent_during_the_start_is_answered_once_ready(self):
        """docs/refengine.md "The socket fastrestartd passes": a request sent before the engine even
        started waits in the kernel's queue and gets its answer (never a 503) once the engine is ready."""
        import http.client
        from listen_support import listening_socket, popen_with_socket
        plain, plain_ans = self.run_path("--load-format", "disk")
        log = os.path.join(self.tmp, "inherited.log")
        with listening_socket() as ls:
            port = ls.getsockname()[1]
            early = http.client.HTTPConnection("127.0.0.1", port, timeout=180)
            early.request("POST", "/v1/completions", body=json.dumps(
                {"model": "tiny", "prompt": "Hello", "max_tokens": 4, "logprobs": 0}),
                headers={"Content-Type": "application/json"})
            with open(log, "wb") as out:
                p = popen_with_socket([sys.executable, ENGINE, "serve", self.model, "--port", str(free_port()),
                                       "--served-model-name", "tiny", "--load-format", "disk"], ls,
                                      stdout=out, stderr=subprocess.STDOUT)
            try:
                r = early.getresponse()
                self.assertEqual(r.status, 200)
                self.assertEqual(json.loads(r.read())["choices"][0]["token_ids"],
                                 plain_ans["choices"][0]["token_ids"])
                early.close()
                text = open(log).read()
                self.assertTrue(0 <= text.find("ready in") < text.find("accepting on the socket fastrestartd passed"),
                                text)
                self.assertNotIn("listening on", text)
            finally:
                self.stop(p)

    def test_the_private_endpoint_is_served_beside_the_passed_socket(self):
        """docs/listen-socket.md "The private endpoint": passed as descriptor 4 (readiness.endpoint =
        "private"), it answers fastrestartd's checks like the public socket, once ready; a request that
        waited on each socket during the start gets the same answer."""
        import http.client
        from listen_support import listening_socket, popen_with_socket
        plain, plain_ans = self.run_path("--load-format", "disk")
        log = os.path.join(self.tmp, "probe.log")
        body = json.dumps({"model": "tiny", "prompt": "Hello", "max_tokens": 4})
        with listening_socket() as ls, listening_socket() as probe:
            waiting = []
            for s in (ls, probe):
                c = http.client.HTTPConnection("127.0.0.1", s.getsockname()[1], timeout=180)
                c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
                waiting.append(c)
            with open(log, "wb") as out:
                p = popen_with_socket([sys.executable, ENGINE, "serve", self.model, "--port", str(free_port()),
                                       "--served-model-name", "tiny", "--load-format", "disk"], ls, probe=probe,
                                      stdout=out, stderr=subprocess.STDOUT)
            try:
                for c in waiting:
                    r = c.getresponse()
                    self.assertEqual(r.status, 200)
                    self.assertEqual(json.loads(r.read())["choices"][0]["token_ids"], plain_ans["choices"][0]["token_ids"])
                    c.close()
                health = http.client.HTTPConnection("127.0.0.1", probe.getsockname()[1], timeout=60)
                health.request("GET", "/health")
                self.assertEqual(health.getresponse().status, 200)
                health.close()
            finally:
                self.stop(p)

    def test_bad_requests_are_400_naming_the_field(self):
        p, port, err = self.serve("--load-format", "disk")
        self.assertIsNone(err)
        try:
            code, ans = post(port, {"prompt": [], "max_tokens": 1})
            self.assertEqual(code, 400)
            self.assertIn("prompt", ans["error"]["message"])
            code, ans = post(port, {"prompt": "x", "max_tokens": 0})
            self.assertEqual(code, 400)
            self.assertIn("max_tokens", ans["error"]["message"])
            code, ans = post(port, {"prompt": "x", "model": "other"})
            self.assertEqual(code, 404)
        finally:
            self.stop(p)

    def test_missing_checkpoint_exits_1_naming_the_directory(self):
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(empty)
        p, _, out = self.serve("--load-format", "disk", model=empty)
        self.assertEqual(p.returncode, 1)
        self.assertIn(empty, out)


if __name__ == "__main__":
    unittest.main()

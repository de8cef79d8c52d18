"""The batched reference engine's arithmetic without torch or a GPU (python/refengine/refengine_batch.py):
vLLM's capture sizes, the graph a batch runs, the default --max-num-seqs, the KV budget and shape, the
static slots, and the flag rules. The GPU side (the profile, the KV cache, the graphs, batched decoding) is
test_refengine's test_batched_engine_... on the GPU machine: without torch it skips with the reason."""

import contextlib
import http.client
import importlib.util
import io
import json
import os
import sys
import threading
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "refengine"))

import fastrestart_refengine as ref  # noqa: E402 -- imports no torch before start()
import refengine_batch as rb  # noqa: E402
import refengine_stream as rs  # noqa: E402

GIB = 1 << 30


class CaptureSizes(unittest.TestCase):
    def test_vllm_default_rule(self):
        self.assertEqual(rb.default_capture_sizes(1, 8192), [1, 2])
        self.assertEqual(rb.default_capture_sizes(8, 8192), [1, 2, 4, 8, 16])
        s128 = rb.default_capture_sizes(128, 8192)
        self.assertEqual(len(s128), 35)  # 1, 2, 4 and 8..256 by 8: 2 x 128 = 256 is the top
        self.assertEqual(s128[:5], [1, 2, 4, 8, 16])
        self.assertEqual(s128[-1], 256)
        s1024 = rb.default_capture_sizes(1024, 8192)
        self.assertEqual(len(s1024), 51)  # vLLM's H200 defaults: up to 512, by 16 from 256
        self.assertEqual(s1024[-3:], [480, 496, 512])
        self.assertIn(272, s1024)
        self.assertNotIn(264, s1024)
        self.assertEqual(s1024, sorted(set(s1024)))

    def test_capped_by_batched_tokens(self):
        self.assertEqual(rb.default_capture_sizes(1024, 16), [1, 2, 4, 8, 16])
        self.assertEqual(rb.default_capture_sizes(256, 300)[-1], 288)

    def test_explicit_sizes(self):
        self.assertEqual(rb.parse_capture_sizes("8, 1,4,4", 8192), [1, 4, 8])
        self.assertEqual(rb.parse_capture_sizes("1,2,9000", 8192), [1, 2])
        for bad in ("a,b", "0,1", ""):
            with self.assertRaisesRegex(ValueError, "--cuda-graph-sizes"):
                rb.parse_capture_sizes(bad, 8192)

    def test_smallest_size_that_fits(self):
        sizes = rb.default_capture_sizes(1024, 8192)
        self.assertEqual(rb.graph_for(sizes, 1), 1)
        self.assertEqual(rb.graph_for(sizes, 3), 4)
        self.assertEqual(rb.graph_for(sizes, 9), 16)
        self.assertEqual(rb.graph_for(sizes, 256), 256)
        self.assertEqual(rb.graph_for(sizes, 257), 272)
        self.assertIsNone(rb.graph_for(sizes, 513))  # eager
        self.assertIsNone(rb.graph_for([], 1))       # --enforce-eager

    def test_default_max_num_seqs(self):
        self.assertEqual(rb.default_max_num_seqs(140 * GIB, "NVIDIA H200"), (1024, 8192))
        self.assertEqual(rb.default_max_num_seqs(80 * GIB, "NVIDIA A100-SXM4-80GB"), (256, 2048))
        self.assertEqual(rb.default_max_num_seqs(24 * GIB, "NVIDIA L4"), (256, 2048))


class KvSizing(unittest.TestCase):
    def test_budget_is_the_share_minus_what_is_not_kv(self):
        budget, t = rb.kv_budget(total=100 * GIB, utilization=0.9, torch_before_profile=16 * GIB,
                                 torch_peak_increase=2 * GIB, non_torch_increase=GIB // 2,
                                 attached_weight_bytes=0, share_excludes_attached=False)
        self.assertEqual(t["requested_bytes"], int(100 * GIB * 0.9))
        self.assertEqual(budget, int(100 * GIB * 0.9) - (16 + 2) * GIB - GIB // 2)

    def test_attached_weights_are_counted_once(self):
        # Weights mapped from the daemon are in no torch statistic: counted explicitly...
        standalone, t = rb.kv_budget(100 * GIB, 0.9, 0, 2 * GIB, GIB // 2, 16 * GIB, share_excludes_attached=False)
        self.assertEqual(t["attached_counted_bytes"], 16 * GIB)
        disk, _ = rb.kv_budget(100 * GIB, 0.9, 16 * GIB, 2 * GIB, GIB // 2, 0, False)
        self.assertEqual(standalone, disk)  # the same budget as the same weights read from disk
        # ...unless the share was already lowered by the daemon's pool (fastrestartd, zero_copy).
        lowered, t = rb.kv_budget(100 * GIB, 0.9 - 0.16, 0, 2 * GIB, GIB // 2, 16 * GIB, True)
        self.assertEqual(t["attached_counted_bytes"], 0)
        self.assertAlmostEqual(lowered, standalone, delta=GIB // 100)

    def test_negative_terms_do_not_inflate_the_budget(self):
        budget, t = rb.kv_budget(100 * GIB, 0.5, GIB, -3 * GIB, -GIB, 0, False)
        self.assertEqual(budget, 50 * GIB - GIB)
        self.assertEqual(t["non_torch_increase_bytes"], 0)

    def test_shape(self):
        per = rb.bytes_per_position(layers=32, kv_heads=8, head_dim=128, dtype_bytes=2)
        self.assertEqual(per, 128 * 1024)  # Llama-3.1-8B, bf16: 128 KiB a token
        positions = rb.kv_shape(110 * GIB, 1024, per, 131072, 10)
        self.assertEqual(positions % rb.BLOCK, 0)
        self.assertLessEqual(1024 * positions * per, 110 * GIB)
        self.assertGreater(1024 * (positions + rb.BLOCK) * per, 110 * GIB)
        self.assertEqual(rb.kv_shape(110 * GIB, 8, per, 2048, 10), 2048)  # capped by max_model_len

    def test_too_small_names_the_flags(self):
        with self.assertRaisesRegex(ValueError, "--gpu-memory-utilization.*--max-num-seqs"):
            rb.kv_shape(GIB, 1024, 128 * 1024, 131072, 24)
        with self.assertRaisesRegex(ValueError, "0.00 GiB"):
            rb.kv_shape(-5 * GIB, 1, 1024, 100, 24)


class Slots(unittest.TestCase):
    def test_lowest_free_slot_first_at_most_max_num_seqs(self):
        s = rb.SlotScheduler(3)
        reqs = [rb.Request([1, 2], 4, False) for _ in range(5)]
        for r in reqs:
            s.submit(r)
        self.assertEqual([r.slot for r in s.admit()], [0, 1, 2])
        self.assertEqual(s.rows(), 3)
        self.assertEqual(s.admit(), [])  # full: the others wait, in order
        s.release(reqs[1])
        self.assertEqual(s.rows(), 3)    # slot 1 idle: a padding row of a batch of 3
        (r,) = s.admit()
        self.assertIs(r, reqs[3])
        self.assertEqual(r.slot, 1)
        for r in (reqs[0], reqs[2], reqs[3]):
            s.release(r)
        self.assertEqual(s.rows(), 0)
        (r,) = s.admit()
        self.assertEqual(r.slot, 0)
        self.assertEqual(s.rows(), 1)

    def test_release_of_a_stale_request_keeps_the_slot(self):
        s = rb.SlotScheduler(1)
        a, b = rb.Request([1], 1, False), rb.Request([1], 1, False)
        s.submit(a)
        s.admit()
        s.release(a)
        s.submit(b)
        s.admit()
        s.release(a)  # a second release of a must not free b's slot
        self.assertEqual(s.active, {0: b})

    def test_wait_for_work_wakes_on_submit(self):
        s = rb.SlotScheduler(2)
        self.assertFalse(s.wait_for_work(0.01))
        threading.Timer(0.05, s.submit, (rb.Request([1], 1, False),)).start()
        self.assertTrue(s.wait_for_work(30))

    def test_request_finishes_at_max_tokens(self):
        r = rb.Request([1, 2, 3], 2, True)
        r.tokens.append(5)
        self.assertFalse(r.finished())
        r.tokens.append(6)
        self.assertTrue(r.finished())


def stand_in_prefill(ids, slot):
    """A stand-in model: the first token depends on the whole prompt only (not on the slot)."""
    return (sum(ids) * 13 + len(ids)) % 997, -0.5


def stand_in_next(tok, pos):
    return (tok * 31 + pos * 7 + 1) % 997


def alone(ids, max_tokens):
    """What one request decoded alone gets from the stand-in model."""
    toks = [stand_in_prefill(ids, 0)[0]]
    pos = len(ids)
    while len(toks) < max_tokens:
        toks.append(stand_in_next(toks[-1], pos))
        pos += 1
    return toks


class Batching(unittest.TestCase):
    """The step loop's bookkeeping (refengine_batch.Batcher) driven by a stand-in model: what the GPU step
    thread does between forwards."""

    def run_all(self, batcher, steps):
        def step(size, n, ids, pos):
            steps.append({"size": size, "n": n, "ids": list(ids), "pos": list(pos),
                          "busy": sorted(batcher.sched.active)})
            return [stand_in_next(t, p) for t, p in zip(ids, pos)], [-1.0] * n

        rounds = 0
        while batcher.iterate(stand_in_prefill, step):
            rounds += 1
            self.assertLess(rounds, 10000)

    def test_every_request_gets_what_it_would_alone(self):
        b = rb.Batcher(4, [1, 2, 4, 8])
        reqs = [rb.Request([65 + i] * (1 + i % 3), 1 + (i * 5) % 9, i % 2 == 0) for i in range(11)]
        for r in reqs:
            b.submit(r)
        steps = []
        self.run_all(b, steps)
        for r in reqs:
            self.assertTrue(r.done.is_set())
            self.assertEqual(r.tokens, alone(r.ids, r.max_tokens))
            self.assertEqual(len(r.logprobs), r.max_tokens)
            self.assertEqual(r.logprobs[0], -0.5 if r.want_logprobs else None)
        self.assertEqual(b.sched.active, {})
        self.assertEqual(sorted(b.sched.free), [0, 1, 2, 3])
        self.assertTrue(steps)
        for s in steps:
            self.assertLessEqual(len(s["busy"]), 4)                  # at most --max-num-seqs at once
            self.assertEqual(s["size"], rb.graph_for([1, 2, 4, 8], s["busy"][-1] + 1))  # smallest that fits
            self.assertEqual(s["n"], s["size"])
            for row in range(s["n"]):
                if row not in s["busy"]:                            # a padding row
                    self.assertEqual((s["ids"][row], s["pos"][row]), (0, 0))
        self.assertTrue(any(len(s["busy"]) > 1 for s in steps))      # requests were decoded together
        self.assertEqual(b.stats["steps"], len(steps))
        self.assertEqual(b.stats["rows"], sum(len(s["busy"]) for s in steps))
        self.assertEqual(b.stats["prefills"], 11)
        self.assertEqual(b.stats["eager_steps"], 0)

    def test_above_the_largest_graph_or_without_graphs_the_step_is_eager(self):
        for sizes in ([1, 2], []):
            b = rb.Batcher(6, sizes)
            reqs = [rb.Request([70, i], 5, False) for i in range(6)]
            for r in reqs:
                b.submit(r)
            steps = []
            self.run_all(b, steps)
            self.assertEqual(steps[0]["size"], None)
            self.assertEqual(steps[0]["n"], 6)  # eager: exactly the rows the busy slots need
            for s in steps:  # graphed exactly when the busy rows fit the largest size
                busy = s["busy"][-1] + 1
                self.assertEqual(s["size"] is None, not sizes or busy > max(sizes), s)
            self.assertEqual(b.stats["eager_steps"], sum(1 for s in steps if s["size"] is None))
            for r in reqs:
                self.assertEqual(r.tokens, alone(r.ids, 5))

    def test_concurrent_submitters_are_all_answered(self):
        """HTTP threads submit and wait while one step thread iterates (as refengine_runner.Runner does)."""
        b = rb.Batcher(8, rb.default_capture_sizes(8, 8192))
        stop = threading.Event()

        def step_thread():
            while not stop.is_set():
                if b.sched.wait_for_work(0.05):
                    b.iterate(stand_in_prefill, lambda size, n, ids, pos: (
                        [stand_in_next(t, p) for t, p in zip(ids, pos)], [0.0] * n))

        t = threading.Thread(target=step_thread)
        t.start()
        got = {}

        def client(i):
            r = rb.Request([40 + i, 41 + i], 3 + i % 7, False)
            b.submit(r)
            self.assertTrue(r.done.wait(60))
            got[i] = (r.tokens, alone(r.ids, r.max_tokens))

        clients = [threading.Thread(target=client, args=(i,)) for i in range(40)]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        stop.set()
        t.join()
        self.assertEqual(len(got), 40)
        for i, (tokens, want) in got.items():
            self.assertEqual(tokens, want, i)

    def test_fail_all_answers_every_request_with_the_reason(self):
        b = rb.Batcher(1, [1])
        a, w = rb.Request([1], 4, False), rb.Request([2], 4, False)
        b.submit(a)
        b.submit(w)
        b.sched.admit()
        b.fail_all("CUDA error: an illegal memory access")
        for r in (a, w):
            self.assertTrue(r.done.is_set())
            self.assertEqual(r.error, "CUDA error: an illegal memory access")
        self.assertEqual((b.sched.active, b.sched.waiting, b.sched.free), ({}, [], [0]))


class Flags(unittest.TestCase):
    def parse(self, *argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                return ref.parse_args(["serve", "/m", *argv]), ""
            except SystemExit as e:
                self.assertEqual(e.code, 2)
                return None, err.getvalue()

    def test_defaults_are_batched_and_single_request_is_opt_in(self):
        a, _ = self.parse()
        self.assertTrue(a.batched)
        self.assertIsNone(a.max_num_seqs)  # vLLM's default for the GPU, decided once CUDA is up
        a, _ = self.parse("--max-num-seqs", "1", "--enforce-eager")
        self.assertFalse(a.batched)
        a, _ = self.parse("--max-num-seqs", "1", "--cuda-graph")
        self.assertFalse(a.batched)
        a, _ = self.parse("--max-num-seqs", "1")
        self.assertTrue(a.batched)  # one slot, graphs of 1 and 2
        a, _ = self.parse("--max-num-seqs", "64", "--enforce-eager")
        self.assertTrue(a.batched)
        a, _ = self.parse("--tensor-parallel-size", "2")
        self.assertFalse(a.batched)
        self.assertIsNone(a.kv_arena)  # the KV cache is the engine's own unless --kv-arena names an arena
        a, _ = self.parse("--kv-arena", "kv")
        self.assertEqual((a.kv_arena, a.kv_arena_wait, a.kv_arena_zero), ("kv", 30.0, False))

    def test_errors_name_the_flag(self):
        for argv, text in [(("--cuda-graph",), "--cuda-graph is the single-request engine's graph"),
                           (("--max-num-seqs", "0"), "--max-num-seqs must be at least 1"),
                           (("--max-model-len", "0"), "--max-model-len must be at least 1"),
                           (("--cuda-graph-sizes", "1,x"), "--cuda-graph-sizes"),
                           (("--max-num-seqs", "1", "--enforce-eager", "--compile"), "--compile"),
                           (("--tensor-parallel-size", "2", "--max-num-seqs", "8"), "--tensor-parallel-size > 1"),
                           (("--max-num-seqs", "1", "--enforce-eager", "--kv-arena", "kv"), "--kv-arena is the batched"),
                           (("--kv-arena", "kv", "--kv-arena-wait", "-1"), "--kv-arena-wait must be within")]:
            a, err = self.parse(*argv)
            self.assertIsNone(a, argv)
            self.assertIn(text, err)


class KvArena(unittest.TestCase):
    """Sizing the KV cache from the daemon's arena, and the layers' places in it."""
    PER = 2 * 4 * 2 * 8 * 2  # bytes_per_position(4 layers, 2 kv heads, head_dim 8, 2 bytes)

    def test_no_arena_in_the_daemon_sizes_from_the_own_budget(self):
        self.assertEqual(rb.kv_arena_plan(640, 4, self.PER, 4096, 7, None), (640, "the daemon holds no such arena"))

    def test_the_daemons_arena_within_five_percent_is_taken_as_it_is(self):
        # The live engine's arena: 4 slots x 656 positions, rounded up to a granule by the range.
        held = 4 * 656 * self.PER + 1000
        self.assertEqual(rb.kv_arena_plan(640, 4, self.PER, 4096, 7, held), (656, None))  # 2.5% more
        self.assertEqual(rb.kv_arena_plan(672, 4, self.PER, 4096, 7, held), (656, None))  # 2.4% less
        # A whole number of blocks, at most max_model_len.
        self.assertEqual(rb.kv_arena_plan(640, 4, self.PER, 4096, 7, 4 * 650 * self.PER), (640, None))
        self.assertEqual(rb.kv_arena_plan(608, 4, self.PER, 608, 7, held), (608, None))

    def test_an_arena_more_than_five_percent_off_falls_back_with_the_reason(self):
        positions, why = rb.kv_arena_plan(640, 4, self.PER, 4096, 7, 4 * 704 * self.PER)  # 10% more
        self.assertEqual(positions, 640)
        self.assertIn("704 positions per slot, this engine's budget 640: more than 5% apart", why)
        positions, why = rb.kv_arena_plan(640, 4, self.PER, 4096, 7, 4 * 576 * self.PER)  # 10% less
        self.assertEqual(positions, 640)
        self.assertIn("576 positions", why)
        positions, why = rb.kv_arena_plan(8, 4, self.PER, 4096, 7, 4 * 3 * self.PER)
        self.assertEqual(positions, 8)
        self.assertIn("fewer than 7", why)

    def test_layout_puts_the_layers_back_to_back(self):
        offsets, shape, used = rb.kv_arena_layout(4, 3, 2, 32, 8, 2)
        layer = 2 * 3 * 2 * 32 * 8 * 2
        self.assertEqual(offsets, [0, layer, 2 * layer, 3 * layer])
        self.assertEqual(shape, [2, 3, 2, 32, 8])
        self.assertEqual(used, 4 * layer)
        self.assertEqual(used, rb.bytes_per_position(4, 2, 8, 2) * 3 * 32)


HAVE_TORCH = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))
WEIGHTD = os.environ.get("FR_WEIGHTD_BIN", "")


@unittest.skipUnless(HAVE_TORCH, "torch is not installed (python_refengine_batch's arena forward runs where it is)")
@unittest.skipUnless(WEIGHTD and os.access(WEIGHTD, os.X_OK), "FR_WEIGHTD_BIN is not set to fastrestart-weightd")
class KvArenaForward(unittest.TestCase):
    """The batched forward (refengine_runner.Runner) on the CPU over a tiny random Llama: its KV cache as views
    into a host arena gives the tokens of a torch.zeros KV cache, after the placeholder was written through
    and with stale values of an earlier holder in the arena (masked positions weigh 0 in the attention)."""

    def setUp(self):
        import tempfile
        import types
        import torch
        import transformers
        import fastrestart
        import refengine_runner
        from weightd_support import Weightd
        self.torch, self.fastrestart = torch, fastrestart
        self.tmp = tempfile.TemporaryDirectory(prefix="fr-kvarena-")
        self.run_dir = os.path.join(self.tmp.name, "run")
        os.mkdir(self.run_dir, 0o700)
        self.daemon = Weightd(WEIGHTD, self.run_dir, os.path.join(self.tmp.name, "weightd.log")).start(self)
        torch.manual_seed(0)
        cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        model = transformers.LlamaForCausalLM(cfg).eval()
        self.engine = types.SimpleNamespace(torch=torch, args=None, device=torch.device("cpu"), model_config=cfg,
                                            model=model, dtype=torch.float32)
        self.Runner = refengine_runner.Runner

    def tearDown(self):
        self.daemon.stop()
        self.tmp.cleanup()

    def greedy(self, r, prompt, n):
        torch = self.torch
        with torch.inference_mode():
            ids = torch.tensor([prompt])
            tok, _ = r._step(ids, torch.arange(len(prompt))[None], 1)  # slot 1: slot 0 holds the stale values
            out = [int(tok[0])]
            for i in range(n - 1):
                t, _ = r._step(torch.tensor([[out[-1]]]), torch.tensor([[len(prompt) + i]]), 1)
                out.append(int(t[0]))
        return out

    def test_tokens_over_the_arena_equal_those_over_zeros(self):
        prompt = [5, 17, 99, 3, 64, 12]
        own = self.Runner(self.engine)
        kv = own.place_kv(3, 32)
        self.assertEqual(kv["placement"], "torch")
        want = self.greedy(own, prompt, 8)

        r = self.Runner(self.engine)
        arena = self.fastrestart.reserve_arena("kv", kv["bytes"], socket_dir=self.run_dir)
        kv2 = r.place_kv(3, 32, arena)
        self.assertEqual((kv2["placement"], kv2["bytes"]), ("arena", kv["bytes"]))
        self.assertEqual(r.kv[0].data_ptr(), arena.base)
        self.greedy(r, [1, 2, 3], 4)  # over the placeholder: what it computes is garbage, and unread later
        lease = arena.swap_in()
        self.assertTrue(lease["created"])
        self.assertEqual(r.kv[0].data_ptr(), arena.base)
        # An earlier holder's values everywhere (finite, as a KV cache's are): masked, they change nothing.
        for t in r.kv:
            t.copy_(self.torch.randn_like(t) * 100)
        self.assertEqual(self.greedy(r, prompt, 8), want)
        r.zero_kv()
        self.assertEqual(float(r.kv[1].abs().sum()), 0.0)
        self.assertEqual(self.greedy(r, prompt, 8), want)

    def test_a_cache_larger_than_the_arena_is_refused(self):
        r = self.Runner(self.engine)
        arena = self.fastrestart.reserve_arena("kv", 4096, socket_dir=self.run_dir)
        with self.assertRaisesRegex(ValueError, "does not fit the arena"):
            r.place_kv(3, 32, arena)


class BlockChecksums(unittest.TestCase):
    """refengine_runner.TorchPrefixDevice.checksums_many (the blocks a decode step filled, one pass) equals
    checksums() range by range, bit for bit, for bf16 and float32 K/V; position_sums (a tail's) adds up
    to checksums() of the block. Needs torch (the GPU machine's
    tests-torch run); CPU tensors."""

    def test_one_pass_equals_range_by_range(self):
        try:
            import torch
        except ImportError:
            self.skipTest("no torch here (runs in scripts/gpu-run.sh tests-torch)")
        import types
        import refengine_runner
        for dtype in (torch.bfloat16, torch.float32):
            torch.manual_seed(3)
            slots, hkv, positions, d = 5, 2, 4 * rb.BLOCK, 8
            kv = [torch.randn(2, slots, hkv, positions, d).to(dtype) for _ in range(3)]
            esize = torch.empty((), dtype=dtype).element_size()
            runner = types.SimpleNamespace(torch=torch, kv=kv, hkv=hkv, head_dim=d, device=torch.device("cpu"),
                                           _esize=lambda e=esize: e)
            dev = refengine_runner.TorchPrefixDevice(runner)
            ranges = [(3, 1, 2), (0, 0, 3), (4, 2, 2), (1, 3, 4)]
            self.assertEqual(dev.checksums_many(ranges), [dev.checksums(*r) for r in ranges], dtype)
            self.assertEqual(dev.checksums_many([]), [])
            # A tail's checksum: positions' shares sum to the block's, mod 2^64, in both passes (stacked
            # for a decode step's few positions, layer by layer for a recovery's many).
            mask = (1 << 64) - 1
            for stacked in (64, 0):
                dev.STACKED_POSITIONS = stacked
                whole = [c & mask for c in dev.checksums(2, 0, 3)]
                self.assertEqual(dev.position_sums([(2, j, 0, rb.BLOCK) for j in range(3)]), whole, dtype)
                parts = dev.position_sums([(2, 1, 0, 5), (2, 1, 5, 6), (2, 1, 6, rb.BLOCK)])
                self.assertEqual(sum(parts) & mask, whole[1], dtype)
                one = dev.position_sums([(2, 1, p, p + 1) for p in range(rb.BLOCK)])
                self.assertEqual(sum(one) & mask, whole[1], dtype)
                self.assertEqual(dev.position_sums([(0, 0, 3, 3)]), [0])


class Streaming(unittest.TestCase):
    """A streamed answer (refengine_stream, Request.tokens_after): tokens read as the step thread decodes
    them, the events in vLLM's format, and the engine's HTTP handler writing them chunked."""

    def test_a_reader_gets_every_token_in_order_while_the_step_thread_decodes(self):
        b = rb.Batcher(2, [1, 2])
        reqs = [rb.Request([70 + i] * (2 + i), 5 + 3 * i, False) for i in range(3)]
        got = [[] for _ in reqs]

        def read(i):
            n = 0
            while True:
                toks, _ = reqs[i].tokens_after(n, timeout=10)
                got[i] += toks
                n += len(toks)
                if reqs[i].done.is_set() and n >= len(reqs[i].tokens):
                    return

        readers = [threading.Thread(target=read, args=(i,)) for i in range(len(reqs))]
        for t in readers:
            t.start()
        for r in reqs:
            b.submit(r)

        def step(size, n, ids, pos):
            return [stand_in_next(t, p) for t, p in zip(ids, pos)], [-1.0] * n

        while b.iterate(stand_in_prefill, step):
            pass
        for t in readers:
            t.join(10)
            self.assertFalse(t.is_alive())
        for r, g in zip(reqs, got):
            self.assertEqual(g, alone(r.ids, r.max_tokens))

    def test_a_failed_step_thread_wakes_a_waiting_reader(self):
        b = rb.Batcher(1, [1])
        req = rb.Request([65], 4, False)
        b.submit(req)
        woke = []
        t = threading.Thread(target=lambda: woke.append(req.tokens_after(0, timeout=10)))
        t.start()
        b.fail_all("the GPU fell off")
        t.join(10)
        self.assertEqual(woke, [([], [])])
        self.assertEqual(req.error, "the GPU fell off")

    def events(self, raw):
        out = raw.decode().split("\n\n")
        self.assertEqual(out[-1], "")
        self.assertEqual(out[-2], "data: [DONE]")
        return [json.loads(e[len("data: "):]) for e in out[:-2]]

    def test_events_are_vllms_completion_stream(self):
        s = rs.CompletionStream("cmpl-1", 1700000000, "m", [1, 2, 3], 2, lambda t: f"<{t}>",
                                return_token_ids=True, include_usage=True)
        raw = s.token(7) + s.token(8) + s.end()
        ev = self.events(raw)
        self.assertEqual(len(ev), 3)
        self.assertEqual(list(ev[0]), ["id", "object", "created", "model", "choices", "usage"])
        self.assertEqual(list(ev[0]["choices"][0]), ["index", "text", "logprobs", "finish_reason", "stop_reason",
                                                     "prompt_token_ids", "token_ids"])
        c0, c1 = ev[0]["choices"][0], ev[1]["choices"][0]
        self.assertEqual((c0["text"], c0["prompt_token_ids"], c0["token_ids"], c0["finish_reason"]),
                         ("<7>", [1, 2, 3], [7], None))
        self.assertEqual((c1["text"], c1["prompt_token_ids"], c1["token_ids"], c1["finish_reason"]),
                         ("<8>", None, [8], "length"))
        self.assertEqual(ev[2]["choices"], [])
        self.assertEqual(ev[2]["usage"], {"prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2})
        self.assertEqual({e["id"] for e in ev}, {"cmpl-1"})

    def test_without_token_ids_or_usage(self):
        s = rs.CompletionStream("c", 1, "m", [5], 1, str)
        ev = self.events(s.token(9, -0.25) + s.end())
        self.assertEqual(len(ev), 1)
        self.assertIsNone(ev[0]["choices"][0]["token_ids"])
        self.assertEqual(ev[0]["choices"][0]["prompt_token_ids"], [5])
        s = rs.CompletionStream("c", 1, "m", [5], 1, str, logprobs=True)
        ev = self.events(s.token(9, -0.25) + s.end())
        self.assertEqual(ev[0]["choices"][0]["logprobs"], {"tokens": ["9"], "token_logprobs": [-0.25]})

    def test_stream_fields_name_the_field_at_fault(self):
        self.assertEqual(rs.stream_fields({}), (False, False, False))
        self.assertEqual(rs.stream_fields({"stream": True, "stream_options": {}}), (True, True, False))
        self.assertEqual(rs.stream_fields({"stream": True, "stream_options": {"include_usage": False},
                                           "return_token_ids": True}), (True, False, True))
        for bad, field in (({"stream": "yes"}, "stream:"), ({"stream_options": {}}, "stream_options:"),
                           ({"stream": True, "stream_options": []}, "stream_options:"),
                           ({"stream": True, "stream_options": {"include_usage": 1}}, "include_usage"),
                           ({"return_token_ids": "no"}, "return_token_ids")):
            with self.assertRaisesRegex(ValueError, field):
                rs.stream_fields(bad)

    def test_the_handler_streams_chunked_events_as_they_come(self):
        """The engine's own HTTP handler over a stand-in engine whose tokens come one by one."""
        gate = threading.Semaphore(0)

        class StandIn:
            state = "ready"
            args = types.SimpleNamespace(served_model_name="m")
            hf_config = types.SimpleNamespace(vocab_size=1000)
            requests = {"completions": 0, "errors": 0}

            def check_length(self, ids, max_tokens):
                return None

            replays = []

            def generate_stream(self, ids, max_tokens, want_logprobs, replay=0):
                self.replays.append(replay)
                for i in range(max_tokens):
                    gate.acquire()  # the test releases token by token
                    yield stand_in_next(ids[-1], i), -1.0

        server = ref.Server(("127.0.0.1", 0), ref.make_handler(StandIn()))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        c = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
        self.addCleanup(c.close)
        c.request("POST", "/v1/completions", json.dumps({"prompt": [3, 4], "max_tokens": 3, "stream": True,
                                                          "return_token_ids": True, "stream_options": {}}))
        gate.release()  # the head is sent before the first token; the first event after it
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        self.assertEqual(r.getheader("Content-Type"), "text/event-stream")
        first = r.readline() + r.readline()
        self.assertTrue(first.startswith(b"data: {"), first)
        self.assertEqual(json.loads(first[6:])["choices"][0]["token_ids"], [stand_in_next(4, 0)])
        gate.release()
        gate.release()
        ev = self.events(first + r.read())
        self.assertEqual([e["choices"][0]["token_ids"][0] for e in ev[:3]], [stand_in_next(4, i) for i in range(3)])
        self.assertEqual(ev[3]["usage"]["completion_tokens"], 3)
        c.request("POST", "/v1/completions", json.dumps({"prompt": [3], "stream": 1}))
        r = c.getresponse()
        self.assertEqual(r.status, 400)
        self.assertIn("stream:", json.loads(r.read())["error"]["message"])
        # A stream the front continues: the count of generated ids reaches the engine; a bad one is refused.
        body = json.dumps({"prompt": [3, 4, 5], "max_tokens": 1, "stream": True})
        gate.release()
        c.request("POST", "/v1/completions", body, {rs.GENERATED_TOKENS: "2"})
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        r.read()
        self.assertEqual(StandIn.replays, [0, 2])
        c.request("POST", "/v1/completions", body, {rs.GENERATED_TOKENS: "3"})
        r = c.getresponse()
        self.assertEqual(r.status, 400)
        self.assertIn("Fastrestart-Generated-Tokens: 3 for a 3-token prompt", json.loads(r.read())["error"]["message"])

    def test_generated_tokens_header(self):
        self.assertEqual(rs.generated_tokens(None, "text"), 0)
        self.assertEqual(rs.generated_tokens(" 2 ", [1, 2, 3]), 2)
        for value, prompt, why in (("x", [1, 2], "not a decimal integer"), ("-1", [1, 2], "not a decimal integer"),
                                   ("0", [1, 2], "from 1 to 1"), ("2", [1, 2], "2 for a 2-token prompt"),
                                   ("1", "ab", "only with a prompt of token ids"), ("\u0663", [1, 2], "decimal")):
            with self.assertRaisesRegex(ValueError, "Fastrestart-Generated-Tokens: .*" + why):
                rs.generated_tokens(value, prompt)


if __name__ == "__main__":
    unittest.main()

"""The batched reference engine's arithmetic without torch or a GPU (python/refengine/refengine_batch.py):
vLLM's capture sizes, the graph a batch runs, the default --max-num-seqs, the KV budget and shape, the
static slots, and the flag rules. The GPU side (the profile, the KV cache, the graphs, batched decoding) is
test_refengine's test_batched_engine_... on the GPU machine: without torch it skips with the reason."""

import contextlib
import io
import os
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "refengine"))

import fastrestart_refengine as ref  # noqa: E402 -- imports no torch before start()
import refengine_batch as rb  # noqa: E402

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

    def test_errors_name_the_flag(self):
        for argv, text in [(("--cuda-graph",), "--cuda-graph is the single-request engine's graph"),
                           (("--max-num-seqs", "0"), "--max-num-seqs must be at least 1"),
                           (("--max-model-len", "0"), "--max-model-len must be at least 1"),
                           (("--cuda-graph-sizes", "1,x"), "--cuda-graph-sizes"),
                           (("--max-num-seqs", "1", "--enforce-eager", "--compile"), "--compile"),
                           (("--tensor-parallel-size", "2", "--max-num-seqs", "8"), "--tensor-parallel-size > 1")]:
            a, err = self.parse(*argv)
            self.assertIsNone(a, argv)
            self.assertIn(text, err)


if __name__ == "__main__":
    unittest.main()

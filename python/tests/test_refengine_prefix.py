"""The batched reference engine's prefix reuse and its index across a kill (python/refengine/refengine_prefix.py;
docs/refengine.md, "Prefix reuse across a kill"), without torch or a GPU.

The KV cache is a stand-in with the property that matters: the "K/V" of position p of a slot is computed
from the K/V at p - 1 of the same slot and the token at p (as attention reads the earlier positions), and
the answer token is read from the last one. So a request admitted over a cached prefix answers as it would
computing everything only if the slot really held that prefix's K/V. The stand-in cache and the index live
in MAP_SHARED memory that outlives a process, as the daemon's arenas do: a child process serves and is
killed with SIGKILL at random instants; the next "engine" recovers the index and every block it keeps holds
exactly the K/V of its tokens. The GPU side (the torch checksum, the CUDA event, the startup writes at the
scratch position) is test_refengine's test_prefix_... on the GPU machine.

Run: python3 -m unittest -v test_refengine_prefix   (ctest python_refengine_prefix)
"""

import mmap
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "refengine"))

import refengine_batch as rb  # noqa: E402
import refengine_prefix as rp  # noqa: E402

VOCAB = 50
P = (1 << 31) - 1
SLOTS, POSITIONS = 6, 96  # 5 indexable blocks of 16 per slot (the last block holds the scratch position)
IDENTITY = rp.identity_digest({"model": "stand-in", "slots": SLOTS, "positions": POSITIONS})


def kv_step(prev, tok):
    return (prev * 31 + tok + 1) % P


class StandIn:
    """The stand-in model over `kv` ([slots, positions] int64): prefill and decode as the Batcher calls them."""

    def __init__(self, kv, index=None):
        self.kv = kv
        self.index = index  # checked at every write: never a position of a published block (invariant 1)
        self.writes = []  # (slot, first position, last position + 1) of every prefill

    def _check(self, slot, p):
        if self.index is not None:
            published = int(self.index.u64[self.index._rec(slot)]) * rp.BLOCK  # the commit word in memory
            assert p >= published, f"a write at position {p} of slot {slot}, which has {published} published"

    def _out(self, v):
        return int(v % VOCAB), -float(v % 1000) / 1000.0

    def prefill(self, ids, slot, start=0):
        kv = self.kv
        prev = kv[slot, start - 1] if start else 7
        for p in range(start, len(ids)):
            self._check(slot, p)
            prev = kv[slot, p] = kv_step(int(prev), ids[p])
        self.writes.append((slot, start, len(ids)))
        return self._out(int(kv[slot, len(ids) - 1]))

    def step(self, size, n, ids, pos):
        toks, lps = [], []
        for r in range(n):
            p = pos[r]
            prev = self.kv[r, p - 1] if p else 7
            self._check(r, p)
            self.kv[r, p] = kv_step(int(prev), ids[r])
            t, lp = self._out(int(self.kv[r, p]))
            toks.append(t)
            lps.append(lp)
        return toks, lps


class Device:
    """The device side of refengine_prefix.PrefixCache over the stand-in cache: writes are synchronous,
    so an event is complete at once; checksums as the runner's (a weighted sum per block)."""

    def __init__(self, kv):
        self.kv = kv
        self.recorded = 0

    def record(self):
        self.recorded += 1
        return self.recorded

    def wait(self, event):
        assert event == self.recorded

    def checksums(self, slot, first, upto):
        w = np.arange(1, rp.BLOCK + 1, dtype=np.int64)
        return [int((self.kv[slot, j * rp.BLOCK:(j + 1) * rp.BLOCK] * w).sum()) for j in range(first, upto)]

    def checksums_of(self, wanted):
        self.recoveries = getattr(self, "recoveries", 0) + 1  # one call per recovery, every slot in it
        return {s: self.checksums(s, 0, n) for s, n in wanted.items()}

    def position_sums(self, items):
        w = np.arange(1, rp.BLOCK + 1, dtype=np.int64)
        return [int((self.kv[slot, j * rp.BLOCK + lo:j * rp.BLOCK + hi] * w[lo:hi]).sum()) for slot, j, lo, hi in items]


class Broken(Device):
    """A device whose position checksums fail (a KV layout the torch indexing does not take)."""

    def position_sums(self, items):
        raise RuntimeError("index out of range")


def expected_kv(tokens):
    out, prev = [], 7
    for t in tokens:
        prev = kv_step(prev, int(t))
        out.append(prev)
    return out


def prompts(rng, n):
    """Prompts over 4 shared prefixes of 1-4 blocks, with suffixes of 1-20 tokens."""
    prefixes = [[(7 * s + i) % VOCAB for i in range(rp.BLOCK * (1 + s))] for s in range(4)]
    return [prefixes[rng.randrange(4)] + [rng.randrange(VOCAB) for _ in range(1 + rng.randrange(20))] for _ in range(n)]


def serve(batcher, model, reqs, streams=False):
    """Submits every request (streamed ones with `streams`) and runs the step loop until all are answered."""
    rs = [rb.Request(ids, mt, True) for ids, mt in reqs]
    for r in rs:
        r.stream = streams
        batcher.submit(r)
    while not all(r.done.is_set() for r in rs):
        batcher.iterate(model.prefill, model.step)
    return [(r.tokens, r.logprobs) for r in rs]


def shared_buffers(path_prefix):
    """The index and the stand-in cache in MAP_SHARED files (memory that outlives the process)."""
    out = []
    for name, size in (("index", rp.index_bytes(SLOTS, POSITIONS)), ("kv", SLOTS * POSITIONS * 8)):
        path = f"{path_prefix}.{name}"
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.truncate(size)
        with open(path, "r+b") as f:
            m = mmap.mmap(f.fileno(), size)
        out.append(np.frombuffer(m, dtype=np.uint8))
    return out[0], out[1].view(np.int64).reshape(SLOTS, POSITIONS)


def engine(index_buf, kv, kv_generation, kv_created=False, identity=IDENTITY):
    """One engine's start: the index recovered, the Batcher with the prefix hooks."""
    dev = Device(kv)
    idx = rp.PrefixIndex(index_buf, identity, SLOTS, POSITIONS, VOCAB)
    rec = idx.recover(kv_generation, kv_created, dev.checksums_of, dev.position_sums)
    pre = rp.PrefixCache(idx, dev)
    model = StandIn(kv, idx)
    return rb.Batcher(SLOTS, [1, 2, 4], pad_pos=POSITIONS - 1, prefix=pre), model, idx, rec


class PrefixReuse(unittest.TestCase):
    def test_answers_equal_those_computed_whole_and_prefixes_hit(self):
        rng = random.Random(5)
        reqs = [(p, 1 + rng.randrange(6)) for p in prompts(rng, 60)]
        ref_kv = np.zeros((SLOTS, POSITIONS), dtype=np.int64)
        ref_model = StandIn(ref_kv)
        want = serve(rb.Batcher(SLOTS, [1, 2, 4]), ref_model, reqs)
        buf = np.zeros(rp.index_bytes(SLOTS, POSITIONS), dtype=np.uint8)
        kv = np.zeros((SLOTS, POSITIONS), dtype=np.int64)
        b, model, idx, rec = engine(buf, kv, 0)
        self.assertEqual(rec["header"], "empty")
        # In waves of 3, so that requests find slots their predecessors left.
        got = []
        for i in range(0, len(reqs), 3):
            got += serve(b, model, reqs[i:i + 3])
        self.assertEqual(got, want)
        self.assertGreater(idx.stats["hit_tokens"], 0)
        self.assertLessEqual(idx.stats["hit_tokens"], idx.stats["query_tokens"])
        self.assertTrue(any(start > 0 for _, start, _ in model.writes), "no prefill started after a cached prefix")
        # Every start is a whole number of blocks and leaves the last prompt token to compute.
        for _, start, n in model.writes:
            self.assertEqual(start % rp.BLOCK, 0)
            self.assertLess(start, n)

    def test_padding_rows_never_touch_a_cached_block(self):
        buf = np.zeros(rp.index_bytes(SLOTS, POSITIONS), dtype=np.uint8)
        kv = np.zeros((SLOTS, POSITIONS), dtype=np.int64)
        b, model, idx, _ = engine(buf, kv, 0)
        prefix = list(range(rp.BLOCK * 3))
        serve(b, model, [(prefix + [1], 2)])  # slot 0 now holds 3 blocks
        self.assertEqual(idx.valid[0], 3)
        before = kv[0].copy()
        # A request in a higher slot decodes with slot 0 idle below it: a padding row each step.
        b.sched.free.remove(0)
        import heapq
        heapq.heapify(b.sched.free)
        b.sched.active[0] = rb.Request([0], 1, False)  # hold slot 0 out of admission
        r = rb.Request([5, 6, 7], 10, False)
        b.submit(r)
        del b.sched.active[0]
        while not r.done.is_set():
            b.iterate(model.prefill, model.step)
        self.assertNotEqual(r.slot, 0)
        np.testing.assert_array_equal(kv[0, :3 * rp.BLOCK], before[:3 * rp.BLOCK])

    def test_a_slot_reused_for_another_prompt_is_unpublished_before_it_is_written(self):
        buf = np.zeros(rp.index_bytes(1, POSITIONS), dtype=np.uint8)
        idx = rp.PrefixIndex(buf, IDENTITY, 1, POSITIONS, VOCAB)
        idx.recover(0, False, lambda wanted: {})
        a = list(range(40))
        slot, cached = idx.match(a, [0])
        self.assertEqual((slot, cached), (0, 0))
        idx.begin(0, 0)
        self.assertEqual(idx.publish(0, a, 2, [11, 22]), 2)
        self.assertEqual(idx.match(a + [1], [0]), (0, 32))
        # Another prompt sharing one block: the second is unpublished at begin, before any write.
        b = a[:16] + [49] * 30
        self.assertEqual(idx.match(b, [0]), (0, 16))
        idx.begin(0, 16)
        self.assertEqual(idx.valid[0], 1)
        self.assertEqual(int(idx.u64[idx._rec(0)]), 1)  # the commit word in memory, not only the mirror
        self.assertEqual(idx.match(a + [1], [0]), (0, 16))
        # A publish of tokens that are not the slot's prefix is refused.
        self.assertEqual(idx.publish(0, [3] * 48, 3, [1, 2]), 0)


class PrefillUnlikeDecode(StandIn):
    """A model whose prefill computes the K/V in other arithmetic than a decode step does, as a GPU's prefill
    (one matrix product over many tokens) differs in the last bits from its decode steps (one token each)."""

    def prefill(self, ids, slot, start=0):
        kv = self.kv
        prev = kv[slot, start - 1] if start else 7
        for p in range(start, len(ids)):
            self._check(slot, p)
            prev = kv[slot, p] = (kv_step(int(prev), ids[p]) * 3 + 1) % P
        self.writes.append((slot, start, len(ids)))
        return self._out(int(kv[slot, len(ids) - 1]))


class ContinuedStreams(unittest.TestCase):
    """A stream continued after a kill (the front's Fastrestart-Generated-Tokens; docs/refengine.md,
    "Continued streams"): the generated ids fed again by decode steps answer as the uninterrupted run."""

    def continued(self, with_index, replay):
        rng = random.Random(11)
        kv = np.zeros((SLOTS, POSITIONS), dtype=np.int64)
        if with_index:
            buf = np.zeros(rp.index_bytes(SLOTS, POSITIONS), dtype=np.uint8)
            b, _, idx, _ = engine(buf, kv, 0)
            model = PrefillUnlikeDecode(kv, idx)
        else:
            b, model = rb.Batcher(SLOTS, [1, 2, 4]), PrefillUnlikeDecode(kv)
        out = []
        for n_prompt, n_tokens, k in ((5, 30, 3), (20, 40, 17), (33, 50, 31), (16, 45, 16), (3, 60, 45)):
            prompt = [rng.randrange(VOCAB) for _ in range(n_prompt)]
            [(want, want_lps)] = serve(b, model, [(prompt, n_tokens)])
            # the same request again after a kill: the prompt plus the k tokens the client already has
            r = rb.Request(prompt + want[:k], n_tokens - k, True, replay=k if replay else 0)
            b.submit(r)
            while not r.done.is_set():
                b.iterate(model.prefill, model.step)
            out.append((r.tokens == want[k:], r.logprobs == want_lps[k:]))
        return out

    def test_replayed_tokens_answer_as_the_uninterrupted_stream(self):
        self.assertEqual(self.continued(True, True), [(True, True)] * 5)
        # Without the cache only the ids within the last block are fed again (the rest is prefilled, as no
        # engine could do otherwise without the first one's K/V): exact where all k fit in it.
        self.assertEqual([self.continued(False, True)[i] for i in (0, 3)], [(True, True)] * 2)

    def test_without_the_cache_a_replay_feeds_at_most_the_last_block(self):
        kv = np.zeros((SLOTS, POSITIONS), dtype=np.int64)
        b, model = rb.Batcher(SLOTS, [1, 2, 4]), StandIn(kv)
        for n_prompt, k in ((3, 45), (20, 12), (5, 3), (10, 70)):
            prompt = list(range(1, n_prompt + 1))
            r = rb.Request(prompt + [7] * k, 4, False, replay=k)
            steps = b.stats["steps"]
            b.submit(r)
            while not r.done.is_set():
                b.iterate(model.prefill, model.step)
            fed = b.stats["steps"] - steps - (4 - 1)  # decode steps that fed a replayed id
            n = n_prompt + k
            self.assertEqual(fed, min(k, n - (n - 1) // rp.BLOCK * rp.BLOCK), (n_prompt, k))
            self.assertLessEqual(fed, rp.BLOCK)

    def test_a_stream_continued_after_a_kill_feeds_only_its_last_id(self):
        # The killed engine published its stream's partial last block (its tail) at every step: the
        # continuation takes every position it wrote from the cache and feeds the last id alone, and
        # answers as the uninterrupted stream although this model's prefill differs from its decode.
        for n_prompt, k in ((5, 3), (20, 9), (33, 31), (16, 16), (3, 45), (40, 1), (2, 14)):
            with self.subTest(n_prompt=n_prompt, k=k):
                rng = random.Random(n_prompt * 100 + k)
                prompt = [rng.randrange(VOCAB) for _ in range(n_prompt)]
                n_tokens = k + 20
                ref = np.zeros((SLOTS, POSITIONS), dtype=np.int64)
                [(want, want_lps)] = serve(rb.Batcher(SLOTS, [1, 2, 4]), PrefillUnlikeDecode(ref), [(prompt, n_tokens)])
                buf = np.zeros(rp.index_bytes(SLOTS, POSITIONS), dtype=np.uint8)
                kv = np.zeros((SLOTS, POSITIONS), dtype=np.int64)
                b, _, idx, _ = engine(buf, kv, 1, kv_created=True)
                model = PrefillUnlikeDecode(kv, idx)
                first = rb.Request(prompt, n_tokens, True)
                first.stream = True
                b.submit(first)
                while len(first.tokens) < k:  # the kill: this engine stops here, mid-stream
                    b.iterate(model.prefill, model.step)
                self.assertEqual(first.tokens[:k], want[:k])  # it may be a step ahead of its client
                b2, _, idx2, rec = engine(buf, kv, 2)
                self.assertEqual(rec["dropped"], {})
                model2 = PrefillUnlikeDecode(kv, idx2)
                cont = rb.Request(prompt + want[:k], n_tokens - k, True, replay=k)
                cont.stream = True
                steps = b2.stats["steps"]
                b2.submit(cont)
                while not cont.done.is_set():
                    b2.iterate(model2.prefill, model2.step)
                self.assertEqual(cont.slot, first.slot)
                self.assertEqual(cont.cached, n_prompt + k - 1)  # every position but the last id's
                self.assertEqual(b2.stats["steps"] - steps, n_tokens - k)  # one step a token: none replayed
                self.assertEqual((cont.tokens, cont.logprobs), (want[k:], want_lps[k:]))

    def test_a_tail_is_kept_only_if_its_positions_checksum_alike(self):
        buf = np.zeros(rp.index_bytes(SLOTS, POSITIONS), dtype=np.uint8)
        kv = np.zeros((SLOTS, POSITIONS), dtype=np.int64)
        b, model, idx, _ = engine(buf, kv, 1, kv_created=True)
        r = rb.Request([4, 5, 6], 30, False)
        r.stream = True
        b.submit(r)
        while len(r.tokens) < 24:  # positions [0, 26): one block and a tail of 10
            b.iterate(model.prefill, model.step)
        s = r.slot
        self.assertEqual((idx.valid[s], idx.tail[s]), (1, 10))
        saved, kv_saved = buf.copy(), kv.copy()
        _, _, idx2, rec = engine(buf, kv, 2)
        self.assertEqual((rec["tails"], idx2.tail[s], rec["dropped"]), (1, 10, {}))
        cases = [("a K/V value changed", lambda: kv.__setitem__((s, rp.BLOCK + 4), kv[s, rp.BLOCK + 4] + 1)),
                 ("the commit word without its checksum (a kill between the two stores)",
                  lambda: idx.u64.__setitem__(idx._rec(s) + 3, 12345)),
                 ("an id out of the vocabulary", lambda: idx._tokens(s).__setitem__(rp.BLOCK + 2, VOCAB + 1)),
                 ("a tail as long as a block", lambda: idx.u64.__setitem__(idx._rec(s) + 2, rp.BLOCK)),
                 ("a block before it dropped", lambda: kv.__setitem__((s, 3), kv[s, 3] + 1))]
        for what, damage in cases:
            with self.subTest(what):
                buf[:], kv[:] = saved, kv_saved
                damage()
                _, _, idx2, rec = engine(buf, kv, 2)
                self.assertEqual((rec["tails"], idx2.tail[s]), (0, 0))
                self.assertEqual(int(idx2.u64[idx2._rec(s) + 2]), 0)  # unpublished in the memory too
                want = {"checksum": 1} if what == "a block before it dropped" else {"tail": 1}
                self.assertEqual(rec["dropped"], want)
        # without a device that checksums positions, or one that fails to, no tail is trusted
        for tail_sums in (None, Broken(kv).position_sums):
            buf[:], kv[:] = saved, kv_saved
            idx3 = rp.PrefixIndex(buf, IDENTITY, SLOTS, POSITIONS, VOCAB)
            rec = idx3.recover(2, False, Device(kv).checksums_of, tail_sums)
            self.assertEqual((rec["recovered"], rec["tails"], rec["dropped"]), (1, 0, {"tail": 1}))

    def test_a_device_failing_a_tail_checksum_turns_tails_off_not_the_step(self):
        buf = np.zeros(rp.index_bytes(SLOTS, POSITIONS), dtype=np.uint8)
        kv = np.zeros((SLOTS, POSITIONS), dtype=np.int64)
        idx = rp.PrefixIndex(buf, IDENTITY, SLOTS, POSITIONS, VOCAB)
        idx.recover(1, True, Device(kv).checksums_of)
        said = []
        b = rb.Batcher(SLOTS, [1, 2, 4], pad_pos=POSITIONS - 1,
                       prefix=rp.PrefixCache(idx, Broken(kv), log=said.append))
        model = StandIn(kv, idx)
        [(toks, _)] = serve(b, model, [([1, 2, 3], 40)], streams=True)
        ref = np.zeros((SLOTS, POSITIONS), dtype=np.int64)
        self.assertEqual(toks, serve(rb.Batcher(SLOTS, [1, 2, 4]), StandIn(ref), [([1, 2, 3], 40)])[0][0])
        self.assertEqual(len(said), 1, said)  # said once, then off
        self.assertIn("stream tails off", said[0])
        self.assertIn("tails_off", idx.stats)
        self.assertEqual(idx.tail, [0] * SLOTS)
        self.assertEqual(idx.valid[0], 2)  # whole blocks are still published

    def test_without_replay_a_prefill_unlike_decode_answers_otherwise(self):
        # What the replay is for: the same continuation prefilled gives other tokens with this model.
        self.assertNotEqual(self.continued(False, False), [(True, True)] * 5)

    def test_a_replay_runs_in_the_slot_its_stream_ran_in(self):
        # Three slots answer the same short prompt alike (it has no full block: each takes a slot of its
        # own), so each holds the same first block; a continuation must go back to the last one's slot,
        # the killed stream's (the graph a decode step runs is sized by the slot), not to the lowest.
        buf = np.zeros(rp.index_bytes(SLOTS, POSITIONS), dtype=np.uint8)
        kv = np.zeros((SLOTS, POSITIONS), dtype=np.int64)
        b, model, idx, _ = engine(buf, kv, 0)
        prompt = [3, 1, 4, 1, 5]
        slots, want = [], None
        for _ in range(3):
            r = rb.Request(prompt, 30, False)
            b.submit(r)
            while not r.done.is_set():
                b.iterate(model.prefill, model.step)
            slots.append(r.slot)
            want = r.tokens
        self.assertEqual(len(set(slots)), 3, slots)
        for slot in slots:
            self.assertGreaterEqual(idx.valid[slot], 1)
        # the next engine: the index recovered as the kill left it
        b2, model2, idx2, _ = engine(buf, kv, 1)
        cont = rb.Request(prompt + want[:14], 16, False, replay=14)
        b2.submit(cont)
        while not cont.done.is_set():
            b2.iterate(model2.prefill, model2.step)
        self.assertEqual(cont.slot, slots[-1])
        self.assertEqual(cont.tokens, want[14:])
        # a request that is no continuation takes the lowest slot holding the prefix
        again = rb.Request(prompt + want[:14], 4, False)
        b2.submit(again)
        while not again.done.is_set():
            b2.iterate(model2.prefill, model2.step)
        self.assertEqual(again.slot, min(slots))

    def test_a_replay_of_the_whole_prompt_or_more_is_refused(self):
        with self.assertRaisesRegex(ValueError, "replay: 3 generated tokens of a 3-token prompt"):
            rb.Request([1, 2, 3], 4, False, replay=3)
        with self.assertRaises(ValueError):
            rb.Request([1, 2, 3], 4, False, replay=-1)

    def test_blocks_filled_by_decode_steps_are_published_before_the_request_ends(self):
        buf = np.zeros(rp.index_bytes(SLOTS, POSITIONS), dtype=np.uint8)
        kv = np.zeros((SLOTS, POSITIONS), dtype=np.int64)
        b, model, idx, _ = engine(buf, kv, 0)
        r = rb.Request([1, 2, 3, 4, 5], 60, False)
        b.submit(r)
        seen = []
        while not r.done.is_set():
            b.iterate(model.prefill, model.step)
            if not r.done.is_set():
                seen.append((r.pos, idx.valid[r.slot]))
        # once positions [0, 16 j) hold K/V, j blocks are published, while the request still decodes
        for pos, valid in seen:
            self.assertEqual(valid, min(pos // rp.BLOCK, idx.max_blocks), (pos, valid))
        self.assertGreaterEqual(max(v for _, v in seen), 3)
        # and each published block holds its tokens' K/V
        seq = r.ids + r.tokens
        for j in range(idx.valid[r.slot]):
            np.testing.assert_array_equal(kv[r.slot, j * rp.BLOCK:(j + 1) * rp.BLOCK],
                                          expected_kv(seq[:(j + 1) * rp.BLOCK])[j * rp.BLOCK:])


class Recovery(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.buf, self.kv = shared_buffers(os.path.join(self.dir.name, "arena"))
        b, model, idx, _ = engine(self.buf, self.kv, 1, kv_created=True)
        serve(b, model, [(p, 3) for p in prompts(random.Random(1), 8)])
        self.published = idx.cached_blocks()
        self.assertGreater(self.published, 0)

    def recover(self, **kw):
        args = dict(kv_generation=2, kv_created=False, identity=IDENTITY)
        args.update(kw)
        return engine(self.buf, self.kv, args["kv_generation"], args["kv_created"], args["identity"])

    def test_the_next_holder_keeps_every_block(self):
        b, model, idx, rec = self.recover()
        self.assertEqual(rec, {"header": "valid", "recovered": self.published, "tails": 0, "dropped": {}})
        for s in range(SLOTS):
            n = idx.valid[s] * rp.BLOCK
            np.testing.assert_array_equal(self.kv[s, :n], expected_kv(idx._tokens(s)[:n]))
        # And it serves from them.
        serve(b, model, [(p, 2) for p in prompts(random.Random(1), 4)])
        self.assertGreater(idx.stats["hit_tokens"], 0)

    def test_a_resume_recovers_the_same_index_again(self):
        """A snapshot's resume leases both arenas again and recovers the index in the same object: the
        lookups are rebuilt from the memory, not kept from before."""
        b, model, idx, rec = self.recover()
        idx.by_hash[(0, 12345)] = {0}  # a stale lookup the rebuild must not keep
        dev = Device(self.kv)
        again = idx.recover(3, False, dev.checksums_of)
        self.assertEqual((again["header"], again["recovered"]), ("valid", self.published))
        self.assertEqual(dev.recoveries, 1)  # every slot's blocks checksummed in one device call
        self.assertNotIn((0, 12345), idx.by_hash)
        self.assertEqual(sum(len(v) for v in idx.by_hash.values()), self.published)

    def test_a_mismatch_of_the_whole_index_drops_it_all(self):
        cases = [("identity", dict(identity=rp.identity_digest({"other": 1}))),
                 ("generation", dict(kv_generation=3)),  # another holder leased the KV arena in between
                 ("generation", dict(kv_generation=1)),
                 ("kv_arena_new", dict(kv_created=True))]
        for why, kw in cases:
            with self.subTest(why=why, **{k: str(v)[:16] for k, v in kw.items()}):
                saved_idx, saved_kv = self.buf.copy(), self.kv.copy()
                _, _, idx, rec = self.recover(**kw)
                self.assertEqual(rec["header"], why)
                self.assertEqual(rec["dropped"], {why: self.published})
                self.assertEqual(rec["recovered"], 0)
                self.assertEqual(idx.cached_blocks(), 0)
                # Zeroed: going back to the right identity finds nothing either.
                _, _, _, again = engine(self.buf, self.kv, 4 if why != "generation" else 2)
                self.assertEqual(again["recovered"], 0)
                self.buf[:] = saved_idx
                self.kv[:] = saved_kv

    def test_a_damaged_header_or_entry_is_dropped_with_its_reason(self):
        saved = self.buf.copy()
        self.buf[20] ^= 1  # inside the identity: the header checksum no longer matches
        _, _, _, rec = self.recover()
        self.assertEqual((rec["header"], rec["dropped"]), ("header_checksum", {"header_checksum": self.published}))
        self.buf[:] = saved
        self.buf[:8] = np.frombuffer(b"SOMEONE!", dtype=np.uint8)
        _, _, _, rec = self.recover()
        self.assertEqual((rec["header"], rec["recovered"]), ("foreign", 0))
        self.buf[:] = saved

        idx = rp.PrefixIndex(self.buf, IDENTITY, SLOTS, POSITIONS, VOCAB)
        full = [s for s in range(SLOTS) if int(idx.u64[idx._rec(s)]) >= 2]
        self.assertGreaterEqual(len(full), 1)
        s = full[0]
        n = int(idx.u64[idx._rec(s)])
        # A token changed in block 1: its hash fails; blocks 1.. of that slot go.
        idx._tokens(s)[rp.BLOCK + 3] = (int(idx._tokens(s)[rp.BLOCK + 3]) + 1) % VOCAB
        _, _, idx2, rec = self.recover()
        self.assertEqual(rec["dropped"], {"hash": n - 1})
        self.assertEqual(idx2.valid[s], 1)
        self.buf[:] = saved
        # A K/V value changed in block 1 (the device's memory): its checksum fails.
        kv_saved = self.kv.copy()
        self.kv[s, rp.BLOCK + 5] += 1
        _, _, idx2, rec = self.recover()
        self.assertEqual(rec["dropped"], {"checksum": n - 1})
        self.assertEqual(idx2.valid[s], 1)
        self.buf[:] = saved
        self.kv[:] = kv_saved
        # A commit word past the slot's blocks: the slot goes.
        idx.u64[idx._rec(s)] = rp.max_blocks(POSITIONS) + 1
        _, _, idx2, rec = self.recover()
        self.assertEqual(rec["dropped"], {"torn": 1})
        self.assertEqual(idx2.valid[s], 0)


def load_kv_stats():
    """python/fastrestart/kv_stats.py by its path: pure Python, no compiled binding needed."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("fr_kv_stats", os.path.join(HERE, "..", "fastrestart", "kv_stats.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


class KvStatsText(unittest.TestCase):
    """fastrestart.kv_stats: the text fastrestartd parses (supervisor/kv_stats.h; its C++ twin's round trip
    is the KvStats.* gtest), and the counters file replaced whole."""

    def test_the_line_and_the_file(self):
        ks = load_kv_stats()
        s = ks.KvStats(location="arena", header="valid", blocks=64, block_tokens=16, recovered=58,
                       dropped={"orphan": 3, "checksum": 1, "not a word": 9}, requests=5, query_tokens=1000,
                       hit_tokens=896)
        self.assertEqual(ks.kv_stats_text(s, "ab12"),
                         "fastrestart-kv: id=ab12 location=arena header=valid blocks=64 block_tokens=16 recovered=58 "
                         "dropped.checksum=1 dropped.orphan=3 requests=5 query_tokens=1000 hit_tokens=896")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "kv-stats")
            r = ks.KvStatsReporter(path)
            self.assertRegex(r.id, r"^[0-9a-f]{16}$")
            self.assertNotEqual(r.id, ks.KvStatsReporter(path).id)
            r.write(s)
            with open(path) as f:
                self.assertEqual(f.read(), r.line(s) + "\n")
            self.assertEqual(os.listdir(d), ["kv-stats"])  # no temporary file left
            os.environ.pop(ks.ENV, None)
            ks.KvStatsReporter().write(s)  # no path: nothing, no error
            self.assertRaises(OSError, ks.KvStatsReporter(os.path.join(d, "missing", "kv-stats")).write, s)

    def test_refengine_report_prints_the_line_and_rewrites_the_file(self):
        import contextlib
        import io
        import types
        ks = load_kv_stats()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "kv-stats")
            pkg = types.ModuleType("fastrestart")
            pkg.kv_stats = ks
            saved = {k: sys.modules.get(k) for k in ("fastrestart", "fastrestart.kv_stats")}
            sys.modules["fastrestart"], sys.modules["fastrestart.kv_stats"] = pkg, ks
            os.environ[ks.ENV] = path
            try:
                buf = np.zeros(rp.index_bytes(SLOTS, POSITIONS), dtype=np.uint8)
                idx = rp.PrefixIndex(buf, IDENTITY, SLOTS, POSITIONS, VOCAB)
                idx.recover(0, False, lambda wanted: {})
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    rep = rp.KvReport(idx, "private", lambda m: None)
                self.assertRegex(out.getvalue(), r"^fastrestart-kv: id=[0-9a-f]{16} location=private header=empty "
                                 r"blocks=30 block_tokens=16 recovered=0 requests=0 query_tokens=0 hit_tokens=0\n$")
                idx.match(list(range(40)), [0, 1])
                rep.changed()
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    with open(path) as f:
                        if "query_tokens=40 " in f.read():
                            break
                    time.sleep(0.05)
                with open(path) as f:
                    self.assertIn("requests=1 query_tokens=40 hit_tokens=0", f.read())
            finally:
                os.environ.pop(ks.ENV, None)
                for k, v in saved.items():
                    if v is None:
                        sys.modules.pop(k, None)
                    else:
                        sys.modules[k] = v


CHILD = r"""
import os, random, sys
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])
import test_refengine_prefix as t
buf, kv = t.shared_buffers(sys.argv[3])
b, model, idx, rec = t.engine(buf, kv, int(sys.argv[4]), sys.argv[5] == "1")
print(rec, flush=True)
rng = random.Random(int(sys.argv[6]))
while True:
    t.serve(b, model, [(p, 1 + rng.randrange(8)) for p in t.prompts(rng, 1 + rng.randrange(4))],
            streams=rng.random() < 0.5)
"""


class KillNine(unittest.TestCase):
    def test_every_block_recovered_after_a_kill_at_a_random_instant_holds_its_tokens_kv(self):
        with tempfile.TemporaryDirectory() as d:
            arena = os.path.join(d, "arena")
            rng = random.Random(20261205)
            kills = int(os.environ.get("FR_REFENGINE_PREFIX_KILLS", "12"))
            most = tails = 0
            for gen in range(1, kills + 1):
                p = subprocess.Popen([sys.executable, "-c", CHILD, HERE, os.path.join(HERE, "..", "refengine"), arena,
                                      str(gen), "1" if gen == 1 else "0", str(rng.randrange(1 << 30))],
                                     stdout=subprocess.PIPE, text=True)
                line = p.stdout.readline()
                self.assertIn("header", line)
                if gen > 1:
                    self.assertIn("'header': 'valid'", line)
                    for why in ("torn", "hash", "checksum"):
                        self.assertNotIn(f"'{why}'", line, f"after kill {gen - 1}")
                time.sleep(rng.uniform(0.005, 0.15))
                p.send_signal(signal.SIGKILL)
                p.wait()
                p.stdout.close()
                buf, kv = shared_buffers(arena)
                idx = rp.PrefixIndex(buf, IDENTITY, SLOTS, POSITIONS, VOCAB)
                # What the killed holder left, checked without recovering (the next child does that).
                for s in range(SLOTS):
                    n = int(idx.u64[idx._rec(s)]) * rp.BLOCK
                    n += int(idx.u64[idx._rec(s) + 2])  # and the tail (positions of the next block)
                    np.testing.assert_array_equal(kv[s, :n], expected_kv(idx._tokens(s)[:n]),
                                                  f"slot {s} after kill {gen}")
                    most = max(most, n)
                    tails += n % rp.BLOCK > 0
            self.assertGreater(most, 0, "no kill left a published block")
            self.assertGreater(tails, 0, "no kill left a tail")


ARENA_CHILD = r"""
import os, sys
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])
import numpy as np
import fastrestart
import test_refengine_prefix as t
import refengine_prefix as rp
# As fastrestart_refengine._prefix_cache leases and views it.
a = fastrestart.lease_arena("kv-index", rp.index_bytes(t.SLOTS, t.POSITIONS), wait_s=30, device="host",
                            socket_dir=sys.argv[3], connect_timeout_s=5.0)
buf = a.view(0, (a.bytes,), "uint8").numpy()
kv = t.shared_buffers(sys.argv[4])[1]
b, model, idx, rec = t.engine(buf, kv, int(sys.argv[5]), sys.argv[5] == "1")
t.serve(b, model, [(p, 3) for p in t.prompts(__import__("random").Random(3), 10)])
print(rec["header"], rec["recovered"], idx.cached_blocks(), a.lease["generation"], flush=True)
sys.stdin.read()  # held until killed
"""


class InTheHostDaemonsArena(unittest.TestCase):
    """The index in a real fastrestart-weightd's host arena, leased and viewed as the engine does: a
    holder killed with SIGKILL, and the next process's lease (granted after the exit) recovers every block."""

    def test_the_next_lease_recovers_what_a_killed_holder_published(self):
        try:
            import fastrestart  # noqa: F401
            from weightd_support import Weightd
        except ImportError as e:
            self.skipTest(f"the fastrestart binding is not importable ({e})")
        weightd = os.environ.get("FR_WEIGHTD_BIN")
        if not weightd or not os.access(weightd, os.X_OK):
            self.skipTest("FR_WEIGHTD_BIN is not set to fastrestart-weightd")
        with tempfile.TemporaryDirectory() as d:
            run = os.path.join(d, "run")
            os.mkdir(run, 0o700)
            daemon = Weightd(weightd, run, os.path.join(d, "weightd.log")).start(self)
            try:
                seen = []
                for gen in (1, 2):
                    p = subprocess.Popen([sys.executable, "-c", ARENA_CHILD, HERE, os.path.join(HERE, "..", "refengine"),
                                          run, os.path.join(d, "kv"), str(gen)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                    line = p.stdout.readline().split()
                    p.send_signal(signal.SIGKILL)
                    p.wait()
                    p.stdin.close()
                    p.stdout.close()
                    self.assertEqual(len(line), 4, f"the child said {line!r}; daemon: {daemon.log()}")
                    seen.append(line)
                self.assertEqual(seen[0][:2], ["empty", "0"])
                published = int(seen[0][2])
                self.assertGreater(published, 0)
                self.assertEqual(seen[1][0], "valid")
                self.assertEqual(int(seen[1][1]), published)
                self.assertEqual((seen[0][3], seen[1][3]), ("1", "2"))  # the index arena's own leases
            finally:
                daemon.stop()


if __name__ == "__main__":
    unittest.main()

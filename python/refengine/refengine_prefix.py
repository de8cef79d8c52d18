"""The batched reference engine's prefix reuse, and its index that survives a kill (docs/refengine.md,
"Prefix reuse across a kill"). Pure Python and numpy: no torch (python/tests/test_refengine_prefix.py runs
it on CI against a real host arena of the weight daemon); the GPU side (the block checksums, the CUDA event
a publish waits for) is given by refengine_runner.py as callbacks.

The KV cache is static slots x positions (refengine_runner.py). A slot that a finished request left keeps
its K/V; its first `valid` blocks of BLOCK positions are indexed by a hash chain (block j's hash is
blake2b-8 over (the identity, block j-1's hash, its BLOCK token ids)) and their token ids. A request whose
prompt starts with the blocks a free slot holds is admitted into that slot and computes only the positions
after them (at least its last prompt token: its logits give the first answer token).

The index lives in a host arena of the weight daemon (`<kv arena>-index`), beside the KV arena that holds
the K/V on the GPU, so that the next engine after a kill -9 finds it:

    offset 0     header (HEADER_BYTES): magic, version, identity (32 bytes), slots, positions, block,
                 the KV arena's lease generation of the writer, a checksum (blake2b-8) over the fields
    offset 4096  one record per slot (slot_bytes each, 8-aligned):
                   valid (u64)     blocks [0, valid) are published: the commit word
                   last_used (u64) the LRU stamp (outside any check: only eviction order)
                   tail (u64)      positions [0, tail) of block `valid` are published too: the tail's
                                   commit word (0 < tail < BLOCK, or 0: no tail)
                   tail sum (u64)  the data checksum of those positions
                   per block j < max_blocks: hash (u64), data checksum (u64)
                   token ids (int32), max_blocks x BLOCK (a tail's ids in block `valid`'s place)

All integers little-endian. max_blocks = positions // BLOCK - 1: the slot's last block is never indexed,
because its last position is the scratch position that padding rows of a decode step, the warm-up and the
graph capture write (refengine_batch.Batcher's pad_pos).

Invariants (a kill at any instant leaves only what they allow):
1. A block is written (on the GPU) only while it is not published: before a request's forward writes
   positions >= p of a slot, `valid` is lowered to p // BLOCK (one aligned 8-byte store), and a tail
   reaching p or past it is unpublished (tail = 0), as is any tail whose block `valid` changes.
2. A block is published only after the writes that filled it completed on the device: its tokens, hash and
   data checksum are stored, then `valid` is raised; the caller runs the publish after a CUDA event recorded
   after those writes has completed (refengine_runner). A tail likewise: its ids and checksum first, then
   `tail`; a kill between the two leaves the old `tail` with a checksum that no longer matches it, which
   recovery drops.
3. Recovery trusts nothing: the header must match this engine (identity: the model's config, the files'
   identity, dtype, the KV layout, the block size) and the KV arena must not be new and must have been
   leased last by the index's writer (its lease generation is this lease's minus one); each slot's chain
   is recomputed from its tokens and each block's K/V checksummed on the device again; a slot keeps its
   blocks up to the first that fails, and its tail only if every block before it was kept and the tail's
   positions checksum alike.

Tails exist for streams (refengine_batch.Request.stream): a stream the front continues after a kill finds
every position the killed engine wrote, its partial last block included, so it recomputes one position
instead of up to BLOCK - 1 (docs/refengine.md, "Continued streams"). A tail grows by one position a decode
step; its checksum grows by that position's share (the checksum is a sum over positions), so a step reads
one position of K/V per stream, not a block.
"""
import hashlib
import struct

import numpy as np

BLOCK = 16
MAGIC = b"FRRKVIX1"
VERSION = 2  # 2: the tails
HEADER_BYTES = 4096
MASK = (1 << 64) - 1
_HEADER = struct.Struct("<8sQ32sQQQQ")  # magic, version, identity, slots, positions, block, kv_generation
_CHECKSUM_AT = _HEADER.size  # u64 after the fields


def _h8(*parts):
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(p)
    return int.from_bytes(h.digest(), "little")


def identity_digest(fields):
    """32 bytes naming what makes a block's K/V valid: `fields` is a dict (the model config, the files'
    identity, dtype, the KV layout, the block size); key order does not matter."""
    import json
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).digest()


def max_blocks(positions):
    return max(0, positions // BLOCK - 1)


def slot_bytes(positions):
    m = max_blocks(positions)
    n = 32 + 16 * m + 4 * m * BLOCK
    return (n + 7) // 8 * 8


def index_bytes(slots, positions):
    """The host arena's size for `slots` x `positions`."""
    return HEADER_BYTES + slots * slot_bytes(positions)


def block_hashes(identity, tokens, n_blocks):
    """The chain of the first n_blocks full blocks of `tokens`."""
    out, parent = [], 0
    seed = identity[:16]
    for j in range(n_blocks):
        blk = np.asarray(tokens[j * BLOCK:(j + 1) * BLOCK], dtype="<i4").tobytes()
        parent = _h8(seed, parent.to_bytes(8, "little"), blk)
        out.append(parent)
    return out


class PrefixIndex:
    """The index over `buf` (a writable numpy uint8 array: a host arena's view, or private memory) for a KV
    cache of `slots` x `positions`. Not thread-safe: the engine's one step thread calls it."""

    def __init__(self, buf, identity, slots, positions, vocab):
        if len(identity) != 32:
            raise ValueError("identity: expected 32 bytes")
        need = index_bytes(slots, positions)
        if buf.nbytes < need:
            raise ValueError(f"the index needs {need} bytes, its memory has {buf.nbytes}")
        self.buf, self.identity = buf, bytes(identity)
        self.slots, self.positions, self.vocab = slots, positions, vocab
        self.max_blocks = max_blocks(positions)
        self.sb = slot_bytes(positions)
        self.u64 = buf[:need].view("<u8")
        self.valid = [0] * slots          # mirrors of the records, for lookups without reading the arena
        self.tail = [0] * slots
        self.tail_sum = [0] * slots
        self.hashes = [[] for _ in range(slots)]
        self.by_hash = {}                 # (depth, hash) -> set of slots holding it
        self.clock = 0
        self.stats = {"requests": 0, "query_tokens": 0, "hit_tokens": 0, "published_blocks": 0,
                      "evicted_blocks": 0, "tail_hit_tokens": 0}
        self.recovery = {"header": "empty", "recovered": 0, "dropped": {}}

    # --- the records ---------------------------------------------------------------------------------
    def _rec(self, s):
        return (HEADER_BYTES + s * self.sb) // 8  # u64 index of slot s's record

    def _tokens(self, s):
        at = HEADER_BYTES + s * self.sb + 32 + 16 * self.max_blocks
        return self.buf[at:at + 4 * self.max_blocks * BLOCK].view("<i4")

    def _set_valid(self, s, n):
        """The commit word (one aligned 8-byte store), and the lookup mirror; a tail goes first (invariant 1:
        it belongs to block `valid`)."""
        self._drop_tail(s)
        old = self.valid[s]
        for j in range(n, old):
            self._unmap(s, j)
        del self.hashes[s][n:]
        self.u64[self._rec(s)] = n
        self.valid[s] = n

    def _drop_tail(self, s):
        if self.tail[s] or self.u64[self._rec(s) + 2]:
            self.u64[self._rec(s) + 2] = 0
        self.tail[s] = self.tail_sum[s] = 0

    def _unmap(self, s, j):
        key = (j, self.hashes[s][j])
        owners = self.by_hash.get(key)
        if owners is not None:
            owners.discard(s)
            if not owners:
                del self.by_hash[key]

    def _map(self, s, j, h):
        self.by_hash.setdefault((j, h), set()).add(s)

    def _write_header(self, kv_generation):
        fields = _HEADER.pack(b"\0" * 8, VERSION, self.identity, self.slots, self.positions, BLOCK, kv_generation)
        self.buf[:8] = 0  # the magic last (invariant: a header is whole or absent)
        self.buf[8:_HEADER.size] = np.frombuffer(fields[8:], dtype=np.uint8)
        self.u64[_CHECKSUM_AT // 8] = _h8(bytes(self.buf[8:_CHECKSUM_AT]))
        self.buf[:8] = np.frombuffer(MAGIC, dtype=np.uint8)

    # --- recovery ------------------------------------------------------------------------------------
    def recover(self, kv_generation, kv_created, checksums, tail_sums=None):
        """Rebuilds the lookups from the memory before anything is served (invariant 3). kv_generation: the
        KV arena's lease generation now (0: the KV cache is not in an arena: nothing can survive);
        kv_created: the KV arena is new (zero-filled). checksums({slot: n, ...}) -> {slot: the data checksums
        of the slot's first n blocks as the device computes them now (a list of n ints)}: one call for every
        slot, so that the device checksums them in a few batched passes instead of one pass per slot (a
        recovery before the engine serves: its time is the restart's). tail_sums([(slot, block, lo, hi), ...])
        -> the data checksums of positions [lo, hi) of those blocks (the device's position_sums); without it
        no tail is kept. Returns self.recovery: {"header", "recovered", "tails", "dropped": {reason:
        blocks}} (a dropped tail counts one, as "tail")."""
        rec = self.recovery = {"header": "empty", "recovered": 0, "tails": 0, "dropped": {}}
        dropped = rec["dropped"]
        self.valid = [0] * self.slots  # nothing from before is trusted (a resume rebuilds it too)
        self.tail = [0] * self.slots
        self.tail_sum = [0] * self.slots
        self.hashes = [[] for _ in range(self.slots)]
        self.by_hash = {}
        head = bytes(self.buf[:_HEADER.size])
        magic, version, ident, slots, positions, block, gen = _HEADER.unpack(head)
        keep = False
        if magic == MAGIC:
            old_valid = self._old_total(slots, positions)
            why = None
            if version != VERSION:
                why = "version"
            elif int(self.u64[_CHECKSUM_AT // 8]) != _h8(bytes(self.buf[8:_CHECKSUM_AT])):
                why = "header_checksum"
            elif ident != self.identity:
                why = "identity"
            elif (slots, positions, block) != (self.slots, self.positions, BLOCK):
                why = "layout"
            elif kv_generation == 0 or kv_created:
                why = "kv_arena_new"
            elif gen + 1 != kv_generation:
                why = "generation"  # another holder had the KV arena since the index's writer
            rec["header"] = why or "valid"
            if why:
                if old_valid:
                    dropped[why] = old_valid
            else:
                keep = True
        elif magic != b"\0" * 8:
            rec["header"] = "foreign"
        if not keep:
            self.buf[:index_bytes(self.slots, self.positions)] = 0
        else:
            hashed = {s: self._recover_hashes(s, dropped) for s in range(self.slots)}
            wanted = {s: len(h) for s, h in hashed.items() if h}
            now = checksums(wanted) if wanted else {}
            whole = [s for s, want in hashed.items() if self._recover_checksums(s, want, now.get(s, []), dropped)]
            self._recover_tails(whole, tail_sums, dropped)
        for s in range(self.slots):
            rec["recovered"] += self.valid[s]
            rec["tails"] += self.tail[s] > 0
            self.clock = max(self.clock, int(self.u64[self._rec(s) + 1]))
        self._write_header(kv_generation)
        return rec

    def _old_total(self, slots, positions):
        """Blocks a header's own layout says are published (what a whole-index drop throws away)."""
        if not (0 < slots <= 1 << 20 and BLOCK <= positions <= 1 << 24):
            return 0
        sb, total = slot_bytes(positions), 0
        for s in range(slots):
            at = HEADER_BYTES + s * sb
            if at + 8 > self.buf.nbytes:
                break
            v = int(self.buf[at:at + 8].view("<u8")[0])
            total += v if v <= max_blocks(positions) else 0
        return total

    def _recover_hashes(self, s, dropped):
        """Slot s's chain recomputed from its tokens: the hashes of its blocks up to the first that fails
        (empty for a slot with nothing published, or one whose record is torn)."""
        r = self._rec(s)
        n = int(self.u64[r])
        self.valid[s], self.hashes[s] = 0, []
        if n == 0:
            return []
        if n > self.max_blocks:
            dropped["torn"] = dropped.get("torn", 0) + 1  # not a count a publish writes: the whole slot
            self.u64[r] = self.u64[r + 2] = 0
            return []
        toks = self._tokens(s)[:n * BLOCK]
        good = n
        if int(toks.min()) < 0 or int(toks.max()) >= self.vocab:
            bad = np.nonzero((toks < 0) | (toks >= self.vocab))[0]
            good = min(good, int(bad[0]) // BLOCK)
        want = block_hashes(self.identity, toks, good)
        for j in range(good):
            if int(self.u64[r + 4 + 2 * j]) != want[j]:
                good = j
                break
        if good < n:
            dropped["hash"] = dropped.get("hash", 0) + n - good
        return want[:good]

    def _recover_checksums(self, s, want, now, dropped):
        """Slot s keeps its blocks up to the first whose data checksum the device computes otherwise now."""
        r = self._rec(s)
        good = len(want)
        for j in range(good):
            if j >= len(now) or int(now[j]) & MASK != int(self.u64[r + 5 + 2 * j]):
                dropped["checksum"] = dropped.get("checksum", 0) + good - j
                good = j
                break
        whole = good == int(self.u64[r])
        if not whole:
            self.u64[r + 2] = 0  # a tail follows its blocks only when all of them were kept
            self.u64[r] = good  # what a hash or checksum dropped is unpublished in the index too
        self.valid[s] = good
        self.hashes[s] = want[:good]
        for j, h in enumerate(self.hashes[s]):
            self._map(s, j, h)
        return whole

    def _recover_tails(self, slots, tail_sums, dropped):
        """The tails of SLOTS (each kept all its blocks): kept where their ids are tokens and their positions
        checksum alike now (one device call for all), else unpublished, counted as "tail"."""
        check = []
        for s in slots:
            r, v = self._rec(s), self.valid[s]
            t = int(self.u64[r + 2])
            if t == 0:
                continue
            toks = self._tokens(s)[v * BLOCK:v * BLOCK + t] if v < self.max_blocks else None
            if (tail_sums is None or t >= BLOCK or toks is None or int(toks.min()) < 0
                    or int(toks.max()) >= self.vocab):
                self.u64[r + 2] = 0
                dropped["tail"] = dropped.get("tail", 0) + 1
                continue
            check.append((s, v, t))
        try:
            sums = tail_sums([(s, v, 0, t) for s, v, t in check]) if check else []
        except Exception:  # noqa: BLE001 -- a device that cannot checksum positions: no tail is trusted
            sums = [None] * len(check)
        for (s, v, t), now in zip(check, sums):
            r = self._rec(s)
            if now is None or int(now) & MASK != int(self.u64[r + 3]):
                self.u64[r + 2] = 0
                dropped["tail"] = dropped.get("tail", 0) + 1
                continue
            self.tail[s], self.tail_sum[s] = t, int(self.u64[r + 3])

    # --- serving ---------------------------------------------------------------------------------------
    def match(self, prompt, free, recent=False):
        """(slot, cached positions) for a prompt among the free slots: the slot holding its longest prefix
        of full blocks (at most (len - 1) // BLOCK blocks: the last prompt token is always computed), its
        tokens compared; with no such slot, the lowest free slot holding nothing, else the least recently
        used free slot (cached 0). Counts the lookup.

        Of several slots holding that prefix, the lowest (a decode step's graph is sized by the highest busy
        slot), or with `recent` the most recently begun: a stream continued after a kill (a replay,
        refengine_batch.Request) then runs in the slot it ran in before, so that its decode steps are the
        same graph, of the same rows, as the first engine's (docs/refengine.md, "Continued streams").
        With `recent` the match also goes past the full blocks, into the slot's next block (its tail, or
        a published block the prompt leaves part way), up to the prompt's last token: the continued stream
        then feeds only its last id again."""
        n = len(prompt)
        m = min((n - 1) // BLOCK if n else 0, self.max_blocks)
        hashes = block_hashes(self.identity, prompt, m)
        free = set(free)
        lo, hi, best = 0, m, None  # binary search: a slot holding block j's hash holds every block before it
        while lo < hi:
            mid = (lo + hi + 1) // 2
            owners = self.by_hash.get((mid - 1, hashes[mid - 1]), set()) & free
            if owners:
                lo, best = mid, (max(owners, key=lambda s: (int(self.u64[self._rec(s) + 1]), -s)) if recent
                                 else min(owners))
            else:
                hi = mid - 1
        self.stats["requests"] += 1
        self.stats["query_tokens"] += n
        if best is not None and lo:
            toks = self._tokens(best)[:lo * BLOCK]
            if np.array_equal(toks, np.asarray(prompt[:lo * BLOCK], dtype="<i4")):
                more = self._past_blocks(best, lo, prompt) if recent else 0
                self.stats["hit_tokens"] += lo * BLOCK + more
                self.stats["tail_hit_tokens"] += more
                return best, lo * BLOCK + more
        elif recent and n > 1 and free:  # no full block in common: a tail, or part of a block 0
            (k, _), s = max(((self._past_blocks(s, 0, prompt), int(self.u64[self._rec(s) + 1])), s) for s in free)
            if k:
                self.stats["hit_tokens"] += k
                self.stats["tail_hit_tokens"] += k
                return s, k
        empty = [s for s in free if self.valid[s] == 0 and self.tail[s] == 0]
        if empty:
            return min(empty), 0
        return min(free, key=lambda s: (int(self.u64[self._rec(s) + 1]), s)), 0

    def _past_blocks(self, s, j, prompt):
        """Positions of slot s's block j (its tail, or a published block) that hold the prompt's ids at
        those positions, up to the prompt's last id (never cached: its logits are the answer's)."""
        have = BLOCK if self.valid[s] > j else (self.tail[s] if self.valid[s] == j else 0)
        have = min(have, len(prompt) - 1 - j * BLOCK)
        if have <= 0:
            return 0
        mine = self._tokens(s)[j * BLOCK:j * BLOCK + have]
        theirs = np.asarray(prompt[j * BLOCK:j * BLOCK + have], dtype="<i4")
        differ = np.nonzero(mine != theirs)[0]
        return int(differ[0]) if len(differ) else have

    def begin(self, slot, cached):
        """Before the forward writes positions >= cached of `slot` (invariant 1)."""
        keep = cached // BLOCK
        if self.tail[slot] and cached < self.valid[slot] * BLOCK + self.tail[slot]:
            self._drop_tail(slot)
        if self.valid[slot] > keep:
            self.stats["evicted_blocks"] += self.valid[slot] - keep
            self._set_valid(slot, keep)
        self.clock += 1
        self.u64[self._rec(slot) + 1] = self.clock

    def publishable(self, slot, n_tokens):
        """Blocks [valid, upto) that positions [0, n_tokens) fill: (first, upto)."""
        return self.valid[slot], min(n_tokens // BLOCK, self.max_blocks)

    def publish(self, slot, tokens, upto, checksums):
        """Publishes blocks [valid, upto) of `slot` holding `tokens` (the slot's tokens from position 0),
        with their data checksums (checksums[j - valid] for block j), once the writes that filled them have
        completed on the device (invariant 2: the caller waited for the CUDA event)."""
        first = self.valid[slot]
        if upto <= first:
            return 0
        toks = np.asarray(tokens[:upto * BLOCK], dtype="<i4")
        if int(toks.min()) < 0 or int(toks.max()) >= self.vocab:
            return 0
        hashes = block_hashes(self.identity, toks, upto)
        if hashes[:first] != self.hashes[slot]:
            return 0  # not the prefix the slot holds: never publish over it
        r = self._rec(slot)
        self._drop_tail(slot)  # invariant 1: the tail is block `valid`'s, which changes
        self._tokens(slot)[first * BLOCK:upto * BLOCK] = toks[first * BLOCK:]
        for j in range(first, upto):
            self.u64[r + 4 + 2 * j] = hashes[j]
            self.u64[r + 5 + 2 * j] = int(checksums[j - first]) & MASK
        self.u64[r] = upto  # the commit
        self.valid[slot] = upto
        self.hashes[slot] = hashes
        for j in range(first, upto):
            self._map(slot, j, hashes[j])
        self.stats["published_blocks"] += upto - first
        return upto - first

    def tail_step(self, slot, n_written):
        """What a tail publish of a slot whose positions [0, n_written) hold K/V needs: None when there is
        nothing to publish (a whole block, or blocks before it not published: written() first), else
        (block, lo): the checksum of positions [lo, n_written % BLOCK) of that block is to be added to the
        tail's (lo = the tail now: one position after a decode step; 0 after a tail was dropped)."""
        j, t = divmod(n_written, BLOCK)
        if t == 0 or j != self.valid[slot] or j >= self.max_blocks:
            return None
        lo = self.tail[slot] if self.tail[slot] < t else 0
        return j, lo

    def publish_tail(self, slot, ids, n_written, lo, part_sum):
        """Publishes the tail of `slot` as positions [0, n_written % BLOCK) of block `valid`: ids are the
        slot's ids at positions [valid * BLOCK + lo, n_written), part_sum the checksum of those positions
        (tail_step's lo), added to the tail's checksum so far. After the CUDA event (invariant 2)."""
        j, t = divmod(n_written, BLOCK)
        if j != self.valid[slot] or not 0 <= lo < t or len(ids) != t - lo:
            return False
        toks = np.asarray(ids, dtype="<i4")
        if int(toks.min()) < 0 or int(toks.max()) >= self.vocab:
            return False
        base = self.tail_sum[slot] if lo else 0
        if lo and lo != self.tail[slot]:
            return False
        r = self._rec(slot)
        self._tokens(slot)[j * BLOCK + lo:j * BLOCK + t] = toks
        total = (base + int(part_sum)) & MASK
        self.u64[r + 3] = total
        self.u64[r + 2] = t  # the tail's commit
        self.tail[slot], self.tail_sum[slot] = t, total
        return True

    def cached_blocks(self):
        return sum(self.valid)


class PrefixCache:
    """The Batcher's hooks (refengine_batch.Batcher's `prefix`) over a PrefixIndex and the device:
    device.record() -> an event recorded on the stream after the writes issued so far; device.wait(event)
    returns once it completed; device.checksums(slot, first, upto) -> the data checksums of blocks
    [first, upto) of the slot, as the device computes them (refengine_runner: a torch reduction over the KV
    tensors; the tests: numpy over a stand-in cache); device.position_sums([(slot, j, lo, hi), ...]) -> the
    checksums of positions [lo, hi) of block j (a tail's), summing to the block's over [0, BLOCK). `on_change` is called after every publish and lookup
    (the engine's counters file for fastrestartd)."""

    def __init__(self, index, device, on_change=None, log=None):
        self.index, self.device, self.on_change = index, device, on_change
        self.log = log or (lambda m: print(m, flush=True))

    def choose(self, ids, free, recent=False):
        out = self.index.match(ids, free, recent)
        if self.on_change:
            self.on_change()
        return out

    def begin(self, slot, cached):
        self.index.begin(slot, cached)

    def written(self, slot, tokens):
        first, upto = self.index.publishable(slot, len(tokens))
        if upto <= first:
            return 0
        event = self.device.record()
        self.device.wait(event)  # invariant 2: the writes that filled the blocks completed on the device
        sums = self.device.checksums(slot, first, upto)
        n = self.index.publish(slot, tokens, upto, sums)
        if n and self.on_change:
            self.on_change()
        return n

    def written_many(self, items):
        """written() for several slots at once, [(slot, tokens), ...] (a decode step that filled a block in
        each): one event waited for, the checksums in one pass where the device can (checksums_many)."""
        spans = []
        for slot, tokens in items:
            first, upto = self.index.publishable(slot, len(tokens))
            if upto > first:
                spans.append((slot, tokens, first, upto))
        if not spans:
            return 0
        event = self.device.record()
        self.device.wait(event)  # invariant 2, as in written()
        many = getattr(self.device, "checksums_many", None)
        ranges = [(slot, first, upto) for slot, _, first, upto in spans]
        sums = many(ranges) if many else [self.device.checksums(*r) for r in ranges]
        n = sum(self.index.publish(slot, tokens, upto, ss) for (slot, tokens, _, upto), ss in zip(spans, sums))
        if n and self.on_change:
            self.on_change()
        return n

    def tails_written(self, items):
        """After a decode step, the streams' tails ([(slot, n_written, fed), ...]: positions [0, n_written) of
        the slot hold K/V; fed(lo, hi) -> the ids at positions [lo, hi)), each grown by the positions the
        step wrote (one, or the whole tail after it was dropped): one event waited for, the checksums in one
        device call (device.position_sums). Run after written_many, which publishes a block a step filled."""
        spans = []
        for slot, n, fed in items:
            at = self.index.tail_step(slot, n)
            if at is not None:
                spans.append((slot, n, fed) + at)
        if not spans:
            return 0
        event = self.device.record()
        self.device.wait(event)  # invariant 2
        try:
            sums = self.device.position_sums([(slot, j, lo, n - j * BLOCK) for slot, n, _, j, lo in spans])
        except Exception as e:  # noqa: BLE001 -- a tail only spares a continuation's steps: never fail the step
            self.index.stats["tails_off"] = f"{type(e).__name__}: {e}"
            self.log(f"prefix index: stream tails off for this engine ({type(e).__name__}: {e}): a continued "
                     "stream feeds the ids after its last whole block again")
            self.tails_written = lambda items: 0
            return 0
        return sum(self.index.publish_tail(slot, fed(j * BLOCK + lo, n), n, lo, ps)
                   for (slot, n, fed, j, lo), ps in zip(spans, sums))

    def take_slot(self, free):
        """A slot for a write outside any request (the startup check): emptied first (counted as evicted)."""
        slot, _ = self.index.match([], free)
        self.index.begin(slot, 0)
        self.index.stats["requests"] -= 1  # not a request's lookup
        return slot


class KvReport:
    """The engine's word to fastrestartd (docs/kv-survival.md, "In fastrestartd's status"; the package's
    fastrestart.kv_stats): the fastrestart-kv: line now (and after a rebuild), and the counters file
    ($FASTRESTART_KV_STATS_FILE) rewritten by a daemon thread at most every 0.2 s after a change. Without
    the fastrestart package it only logs that it cannot."""

    def __init__(self, index, location, log):
        import threading
        self.index, self.location, self.log = index, location, log
        self.reporter = None
        try:
            from fastrestart import kv_stats
            self.kv_stats = kv_stats
            self.reporter = kv_stats.KvStatsReporter()
        except ImportError as e:
            log(f"prefix index: no fastrestart.kv_stats ({e}): fastrestartd's status will not show it")
            return
        self.dirty = threading.Event()
        self.warned = False
        self.rebuilt()
        threading.Thread(target=self._run, name="refengine-kv-stats", daemon=True).start()

    def _stats(self):
        i, rec = self.index, self.index.recovery
        return self.kv_stats.KvStats(location=self.location, header=rec["header"], blocks=i.slots * i.max_blocks,
                                     block_tokens=BLOCK, recovered=rec["recovered"], dropped=rec["dropped"],
                                     requests=i.stats["requests"], query_tokens=i.stats["query_tokens"],
                                     hit_tokens=i.stats["hit_tokens"])

    def _write(self):
        try:
            self.reporter.write(self._stats())
        except OSError as e:
            if not self.warned:
                self.log(f"prefix index: the counters file for fastrestartd: {e}")
                self.warned = True

    def rebuilt(self):
        if self.reporter is None:
            return
        print(self.reporter.line(self._stats()), flush=True)
        self._write()

    def changed(self):
        if self.reporter is not None:
            self.dirty.set()

    def _run(self):
        import time
        while True:
            self.dirty.wait()
            self.dirty.clear()
            self._write()
            time.sleep(0.2)

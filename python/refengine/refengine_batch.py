"""The batched reference engine's arithmetic and batching, without torch (docs/refengine.md, "Batched serving").

Pure Python, so that CI covers it with no GPU (python/tests/test_refengine_batch.py): vLLM's default
CUDA-graph capture sizes, the choice of the graph a batch runs, vLLM's default --max-num-seqs, the KV-cache
budget from the profiled figures, the cache's shape from that budget, the static slots that concurrent
requests are decoded in, and the step loop's bookkeeping (Batcher), which drives the model through two
callbacks (refengine_runner.py gives the GPU ones; the tests give stand-ins).
"""
import heapq
import threading

GIB = 1 << 30
# The KV cache's slot length is a whole number of these (vLLM's default block size: 16 tokens).
BLOCK = 16


def default_capture_sizes(max_num_seqs, max_num_batched_tokens):
    """vLLM's default cudagraph_capture_sizes: 1, 2, 4, then every 8 below 256, then every 16 from 256, up
    to min(2 x max_num_seqs, 512) and never above max_num_batched_tokens (vllm/config/vllm.py,
    _set_cudagraph_sizes, without speculative decoding). Ascending."""
    top = min(2 * max_num_seqs, 512, max_num_batched_tokens)
    sizes = [s for s in (1, 2, 4) if s <= top]
    if top >= 8:
        sizes += list(range(8, min(top + 1, 256), 8))
    if top >= 256:
        sizes += list(range(256, top + 1, 16))
    return sizes


def parse_capture_sizes(text, max_num_batched_tokens):
    """--cuda-graph-sizes "1,2,4,8": ascending, deduplicated; sizes above max_num_batched_tokens are dropped
    as vLLM drops them. Raises ValueError naming the flag."""
    try:
        sizes = sorted({int(s) for s in text.replace(" ", "").split(",") if s})
    except ValueError:
        raise ValueError(f"--cuda-graph-sizes: {text!r} is not a comma-separated list of integers")
    if not sizes or sizes[0] < 1:
        raise ValueError(f"--cuda-graph-sizes: {text!r}: sizes must be integers >= 1")
    return [s for s in sizes if s <= max_num_batched_tokens]


def graph_for(sizes, rows):
    """The smallest captured size that holds `rows` rows (sizes ascending), or None: run it eagerly."""
    for s in sizes:
        if s >= rows:
            return s
    return None


def default_max_num_seqs(total_bytes, device_name):
    """vLLM's default for its OpenAI server (vllm/engine/arg_utils.py, get_batch_defaults): 1024 sequences
    and 8192 batched tokens on a GPU of at least 70 GiB that is not an A100, else 256 and 2048."""
    if total_bytes >= 70 * GIB and "a100" not in device_name.lower():
        return 1024, 8192
    return 256, 2048


def kv_budget(total, utilization, torch_before_profile, torch_peak_increase, non_torch_increase,
              attached_weight_bytes, share_excludes_attached):
    """Bytes the KV cache may take, and the terms (a dict) for the log and /stats.

    vLLM's rule (vllm/v1/worker/gpu_worker.py, determine_available_memory): requested = total x
    utilization; KV = requested - non-KV, non-KV = weights + the profile's peak activations + memory
    outside torch's allocator. torch_before_profile is what torch had allocated after the load (weights read
    from disk, the oracle's leftovers); weights attached through the VMM API are in no torch statistic and
    not in non_torch_increase either (mapping the daemon's pool allocates nothing new), so they are added
    here explicitly, once, unless the share was already given without them (fastrestartd in zero_copy
    lowers --gpu-memory-utilization by the daemon's held bytes, which hold those weights)."""
    requested = int(total * utilization)
    counted = 0 if share_excludes_attached else int(attached_weight_bytes)
    non_kv = int(torch_before_profile) + max(0, int(torch_peak_increase)) + max(0, int(non_torch_increase)) + counted
    terms = {"total_bytes": int(total), "utilization": utilization, "requested_bytes": requested,
             "torch_before_profile_bytes": int(torch_before_profile),
             "torch_peak_increase_bytes": max(0, int(torch_peak_increase)),
             "non_torch_increase_bytes": max(0, int(non_torch_increase)),
             "attached_weight_bytes": int(attached_weight_bytes), "attached_counted_bytes": counted,
             "non_kv_bytes": non_kv}
    return requested - non_kv, terms


def bytes_per_position(layers, kv_heads, head_dim, dtype_bytes):
    """K and V of one token, every layer."""
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def kv_shape(budget, slots, per_position, max_model_len, min_positions):
    """Positions per slot: the budget spread over `slots` slots, a whole number of BLOCKs, at most
    max_model_len (a slot longer than the longest request is memory no request can use). Raises ValueError
    with the figures when a slot cannot hold min_positions."""
    fit = budget // (slots * per_position) if budget > 0 else 0
    positions = min(fit, max_model_len)
    if positions >= BLOCK:
        positions -= positions % BLOCK
    if positions < min_positions:
        raise ValueError(
            f"the KV cache budget of {max(budget, 0) / GIB:.2f} GiB holds {fit} positions per slot for {slots} slots "
            f"({per_position} bytes per position); at least {min_positions} are needed: raise "
            "--gpu-memory-utilization or lower --max-num-seqs")
    return positions


# A standby takes the daemon's arena as it is when its KV cache would be within this fraction of the one the
# engine sizes for itself (NVIDIA Dynamo's shadow-engine tests accept a promoted engine within 5%).
ARENA_TOLERANCE = 0.05


def kv_arena_plan(own_positions, slots, per_position, max_model_len, min_positions, daemon_bytes,
                  tolerance=ARENA_TOLERANCE):
    """The KV cache in an arena the daemon already holds (docs/refengine.md, "The KV cache in an arena").

    own_positions: what kv_shape gives this engine's own budget; daemon_bytes: the daemon's arena (None: it
    holds none). Returns (positions, None) to take the arena as it is: positions per slot that fit in it,
    a whole number of BLOCKs, at most max_model_len, within `tolerance` of own_positions (so the cache is
    within that much of the engine's own); else (own_positions, why) to size the arena from the engine's own
    budget, `why` saying what did not fit."""
    if daemon_bytes is None:
        return own_positions, "the daemon holds no such arena"
    fit = daemon_bytes // (slots * per_position)
    positions = min(fit, max_model_len)
    if positions >= BLOCK:
        positions -= positions % BLOCK
    gib = daemon_bytes / GIB
    if positions < min_positions:
        return own_positions, (f"the daemon's arena of {gib:.2f} GiB holds {positions} positions per slot for "
                               f"{slots} slots, fewer than {min_positions}")
    if abs(positions - own_positions) > tolerance * own_positions:
        return own_positions, (f"the daemon's arena of {gib:.2f} GiB holds {positions} positions per slot, this "
                               f"engine's budget {own_positions}: more than {tolerance:.0%} apart")
    return positions, None


def kv_arena_layout(layers, slots, kv_heads, positions, head_dim, dtype_bytes):
    """Where each layer's KV tensor [2, slots, kv_heads, positions, head_dim] lies in the arena, back to
    back from offset 0: (offsets, shape, bytes used). Only these tensors live in the arena: they are the
    only memory every step writes before it reads it (docs/refengine.md)."""
    shape = [2, slots, kv_heads, positions, head_dim]
    layer_bytes = 2 * slots * kv_heads * positions * head_dim * dtype_bytes
    return [i * layer_bytes for i in range(layers)], shape, layers * layer_bytes


class Request:
    """One completion: its prompt, what it wants, and what decoding produced so far."""

    def __init__(self, ids, max_tokens, want_logprobs, replay=0):
        """replay: the last `replay` ids were generated for this same request by an earlier engine (a stream
        the front continues after a kill: docs/front.md, "Fastrestart-Generated-Tokens"). They are fed by
        decode steps, one per step, as that engine fed them, instead of being prefilled with the prompt: a
        prefill computes in other shapes than a decode step, so its K/V and logits may differ in the last
        bits, enough to pick another token at a near-tie (docs/refengine.md, "Continued streams")."""
        self.ids, self.max_tokens, self.want_logprobs = list(ids), max_tokens, want_logprobs
        if not 0 <= replay < len(self.ids):
            raise ValueError(f"replay: {replay} generated tokens of a {len(self.ids)}-token prompt (at most "
                             f"{len(self.ids) - 1})")
        self.replay = replay
        self.stream = False  # a streamed answer (the runner's submit_stream): its tail is published each step
        self.tokens, self.logprobs = [], []
        self.slot = None
        self.cached = 0  # prompt positions found in the slot's cached prefix (refengine_prefix), not computed
        self.pos = None  # the position of the next token fed (the last generated one's)
        self.forced = []  # ids still to feed by decode steps before the answer's first token (replay)
        self.error = None
        self.done = threading.Event()
        self.progress = threading.Condition()  # notified at every token and at the end (a streamed answer)

    def finished(self):
        return len(self.tokens) >= self.max_tokens

    def fed(self, lo, hi):
        """The ids at positions [lo, hi) of its slot: the prompt's, then the generated ones."""
        n = len(self.ids)
        if hi <= n:
            return self.ids[lo:hi]
        if lo >= n:
            return self.tokens[lo - n:hi - n]
        return self.ids[lo:] + self.tokens[:hi - n]

    def advanced(self):
        """The step thread: a token was appended, or the request ended (done set)."""
        with self.progress:
            self.progress.notify_all()

    def tokens_after(self, n, timeout=None):
        """Blocks until the request has more than n tokens or is done (or TIMEOUT s passed); returns
        (tokens[n:], logprobs[n:]), the tokens a stream has not sent yet."""
        with self.progress:
            self.progress.wait_for(lambda: len(self.tokens) > n or self.done.is_set(), timeout)
            return self.tokens[n:], self.logprobs[n:]


class SlotScheduler:
    """Static slots: a request is admitted into the lowest free slot (at most max_num_seqs at once, first
    come first served) and keeps it until it has its tokens. A decode step runs rows 0..rows()-1, slot =
    row, so lowest-first keeps the batch a graph runs small; idle rows below the highest busy one are padding
    (their writes go to their own idle slot, which a request overwrites before it reads it). Thread-safe:
    HTTP threads submit, the engine's one step thread admits and releases."""

    def __init__(self, max_num_seqs):
        self.max_num_seqs = max_num_seqs
        self.free = list(range(max_num_seqs))
        heapq.heapify(self.free)
        self.waiting = []
        self.active = {}  # slot -> Request
        self.cv = threading.Condition()

    def submit(self, req):
        with self.cv:
            self.waiting.append(req)
            self.cv.notify()

    def admit(self, choose=None):
        """Moves waiting requests into free slots; returns those admitted now. choose(ids, free slots,
        recent) -> (slot, cached positions) picks the slot (prefix reuse; recent: a replay, which prefers
        the slot it ran in: PrefixIndex.match); without it, the lowest free slot."""
        out = []
        with self.cv:
            while self.waiting and self.free:
                req = self.waiting.pop(0)
                if choose is None:
                    req.slot = heapq.heappop(self.free)
                else:
                    req.slot, req.cached = choose(req.ids, list(self.free), req.replay > 0)
                    self.free.remove(req.slot)
                    heapq.heapify(self.free)
                self.active[req.slot] = req
                out.append(req)
        return out

    def release(self, req):
        with self.cv:
            if self.active.get(req.slot) is req:
                del self.active[req.slot]
                heapq.heappush(self.free, req.slot)

    def rows(self):
        """Rows a decode step over the active slots needs: the highest busy slot + 1 (0 when idle)."""
        return max(self.active) + 1 if self.active else 0

    def wait_for_work(self, timeout):
        with self.cv:
            if not self.waiting and not self.active:
                self.cv.wait(timeout)
            return bool(self.waiting or self.active)


class Batcher:
    """What the step thread does between forwards: admit waiting requests into free slots and prefill
    each (prefill(ids, slot) -> (token, logprob)), then one decode step over the busy slots
    (step(size, rows, ids, pos) -> (tokens, logprobs), lists of `rows` entries, where size is the captured
    graph to replay or None for an eager step, and ids/pos hold each row's last token and its position:
    pad_pos for a padding row), and hand back finished requests. Every request is completed (req.done set)
    here.

    With `prefix` (refengine_prefix.PrefixCache): a request is admitted into the free slot holding its
    longest cached prefix (prefix.choose), prefix.begin(slot, cached) runs before its prefill, the prefill is
    prefill(ids, slot, cached) (positions from `cached` on), and prefix.written(slot, tokens) publishes what
    the prefill wrote; after a decode step, prefix.written_many publishes each block the step filled, so
    that a stream continued after a kill finds all but its last, partial block in the cache. pad_pos must
    then be a position no cached block holds (the slot's last: refengine_prefix.max_blocks leaves it out).

    A request with `replay` generated ids (Request) is prefilled only up to its prompt as first sent, or not
    at all when the cache holds more; the ids after that are fed by decode steps, their outputs dropped, and
    its answer starts with the output of the step that fed the last of them."""

    def __init__(self, max_num_seqs, sizes, pad_pos=0, prefix=None):
        self.sched = SlotScheduler(max_num_seqs)
        self.sizes = sorted(sizes)
        self.pad_pos = pad_pos
        self.prefix = prefix
        self.stats = {"steps": 0, "rows": 0, "graph_steps": 0, "eager_steps": 0, "prefills": 0}

    def submit(self, req):
        self.sched.submit(req)

    def _finish(self, req):
        if req.finished():
            if self.prefix is not None:  # K/V written: the prompt and every generated token fed back
                self.prefix.written(req.slot, req.ids + req.tokens[:-1])
            self.sched.release(req)
            req.done.set()

    def iterate(self, prefill, step):
        """One round; False when there was nothing to do."""
        pre = self.prefix
        admitted = self.sched.admit(pre.choose if pre is not None else None)
        for req in admitted:
            self._prefill(req, prefill)
        rows = self.sched.rows()
        if not rows:
            return bool(admitted)
        active = dict(self.sched.active)
        size = graph_for(self.sizes, rows)
        n = size or rows
        ids, pos = [0] * n, [self.pad_pos] * n
        for slot, req in active.items():
            ids[slot], pos[slot] = (req.forced[0] if req.forced else req.tokens[-1]), req.pos
        toks, lps = step(size, n, ids, pos)
        self.stats["steps"] += 1
        self.stats["rows"] += len(active)
        self.stats["graph_steps" if size else "eager_steps"] += 1
        filled, tails = [], []
        for slot, req in active.items():
            req.pos += 1  # positions [0, pos) of the slot now hold K/V
            if req.forced:
                del req.forced[0]
                if req.forced:  # a generated id fed again: its output is the one the earlier engine sent
                    self._filled(req, filled, tails)
                    continue
            req.tokens.append(int(toks[slot]))
            req.logprobs.append(float(lps[slot]) if req.want_logprobs else None)
            self._filled(req, filled, tails)
            self._finish(req)
            req.advanced()
        if filled:
            pre.written_many(filled)
        if tails:
            pre.tails_written(tails)
        return True

    def _prefill(self, req, prefill):
        """A request just admitted: its prompt (as first sent) prefilled after the cached prefix, then its
        first token, or, with replay, the ids left to feed by decode steps."""
        pre, ids = self.prefix, req.ids
        # the replayed ids are fed by decode steps only within the last block: those before it are not in
        # the cache (or the cache would hold them), so their K/V differ from the earlier engine's anyway,
        # and a step each would cost one step per generated token
        upto = max(len(ids) - req.replay, (len(ids) - 1) // BLOCK * BLOCK)
        start = 0
        if pre is not None:
            start = req.cached
            pre.begin(req.slot, start)
        if start < upto:
            tok, lp = prefill(ids[:upto], req.slot) if pre is None else prefill(ids[:upto], req.slot, start)
            self.stats["prefills"] += 1
            if pre is not None:
                pre.written(req.slot, ids[:upto])
        else:  # the cache holds more than the prompt as first sent: nothing to prefill
            upto = start
        req.pos = upto  # where the next id fed goes
        req.forced = ids[upto:]
        if req.forced:
            return
        req.tokens.append(int(tok))
        req.logprobs.append(float(lp) if req.want_logprobs else None)
        self._finish(req)
        req.advanced()

    def _filled(self, req, out, tails):
        """After a decode step: a block the step completed, to publish, or a stream's tail that grew (only
        with a prefix cache, and never for a request that has just finished: _finish publishes it)."""
        if self.prefix is None or req.finished():
            return
        if req.pos % BLOCK == 0:
            out.append((req.slot, req.fed(0, req.pos)))
        elif req.stream:
            tails.append((req.slot, req.pos, req.fed))

    def fail_all(self, why):
        """Completes every request in flight or waiting with an error (the step thread is going away)."""
        with self.sched.cv:
            reqs = list(self.sched.active.values()) + list(self.sched.waiting)
            for slot in self.sched.active:
                heapq.heappush(self.sched.free, slot)
            self.sched.active.clear()
            self.sched.waiting.clear()
        for req in reqs:
            req.error = why
            req.done.set()
            req.advanced()

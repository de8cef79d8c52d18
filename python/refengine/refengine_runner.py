"""The batched reference engine's GPU side (docs/refengine.md, "Batched serving"): the profiling forward, the
KV cache, the decode step over static slots, its CUDA graphs per batch size, and the step thread that
decodes concurrent requests together. Needs torch and a GPU; the arithmetic it relies on is in
refengine_batch.py (tested on CI without either).

The forward is the Llama forward written out over the transformers model's own parameters (the tensors the
engine loaded or attached: nothing is copied), so that every row of a batch can sit at its own position in
its own slot: transformers' StaticCache writes one cache_position for the whole batch. Its logits are not
bitwise those of the transformers forward (the oracle's); the startup check compares their greedy token.
"""
import threading
import time

import refengine_batch as rb


class Runner:
    def __init__(self, engine):
        self.e = engine
        self.torch = engine.torch
        self.args = engine.args
        self.device = engine.device
        c = engine.model_config
        self.layers_n = c.num_hidden_layers
        self.hq = c.num_attention_heads
        self.hkv = getattr(c, "num_key_value_heads", None) or self.hq
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // self.hq
        self.group = self.hq // self.hkv
        self.eps = c.rms_norm_eps
        self.vocab = c.vocab_size
        m = engine.model
        base = m.model
        self.embed = base.embed_tokens.weight
        self.norm = base.norm.weight
        self.lm_head = m.lm_head.weight
        rot = base.rotary_emb
        self.inv_freq = rot.inv_freq.float()
        self.rope_scale = float(getattr(rot, "attention_scaling", 1.0))
        self.layers = []
        for layer in base.layers:
            a, p = layer.self_attn, layer.mlp
            self.layers.append(dict(
                ln1=layer.input_layernorm.weight, ln2=layer.post_attention_layernorm.weight,
                q=(a.q_proj.weight, a.q_proj.bias), k=(a.k_proj.weight, a.k_proj.bias),
                v=(a.v_proj.weight, a.v_proj.bias), o=(a.o_proj.weight, a.o_proj.bias),
                gate=(p.gate_proj.weight, p.gate_proj.bias), up=(p.up_proj.weight, p.up_proj.bias),
                down=(p.down_proj.weight, p.down_proj.bias)))
        self.kv = None  # [layers] of tensors [2, slots, kv_heads, positions, head_dim]
        self.slots = self.positions = 0
        self.sizes = []  # captured batch sizes, ascending
        self.graphs = {}  # size -> (CUDAGraph, tok, logprob)
        self.step_fn = self._step
        self.stats = {}
        self.batcher = None  # refengine_batch.Batcher, once serving

    # --- the forward -------------------------------------------------------------------------------------
    def _rms(self, x, w):
        torch = self.torch
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * h.to(x.dtype)

    def _rope(self, x, cos, sin):
        half = x.shape[-1] // 2
        rot = self.torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rot * sin

    def _step(self, ids, pos, first):
        """The greedy token of each row's last token and its log-probability ([R] each): _forward, sampled."""
        logp = self.torch.log_softmax(self._forward(ids, pos, first).float(), dim=-1)
        tok = logp.argmax(dim=-1)
        return tok, logp.gather(1, tok[:, None])[:, 0]

    def _forward(self, ids, pos, first):
        """R rows of T tokens each: ids and pos [R, T]; row r is slot first + r, token t at position pos[r, t].
        Writes their K/V into the cache, attends each token to its slot's positions <= its own, and returns
        the logits of each row's last token [R, vocab]."""
        torch = self.torch
        F = torch.nn.functional
        R, T = ids.shape
        L, D, G, Hkv = self.positions, self.head_dim, self.group, self.hkv
        x = F.embedding(ids, self.embed)  # [R, T, hidden]
        freqs = pos.float()[..., None] * self.inv_freq  # [R, T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.rope_scale).to(x.dtype)[:, :, None, :]
        sin = (emb.sin() * self.rope_scale).to(x.dtype)[:, :, None, :]
        # Query (g, t) of a kv head attends to positions <= pos[r, t] of its slot: [R, 1, G*T, L].
        mask = (torch.arange(L, device=ids.device) <= pos[..., None])[:, None, None].expand(R, 1, G, T, L)
        mask = mask.reshape(R, 1, G * T, L)
        rows = torch.arange(R, device=ids.device)[:, None].expand(R, T)
        for i, w in enumerate(self.layers):
            h = self._rms(x, w["ln1"])
            q = F.linear(h, *w["q"]).view(R, T, self.hq, D)
            k = F.linear(h, *w["k"]).view(R, T, Hkv, D)
            v = F.linear(h, *w["v"]).view(R, T, Hkv, D)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            kc, vc = self.kv[i][0, first:first + R], self.kv[i][1, first:first + R]  # views [R, Hkv, L, D]
            kc[rows, :, pos] = k
            vc[rows, :, pos] = v
            # Grouped-query attention without copying K/V per query head: the G query heads of a kv head are
            # G x T queries against that head's cache.
            qg = q.view(R, T, Hkv, G, D).permute(0, 2, 3, 1, 4).reshape(R, Hkv, G * T, D)
            o = F.scaled_dot_product_attention(qg, kc, vc, attn_mask=mask)
            o = o.view(R, Hkv, G, T, D).permute(0, 3, 1, 2, 4).reshape(R, T, self.hq * D)
            x = x + F.linear(o, *w["o"])
            h = self._rms(x, w["ln2"])
            x = x + F.linear(F.silu(F.linear(h, *w["gate"])) * F.linear(h, *w["up"]), *w["down"])
        return F.linear(self._rms(x[:, -1], self.norm), self.lm_head)  # [R, vocab]

    # --- startup phases ----------------------------------------------------------------------------------
    def profile(self, max_num_seqs, max_num_batched_tokens, share_excludes_attached):
        """vLLM's profile_run: one dummy forward of max_num_batched_tokens tokens (logits of the last only,
        as vLLM computes logits for the sampled positions) and a sampler over max_num_seqs rows; then the
        KV budget from the peak (refengine_batch.kv_budget). Returns (budget, terms)."""
        torch, dev = self.torch, self.device
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
        before = torch.cuda.memory_allocated(dev)
        n = min(max_num_batched_tokens, getattr(self.e.model_config, "max_position_embeddings", max_num_batched_tokens))
        with torch.inference_mode():
            ids = torch.zeros((1, n), dtype=torch.long, device=dev)
            try:
                out = self.e.model(input_ids=ids, use_cache=False, logits_to_keep=1)
            except TypeError:  # a transformers without logits_to_keep
                out = self.e.model(input_ids=ids, use_cache=False)
            del out
            logits = torch.zeros((max_num_seqs, self.vocab), dtype=torch.float32, device=dev)
            torch.log_softmax(logits, dim=-1).argmax(dim=-1)
            del logits
        torch.cuda.synchronize(dev)
        peak = torch.cuda.max_memory_allocated(dev)
        free, total = torch.cuda.mem_get_info(dev)
        used_increase = (total - free) - (total - self.e.mem_init["free"])
        non_torch = used_increase - (torch.cuda.memory_reserved(dev) - self.e.mem_init["torch_reserved"])
        attached = self.e.load.get("weight_bytes", 0) if self.e.attached is not None and \
            self.e.attached.mode == "zero_copy" else 0
        budget, terms = rb.kv_budget(total, self.args.gpu_memory_utilization, before, peak - before, non_torch,
                                     attached, share_excludes_attached)
        terms.update(profile_tokens=n, kv_budget_bytes=budget)
        torch.cuda.empty_cache()
        return budget, terms

    def kv_geometry(self, budget, slots, max_model_len, min_positions):
        """(bytes per position, positions per slot) of the KV cache `budget` holds (refengine_batch.kv_shape)."""
        per = rb.bytes_per_position(self.layers_n, self.hkv, self.head_dim, self._esize())
        return per, rb.kv_shape(budget, slots, per, max_model_len, min_positions)

    def _esize(self):
        return self.torch.empty((), dtype=self.e.dtype).element_size()

    def allocate_kv(self, budget, slots, max_model_len, min_positions):
        """One tensor per layer (K and V of every slot), allocated once; never grown."""
        _, positions = self.kv_geometry(budget, slots, max_model_len, min_positions)
        return self.place_kv(slots, positions)

    def place_kv(self, slots, positions, arena=None):
        """The KV tensors of `positions` per slot: allocated by torch (zero-filled), or views into `arena`
        (a fastrestart.Arena; refengine_batch.kv_arena_layout), no copy. Nothing else of the engine goes in
        the arena: while it is the placeholder, every chunk of it is the same memory, and only the KV blocks
        are rewritten (by the step that fills a slot's position) before anything reads them."""
        torch = self.torch
        esize = self._esize()
        per = rb.bytes_per_position(self.layers_n, self.hkv, self.head_dim, esize)
        offsets, shape, used = rb.kv_arena_layout(self.layers_n, slots, self.hkv, positions, self.head_dim, esize)
        if arena is None:
            self.kv = [torch.zeros(shape, dtype=self.e.dtype, device=self.device) for _ in offsets]
        else:
            if used > arena.bytes:
                raise ValueError(f"the KV cache of {used} bytes does not fit the arena's {arena.bytes}")
            dtype = str(self.e.dtype).replace("torch.", "")
            self.kv = [torch.from_dlpack(arena.view(off, shape, dtype)) for off in offsets]
            if self.kv[0].device != self.device:
                raise ValueError(f"the arena is on {self.kv[0].device}, the engine on {self.device}")
        self.slots, self.positions = slots, positions
        self._sync()
        return {"bytes": per * slots * positions, "slots": slots, "positions": positions,
                "bytes_per_position": per, "layers": self.layers_n, "tensor_shape": list(shape),
                "placement": "torch" if arena is None else "arena"}

    def zero_kv(self):
        for t in self.kv:
            t.zero_()
        self._sync()

    def drop_graphs(self):
        """Forgets the captured graphs (before the KV cache they were captured over is replaced)."""
        self.graphs = {}
        self.sizes = []

    def _sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def compile(self):
        """torch.compile of the decode step. Dynamo's automatic dynamic shapes: the first batch size is
        compiled static, the second recompiles with a symbolic batch, which every other size reuses (one
        graph per size would hit Dynamo's recompile limit at vLLM's 51 sizes)."""
        self.step_fn = self.torch.compile(self._step)

    def pad_pos(self):
        """The scratch position: what padding rows, the warm-up and the capture write, in every slot. The
        slot's last position: a request reaches it only by writing it first, and no cached prefix block
        holds it (refengine_prefix.max_blocks)."""
        return self.positions - 1

    def warm_up(self, sizes):
        """One eager (or compiled) run of the decode step at each size, largest first (at the scratch
        position: the slots' cached prefixes stay as they are)."""
        torch = self.torch
        with torch.inference_mode():
            for b in sorted(sizes, reverse=True):
                ids = torch.zeros((b, 1), dtype=torch.long, device=self.device)
                self.step_fn(ids, torch.full_like(ids, self.pad_pos()), 0)
        torch.cuda.synchronize(self.device)

    def capture(self, sizes):
        """A CUDA graph of the decode step per size, largest first into one memory pool (the smaller ones
        reuse the larger one's memory: vLLM's capture_model order), over static input buffers of the
        largest size."""
        torch = self.torch
        top = max(sizes)
        self.ids_buf = torch.zeros((top, 1), dtype=torch.long, device=self.device)
        self.pos_buf = torch.full((top, 1), self.pad_pos(), dtype=torch.long, device=self.device)
        pool = torch.cuda.graph_pool_handle()
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()  # what the warm-ups (or compile) cached is not the graphs' memory
        before = torch.cuda.memory_reserved(self.device)
        with torch.inference_mode():
            s = torch.cuda.Stream(self.device)
            for i, b in enumerate(sorted(sizes, reverse=True)):
                # One warm-up run per size before its capture, as vLLM's capture_model does
                # (cudagraph_num_of_warmups, 1 by default); on a side stream, torch's rule before a capture.
                s.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(s):
                    self.step_fn(self.ids_buf[:b], self.pos_buf[:b], 0)
                torch.cuda.current_stream(self.device).wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    tok, lp = self.step_fn(self.ids_buf[:b], self.pos_buf[:b], 0)
                self.graphs[b] = (g, tok, lp)
                if (i + 1) % 8 == 0 or i + 1 == len(sizes):
                    # fastrestartd's status text while starting (docs/supervisor.md, "Engine progress")
                    print(f"fastrestart-progress: phase=graph_capture done={i + 1} total={len(sizes)} unit=graphs",
                          flush=True)
        torch.cuda.synchronize(self.device)
        self.sizes = sorted(sizes)
        return {"sizes": self.sizes, "count": len(self.sizes),
                "pool_bytes": torch.cuda.memory_reserved(self.device) - before}

    def check(self, ids, reference, slot=0):
        """The oracle prompt through this forward (a prefill in `slot`) against `reference`, the transformers
        forward's logits of it: not bitwise equal (other kernels, another summation order), but a wrong
        forward differs by the size of the logits themselves. Returns the comparison (/stats batch.check)."""
        torch = self.torch
        with torch.inference_mode():
            x = torch.tensor([ids], dtype=torch.long, device=self.device)
            mine = self._forward(x, torch.arange(len(ids), device=self.device)[None], slot)[0].float()
            ref = reference.float()
            diff = float((mine - ref).abs().max())
            scale = float(ref.abs().max())
            return {"token": int(mine.argmax()), "reference_token": int(ref.argmax()),
                    "max_abs_diff": round(diff, 6), "max_abs_logit": round(scale, 6),
                    "ok": diff <= 0.1 * max(scale, 1e-6)}

    # --- serving -----------------------------------------------------------------------------------------
    def _prefill(self, ids, slot, start=0):
        """Positions [start, len(ids)) of the slot; [0, start) hold a cached prefix's K/V (refengine_prefix)."""
        torch = self.torch
        x = torch.tensor([ids[start:]], dtype=torch.long, device=self.device)
        pos = torch.arange(start, len(ids), device=self.device)[None]
        tok, lp = self._step(x, pos, slot)  # a prefill is never graphed (vLLM: piecewise only)
        return int(tok[0]), float(lp[0])

    def max_len(self):
        return self.positions

    def start_loop(self, max_num_seqs, log, prefix=None):
        self.batcher = rb.Batcher(max_num_seqs, self.sizes, pad_pos=self.pad_pos(), prefix=prefix)
        self.stats = self.batcher.stats
        self.log = log
        threading.Thread(target=self._loop, name="refengine-step", daemon=True).start()

    def submit(self, req):
        self.batcher.submit(req)
        req.done.wait()
        if req.error:
            raise RuntimeError(req.error)
        return req.tokens, req.logprobs

    def submit_stream(self, req):
        """Yields (token, logprob) as the step thread produces them; raises RuntimeError if it failed."""
        req.stream = True  # a stream the front may continue after a kill: its tail is kept (refengine_prefix)
        self.batcher.submit(req)
        n = 0
        while True:
            toks, lps = req.tokens_after(n)
            for t, lp in zip(toks, lps):
                yield t, lp
            n += len(toks)
            if req.done.is_set() and n >= len(req.tokens):
                break
        if req.error:
            raise RuntimeError(req.error)

    def _loop(self):
        import os
        torch = self.torch
        try:
            while True:
                if not self.batcher.sched.wait_for_work(0.5):
                    continue
                with self.e.lock, torch.inference_mode():  # the snapshot exchange holds this lock
                    self.batcher.iterate(self._prefill, self._decode)
        except Exception as e:  # the engine cannot serve on: fail every request, exit for a restart
            self.log(f"step loop failed: {type(e).__name__}: {e}")
            self.batcher.fail_all(str(e))
            time.sleep(0.2)
            os._exit(1)

    def _decode(self, size, n, ids, pos):
        """One decode step of n rows: the graph of `size` rows replayed, or (size None) the step run eagerly."""
        torch = self.torch
        ids_t = torch.tensor(ids, dtype=torch.long).view(n, 1)
        pos_t = torch.tensor(pos, dtype=torch.long).view(n, 1)
        if size:
            self.ids_buf[:n].copy_(ids_t)
            self.pos_buf[:n].copy_(pos_t)
            g, tok, lp = self.graphs[size]
            g.replay()
        else:
            tok, lp = self.step_fn(ids_t.to(self.device), pos_t.to(self.device), 0)
        return tok[:n].tolist(), lp[:n].tolist()


class TorchPrefixDevice:
    """refengine_prefix.PrefixCache's device side over the runner's KV tensors: a CUDA event recorded on the
    current stream after the writes issued so far, waited for on the host; and the data checksum of each
    block: the block's K and V of every layer read as integers (the dtype's own width), each element
    weighted by its place in the block, summed in int64 (wrapping), the layers chained. Deterministic on one
    device; it reads each checksummed block once."""

    def __init__(self, runner):
        self.r = runner
        self.torch = runner.torch
        self.weights = None

    def _layout(self):
        """The integer dtype of the KV's element width, the elements of one block (K and V of every KV
        head), and the elements' weights (self.weights, in the order [2, Hkv, BLOCK, head_dim])."""
        torch, r = self.torch, self.r
        ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[r._esize()]
        per = 2 * r.hkv * rb.BLOCK * r.head_dim
        if self.weights is None:
            self.weights = torch.arange(per, device=r.device, dtype=torch.int64) % 65521 + 1
        return ints, per

    def _powers(self):
        """1000003 to the power of the layers after each layer, wrapped into int64: the layer chain
        (total = total x 1000003 + layer sum) as one weighted sum over the layers."""
        layers = len(self.r.kv)
        if getattr(self, "powers", None) is None or len(self.powers) != layers:
            p, pw = 1, []
            for _ in range(layers):
                pw.append(p - (1 << 64) if p >= 1 << 63 else p)
                p = p * 1000003 % (1 << 64)
            self.powers = self.torch.tensor(pw[::-1], dtype=self.torch.int64, device=self.r.device)
        return self.powers

    def record(self):
        torch = self.torch
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(self.r.device))
        return ev

    def wait(self, event):
        event.synchronize()

    # Blocks checksummed in one batched pass of a recovery: bounds its temporaries (the integer copy and its
    # weighted product, 2 x 8 bytes an element: 256 KiB a block of the Llama-3.1-8B shape) to those of one
    # publish of a 512-block slot.
    CHUNK_BLOCKS = 512

    def checksums_of(self, wanted):
        """A recovery's checksums: {slot: checksums(slot, 0, n)} for wanted {slot: n}, bit for bit (the sums
        are integers that wrap the same in any order), computed over groups of slots of similar length in
        one pass per group, so that a recovery costs a few dozen kernels per layer, not a few per slot and
        layer (it runs before the next engine serves: its time is the restart's)."""
        order = sorted(wanted, key=lambda s: (-wanted[s], s))
        out, i = {}, 0
        try:
            while i < len(order):
                n = wanted[order[i]]
                group = order[i:i + max(1, self.CHUNK_BLOCKS // max(n, 1))]
                i += len(group)
                sums = self._checksums_group(group, n)
                out.update({s: sums[k][:wanted[s]] for k, s in enumerate(group)})
        except RuntimeError as e:  # a batch that does not fit the memory left: slot by slot, as a publish does
            log = getattr(self.r, "log", None) or (lambda m: print(m, flush=True))  # before start_loop: none yet
            log(f"prefix recovery: batched checksums failed ({type(e).__name__}: {e}); slot by slot")
            out = {s: self.checksums(s, 0, n) for s, n in wanted.items()}
        return out

    def _checksums_group(self, group, n):
        """The checksums of blocks 0..n-1 of every slot of GROUP: a list per slot, in GROUP's order."""
        torch, r = self.torch, self.r
        if n <= 0:
            return [[] for _ in group]
        B, c = rb.BLOCK, len(group)
        ints, per = self._layout()
        slots = torch.tensor(group, dtype=torch.long, device=r.device)
        total = torch.zeros((c, n), dtype=torch.int64, device=r.device)
        with torch.inference_mode():
            for t in r.kv:  # [2, slots, Hkv, positions, D]
                x = t[:, :, :, :n * B, :].index_select(1, slots)  # [2, c, Hkv, n*B, D]
                x = x.reshape(2, c, r.hkv, n, B, r.head_dim).permute(1, 3, 0, 2, 4, 5).reshape(c, n, per)
                xi = x.contiguous().view(ints).to(torch.int64)
                total = total * 1000003 + (xi * self.weights).sum(dim=2)
        return total.tolist()

    # Blocks a decode step's publish checksums together: bounds its temporaries (every layer's integer copy of
    # each block, 8 MiB a block of the Llama-3.1-8B shape) to 64 MiB.
    MANY_BLOCKS = 8

    def checksums_many(self, ranges):
        """[checksums(slot, first, upto) for each range], bit for bit: the blocks a decode step filled, one
        per slot. It runs between two steps, so its time is every request's: each layer's blocks are taken
        in one indexing kernel and the rest runs once over all layers (the chain total = total x 1000003 +
        layer sum, written as the sum of each layer's sum times 1000003 to the power of the layers after
        it, which wraps alike in int64): about 40 kernels for up to MANY_BLOCKS blocks instead of about 200."""
        pairs = [(slot, j) for slot, first, upto in ranges for j in range(first, upto)]
        flat = []
        try:
            for i in range(0, len(pairs), self.MANY_BLOCKS):
                flat += self._block_sums(pairs[i:i + self.MANY_BLOCKS])
        except RuntimeError:  # a KV tensor that is not one contiguous view: range by range
            return [self.checksums(*rg) for rg in ranges]
        out, i = [], 0
        for _, first, upto in ranges:
            out.append(flat[i:i + upto - first])
            i += upto - first
        return out

    def _block_sums(self, pairs):
        torch, r = self.torch, self.r
        B, n = rb.BLOCK, len(pairs)
        ints, per = self._layout()
        powers = self._powers()
        slots = torch.tensor([s for s, _ in pairs], dtype=torch.long, device=r.device)
        blocks = torch.tensor([j for _, j in pairs], dtype=torch.long, device=r.device)
        with torch.inference_mode():
            # [2, slots, Hkv, positions, D], positions a whole number of blocks; indexing dimensions 1 and 3
            # puts them first: [n, 2, Hkv, B, D], each block's elements in checksums()'s order
            x = torch.stack([t.view(2, t.shape[1], r.hkv, t.shape[3] // B, B, r.head_dim)[:, slots, :, blocks]
                             .reshape(n, per) for t in r.kv])
            sums = (x.view(ints).to(torch.int64) * self.weights).sum(dim=2)  # [layers, n]
            return (sums * powers[:, None]).sum(dim=0).tolist()

    # Positions a tail publish checksums in one stacked pass over the layers (every layer's copy of each
    # position and its int64 products: about 1.2 MiB a position of the Llama-3.1-8B shape); past it, a pass
    # per layer over at most POSITIONS_PER_PASS positions (a recovery of many tails).
    STACKED_POSITIONS = 64
    POSITIONS_PER_PASS = 4096

    def position_sums(self, items):
        """[the data checksum of positions [lo, hi) of block j of the slot for (slot, j, lo, hi) in items],
        bit for bit the share those positions have in checksums(slot, j, j + 1) (the sum is over elements,
        each weighted by its place in the block): a tail's checksum, or what a decode step adds to it. Each
        position's K and V are read once, by one indexing kernel a layer."""
        torch, r, B = self.torch, self.r, rb.BLOCK
        ints, _ = self._layout()
        powers = self._powers()
        w = self.weights.view(2, r.hkv, B, r.head_dim)
        flat = [(slot, j * B + p, p, i) for i, (slot, j, lo, hi) in enumerate(items) for p in range(lo, hi)]
        out = [0] * len(items)
        if not flat:
            return out
        many = len(flat) > self.STACKED_POSITIONS
        step = self.POSITIONS_PER_PASS if many else self.STACKED_POSITIONS
        with torch.inference_mode():
            for c in range(0, len(flat), step):
                part = flat[c:c + step]
                slots = torch.tensor([f[0] for f in part], dtype=torch.long, device=r.device)
                pos = torch.tensor([f[1] for f in part], dtype=torch.long, device=r.device)
                wsel = w[:, :, torch.tensor([f[2] for f in part], dtype=torch.long, device=r.device)]
                wsel = wsel.permute(2, 0, 1, 3).reshape(len(part), -1)  # [n, 2 x Hkv x D]
                if many:  # layer by layer: total = total x 1000003 + layer sum
                    sums = torch.zeros(len(part), dtype=torch.int64, device=r.device)
                    for t in r.kv:  # indexing dimensions 1 and 3: [n, 2, Hkv, D]
                        x = t[:, slots, :, pos].reshape(len(part), -1).view(ints).to(torch.int64)
                        sums = sums * 1000003 + (x * wsel).sum(dim=1)
                else:
                    x = torch.stack([t[:, slots, :, pos].reshape(len(part), -1) for t in r.kv])
                    sums = ((x.view(ints).to(torch.int64) * wsel).sum(dim=2) * powers[:, None]).sum(dim=0)
                for f, v in zip(part, sums.tolist()):
                    out[f[3]] += v
        return [v & 0xFFFFFFFFFFFFFFFF for v in out]

    def checksums(self, slot, first, upto):
        torch, r = self.torch, self.r
        n = upto - first
        if n <= 0:
            return []
        B = rb.BLOCK
        ints, per = self._layout()
        total = torch.zeros(n, dtype=torch.int64, device=r.device)
        with torch.inference_mode():
            for t in r.kv:
                x = t[:, slot, :, first * B:upto * B, :]  # [2, Hkv, n*B, D]
                x = x.reshape(2, r.hkv, n, B, r.head_dim).permute(2, 0, 1, 3, 4).reshape(n, per)
                xi = x.contiguous().view(ints).to(torch.int64)
                total = total * 1000003 + (xi * self.weights).sum(dim=1)
        return total.tolist()

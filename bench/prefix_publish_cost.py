#!/usr/bin/env python3
"""What the prefix index's publishes cost a decode step of the reference engine, on a GPU.

After every decode step the batched reference engine checksums what the step wrote before publishing it
(docs/refengine.md, "Prefix reuse across a kill"): each block a step filled (TorchPrefixDevice
.checksums_many, one row in 16 steps) and, for streams, the one position each stream's tail grew by
(position_sums). Both run between two decode steps, so their time is every request's. This bench times
them over KV tensors of a given shape (the Llama-3.1-8B shape by default: 32 layers, 8 KV heads of 128,
bf16), with the CUDA event wait the publish does, for 1 to 256 rows, beside one decode-sized reference:
reading the 16 GB of weights once (a batch-1 decode step's floor on this GPU). Medians of --repeat calls.

  bench/prefix_publish_cost.py [--layers 32] [--kv-heads 8] [--head-dim 128] [--slots 256] \
      [--positions 512] [--repeat 50] [--out DIR]

Results: a table on stdout and DIR/prefix_publish_cost-<stamp>.json.
"""
import argparse
import json
import os
import statistics
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "refengine"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--slots", type=int, default=256)
    ap.add_argument("--positions", type=int, default=512)  # 16 GiB of KV at 256 slots
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--weights-gib", type=float, default=15.0, help="the weights a decode step reads once")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("prefix_publish_cost: needs torch")
    if not torch.cuda.is_available():
        sys.exit("prefix_publish_cost: needs a CUDA device")
    import refengine_runner

    dev = torch.device("cuda:0")
    kv = [torch.randn(2, a.slots, a.kv_heads, a.positions, a.head_dim, device=dev).to(torch.bfloat16)
          for _ in range(a.layers)]
    runner = types.SimpleNamespace(torch=torch, kv=kv, hkv=a.kv_heads, head_dim=a.head_dim, device=dev,
                                   _esize=lambda: 2)
    pd = refengine_runner.TorchPrefixDevice(runner)

    def timed(fn):
        fn()  # warm: the weights, the powers, the allocator
        out = []
        for _ in range(a.repeat):
            torch.cuda.synchronize()
            t = time.perf_counter()
            pd.wait(pd.record())  # as a publish does: the step's writes first
            fn()
            torch.cuda.synchronize()
            out.append((time.perf_counter() - t) * 1e3)
        return {"median_ms": round(statistics.median(out), 4), "min_ms": round(min(out), 4),
                "max_ms": round(max(out), 4)}

    rows = [n for n in (1, 8, 64, 256) if n <= a.slots]
    res = {"shape": vars(a), "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "tail_positions": {}, "full_blocks": {}}
    for n in rows:
        items = [(s, 3, 5, 6) for s in range(n)]  # one new position of each stream's tail
        res["tail_positions"][n] = timed(lambda items=items: pd.position_sums(items))
        ranges = [(s, 3, 4) for s in range(n)]  # one filled block a row (a step fills one in 16 rows)
        res["full_blocks"][n] = timed(lambda ranges=ranges: pd.checksums_many(ranges))
    w = torch.empty(int(a.weights_gib * 2**30) // 2, dtype=torch.bfloat16, device=dev)
    res["weights_read"] = timed(w.sum)
    w = None  # noqa: F841 -- freed before the table
    print(f"{res['gpu']}, {a.layers} layers x {a.kv_heads} KV heads x {a.head_dim}, bf16; medians of {a.repeat}")
    print(f"{'rows':>5} {'tail positions ms':>18} {'full blocks ms':>15}")
    for n in rows:
        print(f"{n:>5} {res['tail_positions'][n]['median_ms']:>18.3f} {res['full_blocks'][n]['median_ms']:>15.3f}")
    print(f"reading {a.weights_gib:g} GiB once (a batch-1 decode step's floor): {res['weights_read']['median_ms']:.3f} ms")
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, time.strftime("prefix_publish_cost-%Y%m%dT%H%M%SZ.json", time.gmtime()))
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(f"raw: {path}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Draws docs/img/standby-h200.png from bench/results/standby-h200-2026-12-01.json (docs/bench-notes.md,
"Standby engines"): the reference engine's death to READY per start path, each kill a dot, the median a
bar, on a log scale.

    /usr/bin/python3 bench/standby_chart.py [RESULTS.json] [OUT.png]     (needs matplotlib)
"""
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src = sys.argv[1] if len(sys.argv) > 1 else "bench/results/standby-h200-2026-12-01.json"
out = sys.argv[2] if len(sys.argv) > 2 else "docs/img/standby-h200.png"
runs = json.load(open(src))["runs_same_lease"]
order = [("ref-warm", "warm (attach)"), ("ref-pre_gpu", "standby pre_gpu"), ("ref-warmed", "standby warmed")]
fig, ax = plt.subplots(figsize=(7, 3.2))
for y, (key, label) in enumerate(order):
    d = [k["death_to_ready_s"] for k in runs[key]["kills"] if k.get("death_to_ready_s") is not None]
    med = statistics.median(d)
    ax.barh(y, med, color="#4c72b0" if "standby" in label else "#999999", height=0.55)
    ax.plot(d, [y] * len(d), "k.", markersize=6)
    ax.text(max(d) * 1.2, y, f"{med:.3f} s" if med < 1 else f"{med:.1f} s", va="center")
ax.set_yticks(range(len(order)), [label for _, label in order])
ax.set_xscale("log")
ax.set_xlim(0.05, 60)
ax.set_xlabel("death to READY, s (log scale; bar: median, dots: each kill -9)")
ax.set_title("16 GB PyTorch engine (Llama-3.1-8B shape) on an H200 under fastrestartd", fontsize=10)
fig.tight_layout()
fig.savefig(out, dpi=120)
print(out)

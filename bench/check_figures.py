#!/usr/bin/env python3
"""Recomputes every restart figure of docs/benchmarks.md and of the README's "what a restart costs" table
from the raw files in bench/results/, and fails naming each line whose figure is not the raw file's.

    bench/check_figures.py [--root REPO] [--list]

A figure is named by a FIGURES entry (its raw file, where in it, and what is taken: a median, a maximum,
a range over kills); a CHECKS entry says which line of which page must show it, and how it is written.
Every table row of docs/benchmarks.md with a figure in seconds must name its raw file, and that file must
exist. scripts/test.sh runs this (no build needed, standard library only); --list prints each figure with
its value.
"""
import argparse
import json
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


class Raw:
    """The raw files under ROOT/bench/results, each read once."""

    def __init__(self, root):
        self.dir = os.path.join(root, "bench", "results")
        self.cache = {}

    def __call__(self, name):
        if name not in self.cache:
            with open(os.path.join(self.dir, name)) as f:
                self.cache[name] = json.load(f)
        return self.cache[name]


def dig(obj, path):
    for p in path:
        obj = obj[p]
    return obj


def values(raw, name, path, key, keep=None):
    """The value of KEY in each kill of the list at PATH of raw file NAME (kills with an error left out;
    keep(kill) filters further)."""
    ks = [k for k in dig(raw(name), path) if "error" not in k and (keep is None or keep(k))]
    v = [k[key] for k in ks if isinstance(k.get(key), (int, float))]
    if not v:
        raise ValueError(f"{name}: no {key} at {'/'.join(map(str, path))}")
    return v


def med(v):
    return statistics.median(v)


def fmt_s(x, nd=2):
    return f"{x:.{nd}f} s"


def rng(v, nd=2):
    lo, hi = f"{min(v):.{nd}f}", f"{max(v):.{nd}f}"
    return f"{lo} s" if lo == hi else f"{lo}-{hi} s"


def med_max(v, nd=2):
    return f"{med(v):.{nd}f} s ({max(v):.{nd}f})"


# --- the figures: name -> a function of the raw files giving the text as the pages write it ----------------
ARENA20 = "vshape-arena20-h200-8b-2026-12-03.json"
SNAP_B = "vshape-snapshot-arena-b-h200-8b-2026-12-03.json"
VSHAPE = "vshape-h200-8b-2026-12-02.json"
ARENA_A = "vshape-arena-h200-8b-2026-12-03.json"
SOCKET = "socket-h200-8b-2026-12-02.json"
E2E = "e2e-h200-2026-11-30.json"
STANDBY = "standby-h200-2026-12-01.json"
# The kill clock on the H100 (2026-12-06): call a (snapshot, warm, cold) and call b (the arena standby, pre_gpu)
KC = "vshape-killclock-h100-13e52d9-2026-12-06/"
KC_A, KC_B = KC + "a-vshape-results.json", KC + "b-vshape-results.json"
KC_PATHS = {"arena": (KC_B, "warmed_arena"), "snap": (KC_A, "snapshot_arena"), "pre_gpu": (KC_B, "pre_gpu"),
            "warm": (KC_A, "warm"), "cold": (KC_A, "cold")}
CPU_DATE = "2026-12-03"
CPU_PATHS = ("warmed_arena", "warmed", "pre_gpu", "warm", "cold")


def vs(path):
    return [path, "cycles", "kills"]


def sock(raw, listen, path, key):
    runs = [r for r in raw(SOCKET)["runs"] if r["listen"] == listen and r["path"] == path]
    return [k[key] for r in runs for k in r["kills"] if k.get(key) is not None]


def cpu_file(path):
    return f"kill-clock-cpu-{CPU_DATE}-{path}.json"


def cpu_summary(raw, path, key):
    return raw(cpu_file(path))["summary"][key]


FIGURES = {
    # the vLLM-shaped engine on the H200: kill(2) to READY seen by the bench (an upper bound), the reap figure
    "arena20.kill": lambda r: "≤ " + med_max(values(r, ARENA20, vs("warmed_arena"), "kill_to_ready_seen_s")),
    "arena20.kill.median": lambda r: "≤ " + fmt_s(med(values(r, ARENA20, vs("warmed_arena"), "kill_to_ready_seen_s"))),
    "arena20.n": lambda r: f"| {len(dig(r(ARENA20), vs('warmed_arena')))} |",
    "arena20.reap": lambda r: fmt_s(med(values(r, ARENA20, vs("warmed_arena"), "death_to_ready_s"))),
    "arena20.reap_to_release": lambda r: "release " + fmt_s(med(
        [k["last_release"]["death_to_release_s"] for k in dig(r(ARENA20), vs("warmed_arena"))]), 3),
    "arena20.lease_wait": lambda r: "lease wait " + fmt_s(med(
        [k["oracle"]["standby"]["kv_arena_wait_s"] for k in dig(r(ARENA20), vs("warmed_arena"))]), 3),
    "arena20.swap_in": lambda r: "`swap_in` " + fmt_s(med(
        [k["oracle"]["standby"]["kv_arena_swap_in_s"] for k in dig(r(ARENA20), vs("warmed_arena"))]), 3),
    "arena20.release_to_ready": lambda r: "release to READY " + fmt_s(med(
        [k["last_release"]["release_to_ready_s"] for k in dig(r(ARENA20), vs("warmed_arena"))])),
    "snapB.kill": lambda r: "≤ " + med_max(values(r, SNAP_B, vs("snapshot_arena"), "kill_to_ready_seen_s")),
    "snapB.kill.median": lambda r: "≤ " + fmt_s(med(values(r, SNAP_B, vs("snapshot_arena"), "kill_to_ready_seen_s"))),
    "snapB.reap": lambda r: fmt_s(med(values(r, SNAP_B, vs("snapshot_arena"), "death_to_ready_s"))),
    "pre_gpu.kill": lambda r: "≤ " + fmt_s(med(values(r, VSHAPE, vs("pre_gpu"), "kill_to_ready_seen_s"))),
    "pre_gpu.reap": lambda r: fmt_s(med(values(r, VSHAPE, vs("pre_gpu"), "death_to_ready_s"))),
    "warmed.kill": lambda r: "≤ " + fmt_s(med(values(r, VSHAPE, vs("warmed"), "kill_to_ready_seen_s"))),
    "warmed.reap": lambda r: fmt_s(med(values(r, VSHAPE, vs("warmed"), "death_to_ready_s"))),
    "warm.kill": lambda r: "≤ " + fmt_s(med(values(r, VSHAPE, vs("warm"), "kill_to_ready_seen_s"))),
    "warm.reap": lambda r: fmt_s(med(values(r, VSHAPE, vs("warm"), "death_to_ready_s"))),
    "cold.kill": lambda r: "≤ " + fmt_s(med(values(r, ARENA_A, vs("cold"), "kill_to_ready_seen_s"))),
    "cold.reap": lambda r: fmt_s(med(values(r, ARENA_A, vs("cold"), "death_to_ready_s"))),
    # a client across the kill (socket_restart.py; gap_s: kill to the end of the first answered request
    # sent after the kill)
    "sock.warmed.answer": lambda r: rng(sock(r, "supervisor", "warmed", "gap_s")),
    "sock.warmed.sent": lambda r: "(" + rng(sock(r, "supervisor", "warmed", "first_ok_started_after_s")) + ")",
    "sock.warmed.ready": lambda r: "≤ " + rng(sock(r, "supervisor", "warmed", "kill_to_ready_seen_s")),
    "sock.pre_gpu.answer": lambda r: rng(sock(r, "supervisor", "pre_gpu", "gap_s")),
    "sock.pre_gpu.ready": lambda r: "≤ " + rng(sock(r, "supervisor", "pre_gpu", "kill_to_ready_seen_s")),
    "sock.warm.answer": lambda r: rng(sock(r, "supervisor", "warm", "gap_s")),
    "sock.warm.ready": lambda r: "≤ " + rng(sock(r, "supervisor", "warm", "kill_to_ready_seen_s")),
    "sock.engine.warmed": lambda r: "`warmed` " + rng(sock(r, "engine", "warmed", "gap_s")),
    "sock.engine.pre_gpu": lambda r: "`pre_gpu`\n" + rng(sock(r, "engine", "pre_gpu", "gap_s")),
    "sock.engine.warm": lambda r: "warm " + rng(sock(r, "engine", "warm", "gap_s")),
    "sock.refused": lambda r: "| " + str(max(k["refused"] for x in r(SOCKET)["runs"] if x["listen"] == "supervisor"
                                             for k in x["kills"])) + " |",
    # other H200 figures
    "e2e.tiny.kill": lambda r: "≤ " + med_max(values(r, E2E, ["tinyengine", "warm_kill9"], "kill_to_ready_seen_s")),
    "e2e.tiny.kill.median": lambda r: "≤ " + fmt_s(med(values(r, E2E, ["tinyengine", "warm_kill9"], "kill_to_ready_seen_s"))),
    "e2e.tiny.reap": lambda r: fmt_s(med(values(r, E2E, ["tinyengine", "warm_kill9"], "death_to_ready_s"))),
    "standby.warmed.kill": lambda r: "≤ " + med_max(values(r, STANDBY, ["runs_same_lease", "ref-warmed", "kills"], "kill_to_ready_seen_s")),
    "standby.warmed.reap": lambda r: fmt_s(med(values(r, STANDBY, ["runs_same_lease", "ref-warmed", "kills"], "death_to_ready_s"))),
    "standby.pre_gpu.kill": lambda r: "≤ " + med_max(values(r, STANDBY, ["runs_same_lease", "ref-pre_gpu", "kills"], "kill_to_ready_seen_s")),
    "standby.pre_gpu.reap": lambda r: fmt_s(med(values(r, STANDBY, ["runs_same_lease", "ref-pre_gpu", "kills"], "death_to_ready_s"))),
    "standby.warm.kill": lambda r: "≤ " + med_max(values(r, STANDBY, ["runs_same_lease", "ref-warm", "kills"], "kill_to_ready_seen_s")),
    "standby.warm.reap": lambda r: fmt_s(med(values(r, STANDBY, ["runs_same_lease", "ref-warm", "kills"], "death_to_ready_s"))),
    "standby.tiny_cold.kill": lambda r: "≤ " + fmt_s(med(values(r, STANDBY, ["runs_earlier_lease", "tiny-cold", "kills"], "kill_to_ready_seen_s"))),
}


def kc(r, name, key):
    f, path = KC_PATHS[name]
    return values(r, f, vs(path), key)


def kc_cell(r, name, key):
    """'median s (max)' over several kills, the one value of a single kill."""
    v = kc(r, name, key)
    return med_max(v) if len(v) > 1 else fmt_s(v[0])


for _n in KC_PATHS:
    FIGURES[f"kc.{_n}.ready"] = (lambda n: lambda r: kc_cell(r, n, "kill_to_ready_s"))(_n)
    FIGURES[f"kc.{_n}.answer"] = (lambda n: lambda r: kc_cell(r, n, "kill_to_first_answer_s"))(_n)
    FIGURES[f"kc.{_n}.ready.median"] = (lambda n: lambda r: "| " + fmt_s(med(kc(r, n, "kill_to_ready_s"))) + " |")(_n)
    FIGURES[f"kc.{_n}.answer.median"] = (lambda n: lambda r: fmt_s(med(kc(r, n, "kill_to_first_answer_s"))) + " |")(_n)
    FIGURES[f"kc.{_n}.n"] = (lambda n: lambda r: f"| {len(kc(r, n, 'kill_to_ready_s'))} |")(_n)
    FIGURES[f"kc.{_n}.reap"] = (lambda n: lambda r: fmt_s(med(kc(r, n, "kill_to_reap_s")), 3))(_n)
FIGURES["kc.arena.reap_to_release"] = lambda r: "release " + fmt_s(med(kc(r, "arena", "reap_to_release_s")), 3)
FIGURES["kc.arena.lease_wait"] = lambda r: "lease wait " + fmt_s(med(kc(r, "arena", "kv_arena_wait_s")), 3)
FIGURES["kc.arena.swap_in"] = lambda r: "`swap_in` " + fmt_s(med(kc(r, "arena", "kv_arena_swap_in_s")), 3)
FIGURES["kc.arena.release_to_ready"] = lambda r: "release → READY " + fmt_s(med(kc(r, "arena", "release_to_ready_s")))


def cpu_cell(key):
    def f(r, path):
        s = cpu_summary(r, path, key)
        return f"{s['median']:.2f} s ({s['max']:.2f})"
    return f


for _p in CPU_PATHS:
    FIGURES[f"cpu.{_p}.kill"] = (lambda p: lambda r: cpu_cell("kill_to_ready_s")(r, p))(_p)
    FIGURES[f"cpu.{_p}.answer"] = (lambda p: lambda r: cpu_cell("kill_to_first_answer_s")(r, p))(_p)
    FIGURES[f"cpu.{_p}.reap"] = (lambda p: lambda r: f"{cpu_summary(r, p, 'kill_to_reap_s')['median']:.3f} s")(_p)
    FIGURES[f"cpu.{_p}.from_reap"] = (lambda p: lambda r: f"{cpu_summary(r, p, 'reap_to_ready_s')['median']:.2f} s")(_p)
    FIGURES[f"cpu.{_p}.n"] = (lambda p: lambda r: f"| {cpu_summary(r, p, 'kill_to_ready_s')['n']} |")(_p)

SOCKET_CPU = f"socket-restart-cpu-{CPU_DATE}.json"


def sock_cpu(raw, listen, path, key):
    return [k[key] for r in raw(SOCKET_CPU)["runs"] if r["listen"] == listen and r["path"] == path for k in r["kills"]]


for _p in ("warmed", "pre_gpu", "warm", "cold"):
    FIGURES[f"cpu.sock.{_p}.ready"] = (lambda p: lambda r: "| " + rng(sock_cpu(r, "supervisor", p, "kill_to_ready_s")) + " |")(_p)
    FIGURES[f"cpu.sock.{_p}.answer"] = (lambda p: lambda r: rng(sock_cpu(r, "supervisor", p, "kill_to_first_answer_s")) + " | "
                                        + rng(sock_cpu(r, "engine", p, "kill_to_first_answer_s")) + " |")(_p)
    FIGURES[f"cpu.sock.{_p}.refused"] = (lambda p: lambda r: "| " + rng(sock_cpu(r, "engine", p, "refused"), 0)[:-2] + " |")(_p)
FIGURES["cpu.sock.refused_supervisor"] = lambda r: (
    "no connection was refused" if all(k["refused"] == 0 for x in r(SOCKET_CPU)["runs"] if x["listen"] == "supervisor"
                                       for k in x["kills"]) else "some were refused")

# --- where each figure is written: (page, a text naming its line, [figures]) ----------------------------------
BENCH = "docs/benchmarks.md"
CHECKS = [
    (BENCH, "| standby `warmed`, KV cache in the daemon's arena | ≤", ["arena20.kill", "arena20.n", "arena20.reap"]),
    (BENCH, "| CRIU snapshot, weights and KV cache left out | ≤", ["snapB.kill", "snapB.reap"]),
    (BENCH, "| standby `pre_gpu` | ≤", ["pre_gpu.kill", "pre_gpu.reap"]),
    (BENCH, "| standby `warmed`, no arena |", ["warmed.kill", "warmed.reap"]),
    (BENCH, "| new engine process, weights from the daemon | ≤", ["warm.kill", "warm.reap"]),
    (BENCH, "| new engine process, `restart.start = [\"cold\"]` | ≤", ["cold.kill", "cold.reap"]),
    (BENCH, "Breakdown of the arena path (the 20 kills", ["arena20.reap_to_release", "arena20.lease_wait", "arena20.swap_in",
                                            "arena20.release_to_ready"]),
    (BENCH, "| standby `warmed` | 0.", ["sock.warmed.answer", "sock.warmed.sent", "sock.warmed.ready", "sock.refused"]),
    (BENCH, "| standby `pre_gpu` | 0.", ["sock.pre_gpu.answer", "sock.pre_gpu.ready"]),
    (BENCH, "| new engine process, weights from the daemon | 11.", ["sock.warm.answer", "sock.warm.ready"]),
    (BENCH, "binding the port itself", ["sock.engine.warmed", "sock.engine.pre_gpu", "sock.engine.warm"]),
    (BENCH, "| C++ tiny engine, 16 GB, weights from the daemon |", ["e2e.tiny.kill", "e2e.tiny.reap"]),
    (BENCH, "| PyTorch engine, one request at a time, standby `warmed` |", ["standby.warmed.kill", "standby.warmed.reap"]),
    (BENCH, "| the same, standby `pre_gpu` |", ["standby.pre_gpu.kill", "standby.pre_gpu.reap"]),
    (BENCH, "| the same, new process, weights from the daemon |", ["standby.warm.kill", "standby.warm.reap"]),
    # the kill clock on the H100: benchmarks.md's table and breakdown, the README's table
    (BENCH, "Breakdown of the arena path (the 10 kills", ["kc.arena.reap", "kc.arena.reap_to_release",
                                                           "kc.arena.lease_wait", "kc.arena.swap_in",
                                                           "kc.arena.release_to_ready"]),
] + [(BENCH, marker, [f"kc.{n}.ready", f"kc.{n}.answer", f"kc.{n}.n", f"kc.{n}.reap"]) for n, marker in (
    ("arena", "| standby `warmed`, KV cache in the daemon's arena | 0."),
    ("snap", "| CRIU snapshot, weights and KV cache left out | 2."),
    ("pre_gpu", "| standby `pre_gpu` | 6."),
    ("warm", "| new engine process, weights from the daemon | 16."),
    ("cold", "| new engine process, `restart.start = [\"cold\"]` | 17."))
] + [("README.md", marker, [f"kc.{n}.ready.median", f"kc.{n}.answer.median"]) for n, marker in (
    ("arena", "| standby `warmed`, KV cache in the weight daemon's arena |"),
    ("snap", "| CRIU snapshot, weights and KV cache left out |"),
    ("pre_gpu", "| standby `pre_gpu` (parked before the GPU) |"),
    ("warm", "| new engine process, weights from the weight daemon |"),
    ("cold", "| new engine process, weight daemon reloaded from disk |"))
] + [
    (BENCH, "With fastrestartd owning the port no connection", ["cpu.sock.refused_supervisor"]),
] + [(BENCH, f"| `{p}`, 4 clients |", [f"cpu.sock.{p}.ready", f"cpu.sock.{p}.answer", f"cpu.sock.{p}.refused"])
     for p in ("warmed", "pre_gpu", "warm", "cold")] + [(BENCH, f"| `{p}` |", [f"cpu.{p}.kill", f"cpu.{p}.answer", f"cpu.{p}.n", f"cpu.{p}.reap", f"cpu.{p}.from_reap"])
     for p in CPU_PATHS]


def block(lines, i, marker):
    """The text a marker names: its line, and for a paragraph (not a table row) the lines up to the next
    blank line, joined with newlines."""
    if lines[i].lstrip().startswith("|"):
        return lines[i]
    j = i
    while j + 1 < len(lines) and lines[j + 1].strip():
        j += 1
    return "\n".join(lines[i:j + 1])


def check(root):
    raw = Raw(root)
    errors, pages = [], {}
    for page, marker, figs in CHECKS:
        if page not in pages:
            with open(os.path.join(root, page)) as f:
                pages[page] = f.read().splitlines()
        lines = pages[page]
        at = [i for i, line in enumerate(lines) if marker in line]
        if len(at) != 1:
            errors.append(f"{page}: {len(at)} lines contain {marker!r} (one expected)")
            continue
        text = block(lines, at[0], marker)
        flat = text.replace("\n", " ")
        for name in figs:
            try:
                want = FIGURES[name](raw)
            except (OSError, KeyError, ValueError, IndexError, TypeError) as e:
                errors.append(f"{page}:{at[0] + 1}: {name}: its raw file cannot give it: {type(e).__name__}: {e}")
                continue
            if want not in text and want.replace("\n", " ") not in flat:
                errors.append(f"{page}:{at[0] + 1}: {name} is {want!r} in its raw file; the line says: {lines[at[0]].strip()[:160]}")
    # every table row of the reader's page with a figure in seconds names an existing raw file
    for i, line in enumerate(pages.get(BENCH, [])):
        if line.startswith("|") and re.search(r"\d s\b", line):
            files = re.findall(r"`([\w./+-]+\.json)`", line)
            section = next((lines_ for lines_ in reversed(pages[BENCH][:i]) if lines_.startswith("## ")), "")
            if section.startswith("## How a restart"):
                continue
            if not files:
                errors.append(f"{BENCH}:{i + 1}: a row with figures and no raw file: {line[:120]}")
            for f in files:
                if not os.path.exists(os.path.join(root, "bench", "results", f)):
                    errors.append(f"{BENCH}:{i + 1}: raw file bench/results/{f} does not exist")
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(HERE))
    ap.add_argument("--list", action="store_true", help="print every figure as its raw file gives it")
    a = ap.parse_args()
    if a.list:
        raw = Raw(a.root)
        for name, f in FIGURES.items():
            try:
                print(f"{name}: {f(raw)!r}")
            except (OSError, KeyError, ValueError, IndexError, TypeError) as e:
                print(f"{name}: ERROR {type(e).__name__}: {e}")
        return 0
    errors = check(a.root)
    for e in errors:
        print(f"check_figures: {e}", file=sys.stderr)
    if errors:
        print(f"check_figures: {len(errors)} figure(s) differ from bench/results", file=sys.stderr)
        return 1
    print(f"check_figures: {len(CHECKS)} lines, every figure equal to its raw file")
    return 0


if __name__ == "__main__":
    sys.exit(main())

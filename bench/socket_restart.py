#!/usr/bin/env python3
"""What a client sees across a kill -9 of the engine, with the listening socket owned by the engine and by
fastrestartd (issue 29; docs/bench-notes.md, "No refused connection across a restart").

fastrestartd supervises an engine: --engine tiny (default), fastrestart-tinyengine on the CPU with a host
weight daemon; --engine ref, the PyTorch reference engine (python/refengine) on GPU 0 with a CUDA weight
daemon, as bench/gpu_standby.sh runs it (--checkpoint: a Llama directory, e.g. bench/gen_llama_checkpoint.py
--shape 8b; --ref-flags: its engine flags, by default the single-request engine, --max-num-seqs 1
--enforce-eager). A load generator outside the engine (N client threads, each sending completions back to
back through http.client, a new connection per request) runs while the engine is killed with -9 K times,
for each listen mode (engine.listen = "engine": the engine binds the port; "supervisor": fastrestartd binds
it once and passes it down) and each start path:

  cold     weights.mode = "off": the engine reads the checkpoint from disk (page cache warm)
  warm     a weight daemon holds the weights: the engine attaches them
  pre_gpu  a standby parked at its pre_gpu gate is released (start = ["standby", "warm", "cold"])
  warmed   a standby parked at its warmed gate (weights attached, warm-up forward done) is released

--startup-delay (tinyengine --fault-startup-delay) stands for the work before the pre_gpu gate that a real
engine does on every start (imports, config: 14 s for the 16 GB PyTorch engine on the H200); the reference
engine does that work itself.

Runs go path by path, each path in every listen mode before the next path, so that a run cut by the time
budget still leaves whole comparisons. --kills-per-path (e.g. warmed=3,pre_gpu=2,warm=1) sets the paths and
their kill counts (--kills and --paths otherwise). --budget-s: a run that would not fit in what is left
(its time estimated from the same path's earlier run, else from a prior per engine and path) is skipped,
and a run stops killing when its next kill would not fit; both are said in the output and the JSON.

Per kill: requests refused; failed requests by kind (refused, reset, timeout, http_<code>), split into those
in flight in the killed process and those that started after the kill; the service gap (kill to the end of
the first successful request that started after it, and when that request started); and the latency of the
requests that started between the kill and the READY, against the median under the same load before the
first kill. Needs fastrestartd, fastrestartctl, fastrestart-weightd and, for --engine tiny,
fastrestart-tinyengine (--bin: a build tree or a folder holding them, such as the GPU bundle's bin/; else
on PATH).

    bench/socket_restart.py --out DIR [--bin BUILD] [--engine tiny|ref] [--checkpoint DIR] [--kills 3]
                            [--kills-per-path PATH=N,...] [--clients 4] [--listen engine,supervisor]
                            [--paths cold,warm,pre_gpu,warmed] [--budget-s S] [--size 64M]
                            [--startup-delay 1.0] [--chart-path warm[,PATH...]] [--print-config]
Writes DIR/socket_restart.json and DIR/socket_restart.md (the table rows) after every run, DIR/logs/
(each run's config and fastrestartd's log, with the engine's output) and, per --chart-path, an SVG of the
requests over time around that path's first kill, per listen mode: DIR/socket_restart.svg for one chart
path, DIR/socket_restart-PATH.svg for several. --print-config prints each run's fastrestartd config and
exits (nothing is started).
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import fastrestartd_run as fr
from fastrestartd_run import PROMPT, REFENGINE_WEIGHTS_KEY, free_port, log

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REFENGINE = os.path.join(ROOT, "python", "refengine", "fastrestart_refengine.py")
PATHS = ("cold", "warm", "pre_gpu", "warmed")
BODY = json.dumps({"model": "t", "prompt": PROMPT, "max_tokens": 4}).encode()

# The time budget's priors, s, until the same path has run once (then its measured times are used): "first",
# fastrestartd's start to the steady state (ready, and the standby parked); "kill", one kill to the next
# steady state; "stop", fastrestartd's stop. The reference engine's from the H200 (docs/bench-notes.md,
# "Standby engines": a warm start 16.5 s, a standby parks ~16 s after its spawn; the first start also loads
# the 16 GB checkpoint into the daemon).
PRIORS = {
    "tiny": {"first": {"cold": 8, "warm": 8, "pre_gpu": 10, "warmed": 10},
             "kill": {"cold": 5, "warm": 5, "pre_gpu": 6, "warmed": 6}, "stop": 3},
    "ref": {"first": {"cold": 60, "warm": 50, "pre_gpu": 75, "warmed": 75},
            "kill": {"cold": 40, "warm": 22, "pre_gpu": 20, "warmed": 20}, "stop": 10},
}


class Terminated(Exception):
    """SIGTERM (the caller's timeout): the running run stops, keeps what it measured, and no run follows."""


def on_sigterm(*_):
    raise Terminated("SIGTERM")


# --- the load generator: fastrestartd_run.Prober (N clients sending completions back to back) -------------


# --- fastrestartd ------------------------------------------------------------------------------------------
def config_toml(a, listen, path, port, d, ckpt):
    """The fastrestartd config of one run (its files under d): engine "t" on 127.0.0.1:port."""
    warm = path != "cold"
    run = os.path.join(d, "run")
    flags = ["--host", "127.0.0.1", "--port", str(port), "--served-model-name", "t",
             "--load-format", "fastrestart" if warm else "disk", "--fastrestart-socket-dir", run]
    weights = {"mode": "zero_copy" if warm else "off", "checkpoint": ckpt, "daemon_path": a.which["fastrestart-weightd"]}
    if a.engine == "ref":
        # bench/gpu_standby.sh's config() for the reference engine: its flags in the command, GPU 0, CUDA daemon
        command = [a.python, REFENGINE, "serve", ckpt] + a.ref_flags.split()
        top, grace, check = {"gpus": a.gpus}, 20, 30
        weights.update(backend="cuda", key=REFENGINE_WEIGHTS_KEY if warm else None)
    else:
        command = [a.which["fastrestart-tinyengine"], "serve", ckpt]
        flags += ["--shutdown-grace", "2", "--fault-startup-delay", str(a.startup_delay)]
        top, grace, check = {}, 5, 5
        weights.update(backend="host")
    start = {"cold": ["cold"], "warm": ["warm", "cold"]}.get(path, ["standby", "warm", "cold"])
    engine = {"stop_grace_s": grace}
    if listen == "supervisor":
        engine.update(listen="supervisor", listen_backlog=a.backlog)
    return fr.supervisor_config(
        d, "t", command, flags, port, weights, top=top, engine=engine,
        readiness={"check_interval_s": check, "startup_timeout_s": 300},
        restart={"warm_failures_before_cold": 0, "start": start},
        **({"standby": {"level": path}} if path in ("pre_gpu", "warmed") else {}))


# An engine exit that the bench's kill -9 did not cause: the engine cannot start (fastrestartd would go on
# restarting it until the run's time is spent).
CRASH = re.compile(r"engine pid \d+ exited: (?!crash \(signal 9 )")


def crashes(logpath):
    """How often the engine exited in a run other than by the bench's kill -9 or a requested stop, and its
    last line of output before the latest such exit (fastrestartd's log at LOGPATH)."""
    with open(logpath, errors="replace") as f:
        lines = f.read().splitlines()
    n, last, said = 0, None, None
    for line in lines:
        if "[engine]" in line:
            said = line.split("[engine]", 1)[1].strip()
        elif CRASH.search(line) and "as requested" not in line:
            n, last = n + 1, said
    return n, last


def launcher(work, listen, path, a, ckpt):
    """The fastrestartd of one run (fastrestartd_run.Fastrestartd, not started), its engine on a free port
    (.port)."""
    d = os.path.join(work, f"{listen}-{path}")
    shutil.rmtree(d, ignore_errors=True)
    port = free_port()
    sup = fr.Fastrestartd(d, config_toml(a, listen, path, port, d, ckpt), fr.control_socket(d),
                          fastrestartd=a.which["fastrestartd"], fastrestartctl=a.which["fastrestartctl"])
    sup.port = port
    return sup


def wait(sup, pred, what, timeout):
    """sup.wait, ending at once when the engine has exited twice on its own (naming its last output)."""
    where = f"its log: logs/{os.path.basename(sup.dir)}/fastrestartd.log"
    next_check = [0.0]

    def between():
        if time.monotonic() < next_check[0]:  # the log is read twice a second, not on every poll
            return
        next_check[0] = time.monotonic() + 0.5
        n, said = crashes(sup.logpath)
        if n >= 2:
            raise RuntimeError(f"the engine exited {n} times on its own (waiting for {what}); its last output: "
                               f"{said!r}; {where}")

    return sup.wait(pred, what, timeout, between)


def ready_with(path):
    """The status predicate of a steady state for `path`: ready, and with a standby path its standby parked."""
    def pred(st):
        if st.get("state") != "ready" or not (st.get("engine") or {}).get("pid"):
            return False
        if path in ("pre_gpu", "warmed"):
            sb = st.get("standby") or {}
            return sb.get("state") == "parked" and sb.get("pid") != st["engine"]["pid"]
        return True
    return pred


# --- one run: a listen mode, a start path, K kills ------------------------------------------------------------
def run_one(a, work, listen, path, ckpt, kills, deadline, est):
    """K kills of one run; before each, a kill whose cycle (est["kill"]) and the stop would end past
    `deadline` (time.monotonic()) is not made, and res["cut"] says so. res["timing"]: the run's measured
    first (start to the steady state) and kill cycle times, for the next run's estimate."""
    sup = launcher(work, listen, path, a, ckpt)
    res = {"listen": listen, "path": path, "kills": [], "kills_asked": kills}
    why = sup.check()
    if why is not None:
        res["skipped"] = why
        return res, []

    def timeout():  # a wait ends at the deadline (a run never outlives the budget by more than its stop)
        return max(5.0, min(a.ready_timeout, deadline - time.monotonic() - est["stop"]))

    t_start = time.monotonic()
    sup.start()
    load = None
    cycles = []
    try:
        st = wait(sup, ready_with(path), "ready engine" + (" and parked standby" if path in ("pre_gpu", "warmed") else ""),
                      timeout())
        res["timing"] = {"first_s": round(time.monotonic() - t_start, 2)}
        load = fr.Prober(sup.port, BODY, a.clients, a.timeout, a.retry_pause)
        load.start()
        time.sleep(a.steady_s)
        res["steady_until"] = time.monotonic()
        for i in range(kills):
            guess = cycles and max(cycles) or est["kill"]
            if time.monotonic() + guess + est["stop"] > deadline:
                res["cut"] = (f"{i} of {kills} kills: the time budget (the next kill's cycle takes about {guess:.0f} s, "
                              f"{deadline - time.monotonic():.0f} s left)")
                log(f"{listen}/{path}: {res['cut']}")
                break
            pid = st["engine"]["pid"]
            clock = fr.KillClock(pid).kill()
            t_kill = clock.t_kill
            st = wait(sup, lambda s: s.get("state") == "ready" and (s.get("engine") or {}).get("pid") not in (None, pid),
                      f"READY after kill #{i + 1}", timeout())
            t_ready = time.monotonic()
            k = clock.ready(st, t_ready)
            k.update(t_kill=t_kill, t_ready_seen=t_ready)
            res["kills"].append(k)
            log(f"{listen}/{path} kill #{i + 1}: kill to READY {k.get('kill_to_ready_s')} s (seen after "
                f"{t_ready - t_kill:.3f} s, path {k.get('path')})")
            st = wait(sup, ready_with(path), "steady state", timeout())  # the next standby parked
            time.sleep(a.between_s)
            cycles.append(time.monotonic() - t_kill)
            res["timing"]["kill_cycle_s"] = [round(c, 2) for c in cycles]
    except Exception as e:  # keep the kills measured so far; the row and the exit status say it failed
        res["error"] = f"{type(e).__name__}: {e}"
        log(f"{listen}/{path}: {res['error']}")
    finally:
        records = load.finish() if load is not None else []
        t_stop = time.monotonic()
        sup.stop()
        if "timing" in res:
            res["timing"]["stop_s"] = round(time.monotonic() - t_stop, 2)
        keep = os.path.join(a.out, "logs", f"{listen}-{path}")
        os.makedirs(keep, exist_ok=True)
        for f in (sup.config, sup.logpath):
            if os.path.exists(f):
                shutil.copy(f, keep)
    return res, records


def analyse(res, records):
    """Fills res with the per-kill figures from the request records."""
    if not res["kills"]:
        return res
    base = [r.ended - r.sent for r in records if r.outcome == "ok" and r.ended < res["kills"][0]["t_kill"]]
    base_median = statistics.median(base) if base else None
    res["baseline"] = {"requests": len(base), "median_latency_s": round(base_median, 4) if base else None}
    # A kill's window ends at the next kill; a request still running then is the next kill's (in flight).
    ends = [k["t_kill"] for k in res["kills"][1:]] + [float("inf")]
    for k, end in zip(res["kills"], ends):
        tk, tr = k["t_kill"], k["t_ready_seen"]
        in_flight = [r for r in records if r[0] < tk <= r[1]]
        after = [r for r in records if tk <= r[0] and r[1] < end]
        failed_after = {}
        for r in after:
            if r.outcome != "ok":
                failed_after[r.outcome] = failed_after.get(r.outcome, 0) + 1
        during = [r[1] - r[0] for r in after if r[0] <= tr and r[2] == "ok"]
        k.update(fr.first_answers(records, tk, end))
        fr.ready_vs_first_byte(k)
        k.update({
            "in_flight": len(in_flight),
            "in_flight_failed": {o: sum(1 for r in in_flight if r[2] == o) for o in sorted({r[2] for r in in_flight}) if o != "ok"},
            "refused": failed_after.get("refused", 0),
            "failed_after_kill": failed_after,
            "during_restart_ok": len(during),
            "during_restart_max_latency_s": round(max(during), 4) if during else None,
            "during_restart_max_excess_s": round(max(during) - base_median, 4) if during and base_median else None,
        })
    return res


def md_rows(runs):
    def rng(xs, fmt="{:.2f}"):
        xs = [x for x in xs if x is not None]
        if not xs:
            return "-"
        lo, hi = min(xs), max(xs)
        return fmt.format(lo) if lo == hi else (fmt + "-" + fmt).format(lo, hi)

    rows = ["| listen | path | kills | kill -> READY s | kill -> first answer s (its request sent after, s) | "
            "refused per kill | failed after the kill (by kind) | in flight, failed | "
            "during the restart: max latency s (over median) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        if r.get("skipped"):
            rows.append(f"| {r['listen']} | {r['path']} | not run: {r['skipped'][:120]} | | | | | | |")
            continue
        ks = [k for k in r["kills"] if "in_flight" in k]
        done = str(len(ks))
        if len(ks) < r.get("kills_asked", len(ks)):
            done += f" of {r['kills_asked']} ({'time budget' if r.get('cut') else 'error'})"
        if r.get("error"):
            done += f"; error: {r['error'][:100]}"
        kinds = {}
        for k in ks:
            for o, n in k["failed_after_kill"].items():
                kinds.setdefault(o, []).append(n)
        failed = ", ".join(f"{o} {rng(v, '{:d}')}" for o, v in sorted(kinds.items()) if o != "refused") or "0"
        inflight = [sum(k["in_flight_failed"].values()) for k in ks]
        med = r.get("baseline", {}).get("median_latency_s")
        rows.append(f"| {r['listen']} | {r['path']} | {done} | {rng([k.get('kill_to_ready_s') for k in ks])} | "
                    f"{rng([k['kill_to_first_answer_s'] for k in ks])} ({rng([k['first_answer_sent_after_s'] for k in ks])}) | "
                    f"{rng([k['refused'] for k in ks], '{:d}')} | {failed} | {rng(inflight, '{:d}')} | "
                    f"{rng([k['during_restart_max_latency_s'] for k in ks])} ({rng([k['during_restart_max_excess_s'] for k in ks], '{:+.2f}')}; median {med}) |")
    return "\n".join(rows) + "\n"


# --- the chart: requests over time around one kill, an SVG written by hand (no matplotlib needed) -----------
COLORS = {"ok": "#4c72b0", "refused": "#d62728", "reset": "#ff7f0e", "timeout": "#9467bd"}


def svg_chart(panels, out, before=1.0, after=4.0):
    """panels: [(title, records, t_kill, t_ready_seen)]; each request a dot at (start - kill, latency), its
    colour its outcome; a line at the kill and at the READY."""
    w, ph, ml, mr, mt, gap = 760, 190, 60, 130, 28, 40
    h = mt + len(panels) * (ph + gap)
    lat_max = max([r[1] - r[0] for _, recs, tk, _ in panels for r in recs if -before <= r[0] - tk <= after] + [0.1])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
             '<rect width="100%" height="100%" fill="white"/>']
    pw = w - ml - mr
    for i, (title, recs, tk, tr) in enumerate(panels):
        y0 = mt + i * (ph + gap)
        x = lambda t: ml + (t + before) / (before + after) * pw  # noqa: E731
        y = lambda v: y0 + ph - v / lat_max * ph  # noqa: E731
        parts.append(f'<text x="{ml}" y="{y0 - 8}" font-weight="bold">{title}</text>')
        parts.append(f'<rect x="{ml}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
        for t in range(-int(before), int(after) + 1):
            parts.append(f'<line x1="{x(t):.1f}" y1="{y0 + ph}" x2="{x(t):.1f}" y2="{y0 + ph + 4}" stroke="#888"/>'
                         f'<text x="{x(t):.1f}" y="{y0 + ph + 15}" text-anchor="middle">{t}</text>')
        for frac in (0, 0.5, 1):
            parts.append(f'<text x="{ml - 6}" y="{y(lat_max * frac) + 4:.1f}" text-anchor="end">{lat_max * frac:.2f}</text>')
        parts.append(f'<line x1="{x(0):.1f}" y1="{y0}" x2="{x(0):.1f}" y2="{y0 + ph}" stroke="black" stroke-dasharray="4 3"/>'
                     f'<text x="{x(0) + 3:.1f}" y="{y0 + 11}">kill -9</text>')
        if tr is not None and tr - tk <= after:
            parts.append(f'<line x1="{x(tr - tk):.1f}" y1="{y0}" x2="{x(tr - tk):.1f}" y2="{y0 + ph}" stroke="#2ca02c" '
                         f'stroke-dasharray="4 3"/><text x="{x(tr - tk) + 3:.1f}" y="{y0 + 24}" fill="#2ca02c">READY</text>')
        for t0, t1, o, _ in recs:
            if -before <= t0 - tk <= after:
                c = COLORS.get(o, "#d62728" if o.startswith("http_") else "#333")
                shape = "circle" if o == "ok" else "rect"
                if shape == "circle":
                    parts.append(f'<circle cx="{x(t0 - tk):.1f}" cy="{y(t1 - t0):.1f}" r="2" fill="{c}"/>')
                else:
                    parts.append(f'<rect x="{x(t0 - tk) - 2.5:.1f}" y="{y(t1 - t0) - 2.5:.1f}" width="5" height="5" fill="{c}"/>')
        ly = y0 + 10
        for o, c in list(COLORS.items()) + [("http 5xx", "#d62728")]:
            if o == "http 5xx" and not any(r[2].startswith("http_") for r in recs):
                continue
            parts.append(f'<rect x="{w - mr + 12}" y="{ly - 8}" width="8" height="8" fill="{c}"/>'
                         f'<text x="{w - mr + 24}" y="{ly}">{o}</text>')
            ly += 15
    parts.append(f'<text x="{ml + pw / 2}" y="{h - 8}" text-anchor="middle">request start - kill, s '
                 '(y: latency as the client measured it, s; squares: failed)</text>')
    parts.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


def parse_kills(a):
    """[(path, kills)] from --kills-per-path (PATH=N,...) or --paths and --kills; exits naming a bad entry."""
    if a.kills_per_path:
        plan = []
        for item in a.kills_per_path.split(","):
            path, _, n = item.partition("=")
            if path not in PATHS or not n.isdigit() or int(n) < 1:
                sys.exit(f"socket_restart: --kills-per-path: bad entry {item!r} (PATH=N, PATH one of {', '.join(PATHS)}, N >= 1)")
            plan.append((path, int(n)))
        return plan
    bad = [p for p in a.paths.split(",") if p not in PATHS]
    if bad:
        sys.exit(f"socket_restart: --paths: unknown path {bad[0]!r} (one of {', '.join(PATHS)})")
    return [(p, a.kills) for p in a.paths.split(",")]


def find_binaries(a):
    """a.which: each program from --bin (a build tree, or a folder holding the programs such as the GPU
    bundle's bin/), else PATH; exits naming one not found (with --print-config its name stands in)."""
    needed = [n for n in fr.PROGRAMS if a.engine == "tiny" or n != "fastrestart-tinyengine"]
    a.which = fr.find_programs(a.bin, needed)
    for name in needed:
        if not a.which[name]:
            if not a.print_config:
                sys.exit(f"socket_restart: {name} not found in {a.bin} (as a build tree or a folder) or on PATH")
            a.which[name] = name


def save(a, out):
    """socket_restart.json, and socket_restart.md with the rows in --listen then path order."""
    with open(os.path.join(a.out, "socket_restart.json"), "w") as f:
        json.dump(out, f, indent=1)
    lo, po = a.listen.split(","), [p for p, _ in a.plan]
    rows = md_rows(sorted(out["runs"], key=lambda r: (lo.index(r["listen"]), po.index(r["path"]))))
    with open(os.path.join(a.out, "socket_restart.md"), "w") as f:
        f.write(rows)
    return rows


def chart(a, out, records_of):
    """One SVG per --chart-path: the first kill of that path in each listen mode; the window reaches past
    the slowest READY of the panels. Each charted run keeps its records of the window (chart_records)."""
    paths = [p for p in a.chart_path.split(",") if p]
    for path in paths:
        panels, runs = [], [r for r in out["runs"] if r["path"] == path and r["kills"]]
        if not runs:
            continue
        after = max(4, int(max(r["kills"][0]["t_ready_seen"] - r["kills"][0]["t_kill"] for r in runs) + 2))
        for r in runs:
            k, records = r["kills"][0], records_of[(r["listen"], path)]
            panels.append((f"engine.listen = \"{r['listen']}\", {path} start", records, k["t_kill"], k["t_ready_seen"]))
            r["chart_records"] = [(round(t0 - k["t_kill"], 4), round(t1 - t0, 4), o) for t0, t1, o, _ in records
                                  if -1.0 <= t0 - k["t_kill"] <= after]
        name = "socket_restart.svg" if len(paths) == 1 else f"socket_restart-{path}.svg"
        svg_chart(panels, os.path.join(a.out, name), before=1.0, after=after)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build"),
                    help="a build tree with the programs, or a folder holding them (the GPU bundle's bin/)")
    ap.add_argument("--engine", choices=["tiny", "ref"], default="tiny",
                    help="tiny: fastrestart-tinyengine on the CPU; ref: the PyTorch reference engine on GPU 0")
    ap.add_argument("--checkpoint", help="the engine's checkpoint (required for ref; tiny: generated, --size)")
    ap.add_argument("--ref-flags", default="--max-num-seqs 1 --enforce-eager",
                    help="the reference engine's serve flags (default: the single-request engine, as gpu_standby.sh)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter of the reference engine")
    ap.add_argument("--gpus", default="0", help="fastrestartd's gpus with --engine ref, comma-separated")
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--kills-per-path", help="PATH=N,... (e.g. warmed=3,pre_gpu=2,warm=1): the paths, in order, "
                    "and their kills; overrides --paths and --kills")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--listen", default="engine,supervisor")
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--budget-s", type=float, default=0,
                    help="the whole run's time, s: runs and kills that would not fit are left out (0: none)")
    ap.add_argument("--size", default="64M", help="the tiny engine's checkpoint (fastrestart-tinyengine gen --size)")
    ap.add_argument("--startup-delay", type=float, default=1.0, help="the tiny engine's work before its pre_gpu gate, s")
    ap.add_argument("--backlog", type=int, default=1024, help="engine.listen_backlog with listen = supervisor")
    ap.add_argument("--timeout", type=float, help="the clients' timeout, s (tiny 30, ref 60: a warm start takes 17 s "
                    "and the requests queued behind it are served one at a time)")
    ap.add_argument("--retry-pause", type=float, default=0.05, help="a client's pause after a failed request, s")
    ap.add_argument("--steady-s", type=float, help="load before the first kill (the median), s (tiny 3, ref 6)")
    ap.add_argument("--between-s", type=float, default=1.5, help="load after each steady state before the next kill, s")
    ap.add_argument("--ready-timeout", type=float, help="s (tiny 120, ref 240)")
    ap.add_argument("--chart-path", default="warm",
                    help="the start paths whose first kill is charted (comma-separated: one SVG each)")
    ap.add_argument("--print-config", action="store_true", help="print each run's fastrestartd config and exit")
    a = ap.parse_args()
    ref = a.engine == "ref"
    a.timeout = a.timeout or (60.0 if ref else 30.0)
    a.steady_s = a.steady_s if a.steady_s is not None else (6.0 if ref else 3.0)
    a.ready_timeout = a.ready_timeout or (240.0 if ref else 120.0)
    a.gpus = [g for g in a.gpus.split(",") if g]
    a.plan = parse_kills(a)
    listens = a.listen.split(",")
    if any(m not in ("engine", "supervisor") for m in listens):
        sys.exit(f"socket_restart: --listen: engine and/or supervisor, not {a.listen!r}")
    if ref and not a.checkpoint:
        sys.exit("socket_restart: --engine ref needs --checkpoint (a Llama directory: bench/gen_llama_checkpoint.py)")
    if a.checkpoint and not os.path.isdir(a.checkpoint) and not a.print_config:
        sys.exit(f"socket_restart: --checkpoint {a.checkpoint}: not a directory")
    find_binaries(a)
    if a.print_config:
        # Each config as a run writes it (in a folder removed afterwards), with fastrestartd --check's verdict
        # where fastrestartd was found.
        ckpt = os.path.abspath(a.checkpoint) if a.checkpoint else "<generated by fastrestart-tinyengine gen>"
        work = tempfile.mkdtemp(prefix="fr-socket-bench-")
        try:
            for path, n in a.plan:
                for listen in listens:
                    sup = launcher(work, listen, path, a, ckpt)
                    with open(sup.config) as f:
                        print(f"# {listen}/{path}: {n} kills\n{f.read()}", end="")
                    if os.path.isabs(a.which["fastrestartd"]):
                        why = sup.check()
                        print(f"# fastrestartd --check: {'ok' if why is None else why}\n")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return 0
    os.makedirs(a.out, exist_ok=True)
    t_begin = time.monotonic()
    deadline = t_begin + a.budget_s if a.budget_s > 0 else float("inf")
    work = tempfile.mkdtemp(prefix="fr-socket-bench-")
    if a.checkpoint:
        ckpt = os.path.abspath(a.checkpoint)
    else:
        ckpt = os.path.join(work, "model")
        subprocess.run([a.which["fastrestart-tinyengine"], "gen", "--out", ckpt, "--size", a.size], check=True,
                       stdout=subprocess.DEVNULL)
    out = {"args": {k: v for k, v in vars(a).items() if k not in ("which", "plan")}, "plan": a.plan, "runs": [],
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(), "skipped": []}
    prior = PRIORS[a.engine]
    measured = {}  # path: {"first", "kill", "stop"} of its last run
    records_of = {}
    status = 0
    # A SIGTERM (the caller's timeout) ends the running run as an error (its fastrestartd stopped, its
    # kills kept) and the loop.
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        for path, kills in a.plan:
            for listen in listens:
                est = measured.get(path) or {"first": prior["first"][path], "kill": prior["kill"][path],
                                             "stop": prior["stop"]}
                need = est["first"] + a.steady_s + est["kill"] + est["stop"]
                left = deadline - time.monotonic()
                if need > left:
                    why = (f"time budget: one kill needs about {need:.0f} s, {left:.0f} s of {a.budget_s:.0f} s left")
                    log(f"{listen}/{path}: SKIPPED ({why})")
                    out["runs"].append({"listen": listen, "path": path, "kills": [], "kills_asked": kills, "skipped": why})
                    out["skipped"].append(f"{listen}/{path}: {why}")
                    save(a, out)
                    continue
                log(f"{listen}/{path}: {kills} kills, {a.clients} clients (at {time.monotonic() - t_begin:.0f} s)")
                res, records = run_one(a, work, listen, path, ckpt, kills, deadline, est)
                if res.get("error"):
                    status = 1
                t = res.get("timing") or {}
                if t.get("kill_cycle_s"):
                    measured[path] = {"first": t["first_s"], "kill": max(t["kill_cycle_s"]),
                                      "stop": max(t.get("stop_s", 0), prior["stop"])}
                analyse(res, records)
                res["requests"] = {o: sum(1 for r in records if r[2] == o) for o in sorted({r[2] for r in records})}
                out["runs"].append(res)
                records_of[(listen, path)] = records
                chart(a, out, records_of)
                save(a, out)
                if res.get("error", "").startswith("Terminated"):
                    return 143
    finally:
        out["elapsed_s"] = round(time.monotonic() - t_begin, 1)
        rows = save(a, out)
        print(rows)
        for line in out["skipped"]:
            print(f"not run: {line}")
        shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())

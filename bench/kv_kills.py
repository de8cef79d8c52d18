#!/usr/bin/env python3
"""The prefix cache's index across kill -9 under fastrestartd, from the client's clock (docs/kv-survival.md,
"Under fastrestartd"): fastrestartd holds the port (`engine.listen = "supervisor"`), runs a `warmed` standby,
the engine's K/V in a daemon's KV arena and its prefix index in a host arena (`weights.host_arenas` for the
reference engine on a GPU; the host daemon itself for the tiny engine on the CPU).

Phase ttft (one prompt with a long prefix, greedy, one token):
  cold_first_request          the first request (nothing cached)
  cached_before_kill          the prefix cached (median of --samples)
  cached_after_idle           the same after the engine sat idle --idle-s seconds (what idleness alone costs)
  sent_at_kill                one request sent right after kill(2): kill -> its answer (the restart included)
  right_after_ready           the next engine right after its READY, while the next standby starts beside it
  after_kill_with_index       the next engine once the next standby has parked, the prefix recovered from the
                              index (median of --samples)
  restart_without_index       the first request after a restart with no index to recover (what every
                              restart gives when the index dies with the engine): the tiny engine onto
                              another --block-size (another identity: the index dropped); the reference
                              engine with --no-enable-prefix-caching (a second KV arena, another index,
                              would not fit beside the first on the GPU)

Phase kills (correctness): --kills engines in turn, each SIGKILLed at a random instant while two clients
send prompts over shared prefixes with random answer lengths (prefill and decode in flight); after each
restart, 50 prompts over 10 shared prefixes, asked one at a time, are answered as the engine serving before
the phase's first kill answered them the second time (over its cache, as after a kill), never killed itself
(tokens and log-probabilities). The tiny engine's forward is bit-exact, so every answer
must be equal. The reference engine's is not bitwise the same over cached and recomputed positions (other GEMM
shapes): an answer that differs is reported with the gap between the two engines' log-probabilities at the
first differing token (a near-tie flips under rounding; a wrong K/V gives a gap far above it). Every recovery
is checked too: a valid header, and no `torn`, `checksum` or `hash` drop (what a kill interrupted was never
published).

  bench/kv_kills.py --engine tiny --bin build [--kills 20]
  bench/kv_kills.py --engine ref --bin .bundle/bin --checkpoint DIR [--kills 20] [--budget-s 500]

Raw results (every sample, every kill) in OUT/kv_kills_<engine>-<stamp>.json, saved after every kill. Exit 0;
1 when the run could not finish (fastrestartd or the engine failed); 2 when a result breaks the index's
promise (violations(): printed as VIOLATION lines).
"""
import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import fastrestartd_run as fr

HERE = os.path.dirname(os.path.abspath(__file__))
REFENGINE = os.path.join(HERE, "..", "python", "refengine", "fastrestart_refengine.py")
ORIGINAL = ("torn", "checksum", "hash")  # drops a kill can never cause (docs/kv-survival.md, the invariants)


def post(port, body, timeout=120):
    """POST /v1/completions: (seconds from send to the whole answer, the answer's JSON)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t = time.monotonic()
    with urllib.request.urlopen(req, timeout=timeout) as r:
        out = json.loads(r.read())
    return time.monotonic() - t, out


def ttft(port, prompt):
    return post(port, {"model": "t", "prompt": prompt, "max_tokens": 1, "temperature": 0})[0]


def answer(port, prompt, max_tokens):
    """The greedy answer: (its tokens, their log-probabilities), as the completions API's `logprobs` gives them."""
    c = post(port, {"model": "t", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 0})[1]
    lp = c["choices"][0].get("logprobs") or {}
    return lp.get("tokens") or [], lp.get("token_logprobs") or []


# A differing answer of the reference engine is a near-tie flipped by rounding when the two engines'
# log-probabilities differ by at most this much (nats) up to its first differing token; a wrong K/V moves
# them far more.
NEAR_TIE = 0.5


def compare(got, want):
    """{'equal': True}, or the first differing token's index and the largest log-probability gap up to it
    (both answers' tokens up to there; equal tokens with other log-probabilities: the largest gap of all)."""
    (gt, gl), (wt, wl) = got, want
    if gt == wt and gl == wl:
        return {"equal": True}
    n = min(len(gt), len(wt))
    i = next((k for k in range(n) if gt[k] != wt[k]), n)
    gaps = [abs(a - b) for a, b in zip(gl[: i + 1], wl[: i + 1])]
    return {"equal": False, "tokens_equal": gt == wt, "first_diff": i, "logprob_gap": max(gaps) if gaps else None}


class Engine:
    """What differs between the tiny engine (CPU, host daemon) and the reference engine (GPU, CUDA daemon)."""

    def __init__(self, a):
        self.a = a
        if a.engine == "ref":
            self.prefix_tokens = a.prefix_tokens or 8192
            self.check_prefix = 256
            self.max_len = self.prefix_tokens + 256
        else:
            self.prefix_tokens = a.prefix_tokens or 900
            self.check_prefix = 48
            self.max_len = 1024

    def config(self, d, port, ckpt):
        a, run = self.a, os.path.join(d, "run")
        flags = ["--host", "127.0.0.1", "--port", str(port), "--served-model-name", "t", "--load-format", "fastrestart",
                 "--fastrestart-socket-dir", run]
        weights = {"mode": "zero_copy", "checkpoint": ckpt, "daemon_path": a.which["fastrestart-weightd"]}
        tables = {"standby": {"level": "warmed"}}
        if a.engine == "ref":
            command = [sys.executable, REFENGINE, "serve", ckpt]
            flags += ["--max-num-seqs", str(a.max_num_seqs), "--max-model-len", str(self.max_len), "--kv-arena", "kv"]
            weights.update(backend="cuda", key=fr.REFENGINE_WEIGHTS_KEY, host_arenas=True)
            tables.update(top={"gpus": ["0"]}, memory={"check_free": False})
            grace, check = 20, 30
        else:
            command = [a.which["fastrestart-tinyengine"], "serve", ckpt]
            flags += ["--shutdown-grace", "2", "--kv-arena-bytes", str(64 << 20), "--kv-arena-wait", "10"]
            weights.update(backend="host")
            grace, check = 5, 5
        self.flags = flags
        return fr.supervisor_config(
            d, "t", command, flags, port, weights, engine={"stop_grace_s": grace, "listen": "supervisor"},
            readiness={"check_interval_s": check, "startup_timeout_s": 300},
            restart={"warm_failures_before_cold": 0, "start": ["standby", "warm", "cold"]}, **tables)

    def other_index(self):
        """Flags of an engine that finds no index to recover: another block size (another identity: the whole
        index dropped) for the tiny engine; for the reference engine, whose block size is fixed, no prefix
        caching: its first request prefills the whole prompt, as one onto an empty index does. (A second KV
        arena with its own index does not fit beside the first: the first holds 90 % of the GPU.)"""
        return ["--no-enable-prefix-caching"] if self.a.engine == "ref" else ["--block-size", "8"]

    def checkpoint(self, work):
        a = self.a
        if a.checkpoint:
            return a.checkpoint
        ck = os.path.join(work, "model")
        if a.engine == "ref":
            subprocess.run([sys.executable, os.path.join(HERE, "gen_llama_checkpoint.py"), ck, "--shape", "tiny"],
                           check=True, stdout=subprocess.DEVNULL)
        else:
            subprocess.run([a.which["fastrestart-tinyengine"], "gen", "--out", ck, "--seed", "5", "--d-model", "256",
                            "--n-heads", "8", "--n-layers", "4", "--d-ff", "1024", "--max-seq", str(self.max_len)],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return ck


def kv_row(st):
    """fastrestartd's status row of the engine's KV cache (docs/kv-survival.md, "In fastrestartd's status")."""
    kv = st.get("kv_cache") or {}
    return {k: kv.get(k) for k in ("pid", "location", "header", "recovered", "dropped_by", "prefix", "blocks")}


class Run:
    def __init__(self, a, eng, work):
        self.a, self.eng = a, eng
        self.d = os.path.join(work, "sup")
        self.port = fr.free_port()
        self.ckpt = eng.checkpoint(work)
        self.sup = fr.Fastrestartd(self.d, eng.config(self.d, self.port, self.ckpt), fr.control_socket(self.d),
                                   fastrestartd=a.which["fastrestartd"], fastrestartctl=a.which["fastrestartctl"])
        self.readies = 0

    def steady(self, old_pid=None, park_timeout=None, want_kv=True):
        """Until the next READY of an engine other than old_pid (ready()), then until the standby is parked
        (parked()): the status."""
        self.ready(want_kv)
        return self.parked(park_timeout)

    def ready(self, want_kv=True):
        """Until the next READY (and, with want_kv, its kv_cache row: an engine without prefix caching writes
        none): the status. The next standby may still be starting."""
        self.readies += 1
        st = self.sup.wait_ready(self.readies, self.a.ready_timeout)
        pid = st["engine"]["pid"]
        if want_kv:
            st = self.sup.wait(lambda s: (s.get("kv_cache") or {}).get("pid") == pid, "the engine's kv_cache row", 60)
        return st

    def parked(self, park_timeout=None):
        """Until the standby is parked (at most park_timeout s: a kill before it parks makes a warm start
        instead): the status."""
        try:
            return self.sup.wait(lambda s: (s.get("standby") or {}).get("state") == "parked", "a parked standby",
                                 park_timeout or self.a.ready_timeout)
        except RuntimeError as e:
            if park_timeout is None:
                raise
            fr.log(f"  {e}: going on")
        return self.sup.status()


def prompts(eng, n_prefixes, per_prefix, tag):
    """Prompts over shared prefixes: prefix k is check_prefix tokens (bytes) that differ from their first."""
    out = []
    for k in range(n_prefixes):
        p = (f"[{tag} {k}] Shared instructions of prefix {k}: answer briefly and kindly. " * 16)[: eng.check_prefix]
        out += [p + f" Question {q} of {k}?" for q in range(per_prefix)]
    return out


class Traffic:
    """Two clients sending prompts over the check prefixes (plus random tails) with random answer lengths, back
    to back, until stopped: prefill and decode in flight at any instant."""

    def __init__(self, port, base, seed):
        self.port, self.base, self.rng = port, base, random.Random(seed)
        self.halt, self.outcomes, self.lock = threading.Event(), {}, threading.Lock()
        self.threads = [threading.Thread(target=self.client, args=(i,), daemon=True) for i in range(2)]

    def client(self, i):
        rng = random.Random(self.rng.random())
        while not self.halt.is_set():
            p = rng.choice(self.base)[: rng.randrange(8, 10_000)] + f" tail {rng.randrange(1 << 30)}"
            try:
                post(self.port, {"model": "t", "prompt": p, "max_tokens": rng.randrange(1, 24), "temperature": 0}, 60)
                o = "ok"
            except urllib.error.HTTPError as e:
                o = f"http_{e.code}"
            except Exception as e:  # a kill breaks the connection in flight
                o = type(e).__name__
            with self.lock:
                self.outcomes[o] = self.outcomes.get(o, 0) + 1

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_):
        self.halt.set()
        for t in self.threads:
            t.join(90)


class GpuClocks:
    """nvidia-smi's SM clock, power and utilization every 100 ms into OUT/<name>.csv while a phase runs (where
    there is nvidia-smi): a request slower than its neighbours is set against the GPU's own state (its clock
    after idling, another process's work)."""
    def __init__(self, path):
        self.path, self.proc = path, None

    def __enter__(self):
        if shutil.which("nvidia-smi"):
            with open(self.path, "w") as f:
                self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu",
                                              "--format=csv", "-lms", "100"], stdout=f, stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *_):
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def phase_ttft(r, res):
    a, eng, port = r.a, r.eng, r.port
    prefix = ("You are a careful assistant. " * (eng.prefix_tokens // 29 + 1))[: eng.prefix_tokens]
    q = lambda tag, i: prefix + f" [{tag} question {i}]?"
    runs = res["ttft"] = {"prefix_tokens": len(prefix), "samples": a.samples, "ms": {}, "sent_unix_s": {}}
    ms = runs["ms"]

    def row(name, tag, n):  # n requests one after the other; each one's send time (to set against the clocks)
        ms[name], runs["sent_unix_s"][name] = [], []
        for i in range(n):
            runs["sent_unix_s"][name].append(round(time.time(), 3))
            ms[name].append(ttft(port, q(tag, i)) * 1e3)

    row("cold_first_request", "cold", 1)
    row("cached_before_kill", "before", a.samples)
    # the same request after the engine sat idle as long as a restart takes: what idleness alone costs
    time.sleep(a.idle_s)
    row("cached_after_idle", "idle", a.samples)
    st = r.sup.status()
    runs["kv_before"] = kv_row(st)
    pid = st["engine"]["pid"]
    kc = fr.KillClock(pid).kill()
    ms["sent_at_kill"] = [(time.monotonic() - kc.t_kill + ttft(port, q("at-kill", 0))) * 1e3]
    r.ready()
    # right after READY, while the next standby starts beside the engine: what a returning client meets
    row("right_after_ready", "right-after", a.samples)
    st = r.parked()
    runs["kill"] = kc.ready(st)
    runs["kv_after"] = kv_row(st)
    row("after_kill_with_index", "after", a.samples)
    fr.log(f"ttft: kill -> READY {runs['kill'].get('kill_to_ready_s')} s via {runs['kill'].get('path')}; "
           f"recovered {runs['kv_after'].get('recovered')} blocks, header {runs['kv_after'].get('header')}")
    pid = st["engine"]["pid"]
    r.sup.ctl("reload", "--add-flags", " ".join(eng.other_index()), timeout=a.ready_timeout)
    st = r.steady(pid, want_kv=a.engine != "ref")  # the reference engine without prefix caching has no index
    runs["kv_without_index"] = kv_row(st)
    ms["restart_without_index"] = [ttft(port, q("without", 0)) * 1e3]
    # back to the arena with the index for the kills
    pid = st["engine"]["pid"]
    r.sup.ctl("reload", "--flags", " ".join(r.eng.flags), timeout=a.ready_timeout)
    r.steady(pid)


def phase_kills(r, res, save, deadline):
    a, port = r.a, r.port
    checks = prompts(r.eng, 10, 5, "check")
    answer_len = 8
    # The oracle is the never-killed engine's second answer to each prompt, read over its cache as every
    # answer after a kill is: its first answer computed the first prompt of each prefix in one prefill,
    # which an engine that is not bitwise equal over cached and recomputed positions answers otherwise
    # (how often, before any kill: `fresh_vs_cached`).
    fresh = [answer(port, p, answer_len) for p in checks]
    oracle = [answer(port, p, answer_len) for p in checks]
    out = res["kills"] = {"asked": a.kills, "done": [], "check_prompts": len(checks), "answer_tokens": answer_len,
                          "fresh_vs_cached": [dict(c, prompt=i) for i, c in enumerate(map(compare, fresh, oracle))
                                              if not c["equal"]]}
    rng = random.Random(a.seed)
    st = r.sup.status()
    last_cycle = 0.0
    for k in range(a.kills):
        if time.monotonic() + last_cycle * 1.3 > deadline:
            out["cut"] = f"{k} of {a.kills} kills: the next would end past the budget"
            fr.log(out["cut"])
            break
        t0 = time.monotonic()
        pid = st["engine"]["pid"]
        with Traffic(port, checks, rng.random()) as tr:
            time.sleep(rng.uniform(a.kill_after_min_s, a.kill_after_max_s))
            kc = fr.KillClock(pid).kill()
        st = r.steady(pid, park_timeout=a.park_timeout)
        rec = kc.ready(st)
        kv = kv_row(st)
        got = [answer(port, p, answer_len) for p in checks]
        cmp = [compare(g, w) for g, w in zip(got, oracle)]
        kv_after = kv_row(r.sup.status())
        differ = [dict(c, prompt=i) for i, c in enumerate(cmp) if not c["equal"]]
        one = {"kill": k + 1, "path": rec.get("path"), "kill_to_ready_s": rec.get("kill_to_ready_s"),
               "traffic": tr.outcomes, "recovery": kv, "check_prefix": (kv_after.get("prefix") or {}),
               "equal": len(cmp) - len(differ), "differ": differ,
               "kill_dropped_original": {w: n for w, n in (kv.get("dropped_by") or {}).items() if w in ORIGINAL}}
        out["done"].append(one)
        save()
        last_cycle = time.monotonic() - t0
        fr.log(f"kill {k + 1}: {one['path']} READY {one['kill_to_ready_s']} s; header {kv.get('header')}, "
               f"recovered {kv.get('recovered')}, dropped {kv.get('dropped_by')}; {one['equal']}/{len(cmp)} equal"
               + (f", differing {[(d['prompt'], d['first_diff'], d['logprob_gap']) for d in differ]}" if differ else ""))


def violations(res):
    """What breaks the index's promise in a result: a recovery after a kill without a valid header or dropping
    what a kill can never cause, and (the tiny engine, whose forward is bit-exact) an answer unequal to the
    never-killed engine's. The reference engine's cached and recomputed positions are not bitwise the same:
    a differing answer of it counts only when it is no near-tie (a gap over NEAR_TIE, or none to measure)."""
    out = []
    t = res.get("ttft") or {}
    if t and (t.get("kv_after") or {}).get("header") != "valid":
        out.append(f"ttft: the engine after the kill found header {(t.get('kv_after') or {}).get('header')}")
    for d in (res.get("kills") or {}).get("done", []):
        rec = d.get("recovery") or {}
        if rec.get("header") != "valid":
            out.append(f"kill {d['kill']}: header {rec.get('header')}")
        if d.get("kill_dropped_original"):
            out.append(f"kill {d['kill']}: dropped {d['kill_dropped_original']}")
        if res.get("engine") == "tiny" and d.get("differ"):
            out.append(f"kill {d['kill']}: {len(d['differ'])} answers differ from the never-killed engine's")
        far = [x for x in d.get("differ", []) if x.get("logprob_gap") is None or x["logprob_gap"] > NEAR_TIE]
        if res.get("engine") != "tiny" and far:
            out.append(f"kill {d['kill']}: {len(far)} answers differ from the never-killed engine's by more than a "
                       f"near-tie (log-probability gap over {NEAR_TIE}: {[x.get('logprob_gap') for x in far]})")
    return out


def summary(res):
    lines = []
    t = res.get("ttft")
    if t:
        lines.append(f"time to first token, prefix {t['prefix_tokens']} tokens, ms from the client (median of "
                     f"{t['samples']}; first requests one sample):")
        for k, v in t["ms"].items():
            lines.append(f"  {k:28s} {statistics.median(v):10.2f}" + (f"   each: {', '.join(f'{x:.1f}' for x in v)}"
                                                                       if len(v) > 1 else ""))
        ka, kb = t.get("kv_after") or {}, t.get("kv_without_index") or {}
        lines.append(f"  after the kill: header {ka.get('header')}, {ka.get('recovered')} blocks recovered, dropped "
                     f"{ka.get('dropped_by')}; kill -> READY {(t.get('kill') or {}).get('kill_to_ready_s')} s via "
                     f"{(t.get('kill') or {}).get('path')}; without the index: header {kb.get('header')}")
    k = res.get("kills")
    if k:
        done = k["done"]
        eq = sum(d["equal"] for d in done)
        n = len(done) * k["check_prompts"]
        gaps = [x["logprob_gap"] for d in done for x in d["differ"] if x.get("logprob_gap") is not None]
        bad = sum(1 for d in done if d["kill_dropped_original"] or (d["recovery"] or {}).get("header") != "valid")
        paths = {}
        for d in done:
            paths[d["path"]] = paths.get(d["path"], 0) + 1
        lines.append(f"before any kill, answers over the cache differing from the first (computed) ones: "
                     f"{len(k.get('fresh_vs_cached', []))} of {k['check_prompts']}")
        lines.append(f"kills: {len(done)} of {k['asked']} ({paths}); answers equal to the never-killed engine's: "
                     f"{eq} of {n}" + (f"; differing {n - eq}, log-probability gap at the first difference max "
                                       f"{max(gaps):.4g}" if gaps else "")
                     + f"; recoveries not valid or dropping torn/checksum/hash: {bad}; recovered per kill min "
                     f"{min((d['recovery'] or {}).get('recovered') or 0 for d in done) if done else '-'}")
    return "\n".join(lines)


class Terminated(Exception):
    """SIGTERM (the caller's timeout): the run stops fastrestartd and keeps what it measured."""


def on_sigterm(*_):
    raise Terminated("SIGTERM: the run was stopped")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=["tiny", "ref"], default="tiny")
    ap.add_argument("--bin", default="build", help="a build tree, or a folder holding the programs (.bundle/bin)")
    ap.add_argument("--checkpoint", help="the model (default: one generated; the reference engine's tiny shape)")
    ap.add_argument("--phases", default="ttft,kills")
    ap.add_argument("--prefix-tokens", type=int)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--idle-s", type=float, default=5, help="s the engine sits idle before the cached_after_idle row")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--kill-after-min-s", type=float, default=0.02)
    ap.add_argument("--kill-after-max-s", type=float, default=0.6)
    ap.add_argument("--park-timeout", type=float, default=60, help="s to wait for the standby before the next kill")
    ap.add_argument("--max-num-seqs", type=int, default=16, help="the reference engine's slots")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--ready-timeout", type=float, default=300)
    ap.add_argument("--budget-s", type=float, default=3600)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    a = ap.parse_args()
    t_start = time.monotonic()
    deadline = t_start + a.budget_s
    needed = ["fastrestartd", "fastrestartctl", "fastrestart-weightd"] + (["fastrestart-tinyengine"] if a.engine == "tiny" else [])
    a.which = fr.find_programs(a.bin, needed)
    for name in needed:
        if not a.which[name]:
            sys.exit(f"kv_kills: {name} not found in {a.bin} (as a build tree or a folder) or on PATH")
    eng = Engine(a)
    work = tempfile.mkdtemp(prefix="kv-kills-")
    r = Run(a, eng, work)
    cfg = open(r.sup.config).read()
    os.makedirs(a.out, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    path = os.path.join(a.out, f"kv_kills_{a.engine}-{stamp}.json")
    res = {"engine": a.engine, "args": {k: v for k, v in vars(a).items() if k != "which"}, "config": cfg,
           "machine": fr.machine_cpu()}
    gpu = fr.nvidia_smi("--query-gpu=name,memory.total")
    if gpu:
        res["gpu"] = gpu.strip()

    def save():
        with open(path, "w") as f:
            json.dump(res, f, indent=1)

    why = r.sup.check()
    if why:
        sys.exit(f"kv_kills: fastrestartd --check refused the config: {why}")
    signal.signal(signal.SIGTERM, on_sigterm)
    r.sup.start()
    rc = 0
    try:
        t = time.monotonic()
        r.steady()
        res["first_ready_s"] = round(time.monotonic() - t, 2)
        fr.log(f"ready and the standby parked in {res['first_ready_s']} s")
        if "ttft" in a.phases:
            with GpuClocks(path[:-5] + "-gpu-clocks.csv"):
                phase_ttft(r, res)
            save()
        if "kills" in a.phases:
            phase_kills(r, res, save, deadline - 30)
    except Exception as e:  # fastrestartd, the engine, a request, the caller's SIGTERM: kept and said
        res["error"] = f"{type(e).__name__}: {e}"
        fr.log(f"kv_kills: {e}")
        rc = 1
    finally:
        res["stop_exit"] = r.sup.stop()
        save()
        with open(path[:-5] + "-fastrestartd.log", "w") as f:
            f.write("".join(r.sup.text().splitlines(keepends=True)[-400:]))
        shutil.rmtree(work, ignore_errors=True)
    bad = violations(res)
    res["violations"] = bad
    save()
    print(summary(res))
    for v in bad:
        print(f"VIOLATION: {v}")
    print(f"raw: {path}")
    return rc or (2 if bad else 0)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""What clients see across kill -9 of the engine under fastrestartd: engine.listen = "front" beside "supervisor".

One command: python3 bench/front_kill.py [--build build] [--kills 3] [--seconds 5] [--part all|kill|kv]
Writes raw JSON to bench/results/front-kill-<host>-<date>/front_kill.json.

Two fastrestartd, each running the tiny engine (CPU, --fault-token-delay, 64 HTTP threads) with its weights
in a weight daemon (warm restarts), as a user runs them (config/front.toml):
  front       engine.listen = "front": fastrestartd binds the clients' port for fastrestart-front, which it
              starts; the engine serves the loopback socket fastrestartd keeps (front.upstream).
  supervisor  engine.listen = "supervisor": clients connect straight to the port fastrestartd holds and
              hands to each engine.
For each of 64 and 256 concurrent clients (half streaming), each mode runs the same load under the same
kill schedule: kill -9 of the engine pid that fastrestartd's status names, at fixed times; fastrestartd
restarts it (the bench waits for the status to name a ready engine of another pid before the next kill).
Every answer is compared with the uninterrupted answer to the same request (streams byte for byte, their
id and created replaced; plain answers without id and created); a failure is an error, a reset, a
timeout, an error event, or a status other than 200; "differ" an answer that is not the uninterrupted one.
Then the front's cost without kills, one client at a time, through the front and straight to the same
engine (its loopback socket): p50 latency of a non-streamed request, streamed tokens/s, and the front's
CPU seconds per 1,000 streamed tokens.

--part kv (or all): tokens recomputed per continued stream (docs/kv-survival.md, "Continued streams"). A
third fastrestartd (engine.listen = "front") runs the tiny engine with its prefix cache on a host KV arena
(--block-size 4) and health-only readiness (readiness.request_path = ""), so the next engine's prefix
counters count the front's continuations and nothing else. Per trial: streams with prompts of their own
(MAX_TOKENS each), the engine killed with kill -9 once every stream has read k token events (k = 1, 2, ...:
the kills land at every offset within a block), the next engine's counters read once it answered them all:
(query_tokens - hit_tokens) / streams is what each continuation recomputed. Single-stream trials give each
stream's own figure (median, max); one trial of 6 streams at once gives their sum. Raw JSON:
bench/results/front-kill-<host>-<date>/front_kv_continuations.json.
"""
import argparse, datetime, http.client, json, os, shutil, socket, statistics, subprocess, sys, tempfile
import threading, time

import fastrestartd_run as fr

MAX_TOKENS = 24
HOLD_S = 30  # front.hold_s: the default


def config_toml(d, ckpt, mode, port, which, token_delay, threads, engine_flags=(), readiness=None, idle=0):
    """fastrestartd's config for one mode, its files under d."""
    run = os.path.join(d, "run")
    flags = ["--host", "127.0.0.1", "--port", str(port), "--served-model-name", "t", "--threads", str(threads),
             "--fault-token-delay", str(token_delay), "--load-format", "fastrestart", "--fastrestart-socket-dir", run,
             "--shutdown-grace", "2", *engine_flags]
    tables = ({"front": dict({"hold_s": HOLD_S, "path": which["fastrestart-front"]},
                             **({"max_idle_connections": idle} if idle else {}))} if mode == "front" else {})
    return fr.supervisor_config(
        d, "t", [which["fastrestart-tinyengine"], "serve", ckpt], flags, port,
        {"mode": "zero_copy", "backend": "host", "checkpoint": ckpt, "daemon_path": which["fastrestart-weightd"]},
        engine={"kind": None, "listen": mode, "listen_backlog": 4096},
        readiness=dict({"endpoint": "private"}, **(readiness or {})),
        restart={"warm_failures_before_cold": 0, "start": ["warm", "cold"]}, **tables)


def launch(work, mode, ckpt, which, a):
    d = os.path.join(work, mode)
    port = fr.free_port()
    sup = fr.Fastrestartd(d, config_toml(d, ckpt, mode, port, which, a.token_delay, a.threads,
                                         idle=getattr(a, "max_idle_connections", 0)),
                          fr.control_socket(d), fastrestartd=which["fastrestartd"],
                          fastrestartctl=which["fastrestartctl"])
    err = sup.check()
    if err:
        sys.exit(f"front_kill: fastrestartd --check ({mode}): {err}")
    sup.port = port
    sup.start()
    return sup


def ready_engine(not_pid=None, since=None):
    """The status predicate: an engine ready, other than not_pid, its READY stamped after SINCE
    (time.monotonic(); fastrestartd stamps on the same clock): the status may name the next engine's pid
    before its start is recorded."""
    def pred(st):
        pid = (st.get("engine") or {}).get("pid")
        ready_at = (st.get("last_start") or {}).get("ready_at_s")
        return (st.get("state") == "ready" and pid and pid != not_pid
                and (since is None or (ready_at is not None and ready_at >= since)))
    return pred


def body_of(i, stream, max_tokens=MAX_TOKENS):
    b = {"prompt": f"client {i} asks", "max_tokens": max_tokens, "temperature": 0}
    if stream: b.update(stream=True, stream_options={"include_usage": True})
    return json.dumps(b)


def ask(port, body, timeout=90):
    """(ok, answer text) for one request; a stream is its body, else the JSON without id/created."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse(); data = r.read().decode("utf-8", "replace"); c.close()
    except (OSError, http.client.HTTPException) as e:
        return False, repr(e)
    if r.status != 200: return False, f"{r.status} {data[:300]}"
    if '"stream": true' in body:
        return ('"error"' not in data and data.endswith("data: [DONE]\n\n")), data
    j = json.loads(data); j.pop("id", None); j.pop("created", None)
    return True, json.dumps(j, sort_keys=True)


def normalize(stream):
    """A stream with its (single) id and created masked: the rest must be byte-equal."""
    first = json.loads(stream.split("\n\n")[0][6:])
    return stream.replace(json.dumps(first["id"]), '"ID"').replace(f'"created":{first["created"]}', '"created":0')


def kind_of(got):
    """A failure's kind, for counting: the HTTP status, or the exception's name."""
    return got.split(" ", 1)[0] if got[:1].isdigit() else got.split("(", 1)[0]


def run_load(sup, clients, seconds, kills, want):
    """CLIENTS threads for SECONDS, KILLS kill -9 of fastrestartd's engine at seconds/(kills+1) apart."""
    t0 = time.monotonic()
    stop = t0 + seconds
    res = {"requests": 0, "failed": 0, "differ": 0, "streams": 0, "failed_by": {}, "examples": [],
           "slowest_s": 0.0, "kills": []}
    lock = threading.Lock()

    def client(i):
        stream = i % 2 == 0
        body = body_of(i % 16, stream)
        while time.monotonic() < stop:
            t = time.monotonic()
            ok, got = ask(sup.port, body)
            dt = time.monotonic() - t
            same = ok and ((normalize(got) == want[body]) if stream else got == want[body])
            with lock:
                res["requests"] += 1; res["streams"] += stream
                res["slowest_s"] = max(res["slowest_s"], round(dt, 3))
                if not ok:
                    res["failed"] += 1
                    res["failed_by"][kind_of(got)] = res["failed_by"].get(kind_of(got), 0) + 1
                elif not same: res["differ"] += 1
                if (not ok or not same) and len(res["examples"]) < 4:
                    res["examples"].append({"after_s": round(t - t0, 3), "took_s": round(dt, 3), "got": got[:400]})

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads: t.start()
    for k in range(kills):
        time.sleep(max(0.0, t0 + seconds * (k + 1) / (kills + 1) - time.monotonic()))
        pid = sup.status()["engine"]["pid"]
        c = fr.KillClock(pid).kill()
        st = sup.wait(ready_engine(pid, c.t_kill), f"an engine after the kill of {pid}", 120)
        c.ready(st)
        res["kills"].append({key: c.rec.get(key) for key in ("pid", "path", "kill_to_ready_s", "reap_to_ready_s")}
                            | {"at_s": round(c.t_kill - t0, 3)})
    for t in threads: t.join()
    res["took_s"] = round(time.monotonic() - t0, 3)
    return res


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def front_counters(st):
    f = st.get("front") or {}
    return {k: f.get(k) for k in ("requests", "restarts", "lost") if k in f} or f


KV_BLOCK_TOKENS = 4


def kv_config(d, ckpt, port, which, a):
    """The front mode's config with the tiny engine's prefix cache on a host KV arena and health-only checks."""
    return config_toml(d, ckpt, "front", port, which, a.kv_token_delay, a.threads,
                       engine_flags=("--kv-arena-bytes", "33554432", "--kv-arena-wait", "10",
                                     "--block-size", str(KV_BLOCK_TOKENS)),
                       readiness={"request_path": ""})


def read_stream(port, body, at=None, reached=None):
    """One stream read to its end: (ok, body text). REACHED() runs once AT token events were read (kv_trial's
    kill comes after every stream's callback; front_kill_ref kills from it)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        data, n = [], 0
        while True:
            line = r.readline()
            if not line: break
            line = line.decode()
            data.append(line)
            if line.startswith("data: {") and '"text"' in line:
                n += 1
                if n == at: reached()
    except (OSError, http.client.HTTPException) as e:
        return False, repr(e)
    finally:
        c.close()
    text = "".join(data)
    return r.status == 200 and '"error"' not in text and text.endswith("data: [DONE]\n\n"), text


def kv_trial(sup, streams, k, tag):
    """kill -9 after each of STREAMS streams read K token events; the next engine's prefix counters."""
    st = sup.status(); engine = st["engine"]["pid"]
    cont0 = ((st.get("front") or {}).get("requests") or {}).get("continued", 0)
    reached = threading.Semaphore(0)
    results = [None] * streams
    prompts = [f"{tag} stream {i}: tell me a story" + "!" * (i % 3) for i in range(streams)]
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(
        i, read_stream(sup.port, json.dumps({"prompt": prompts[i], "max_tokens": MAX_TOKENS, "temperature": 0,
                                      "stream": True}), k, reached.release))) for i in range(streams)]
    for t in threads: t.start()
    for _ in range(streams): reached.acquire()
    os.kill(engine, 9)
    for t in threads: t.join()
    st = sup.wait(lambda s: (s.get("kv_cache") or {}).get("pid") not in (None, engine)
                  and (s.get("kv_cache") or {}).get("counters") == "file"
                  and (s["kv_cache"].get("prefix") or {}).get("requests", 0) >= streams, "the next engine's counters", 120)
    kv = st["kv_cache"]; p = kv["prefix"]
    cont = ((st.get("front") or {}).get("requests") or {}).get("continued", 0) - cont0
    return {"streams": streams, "killed_after_events": k, "ok": sum(1 for r in results if r[0]),
            "continued": cont, "requests": p["requests"], "query_tokens": p["query_tokens"], "hit_tokens": p["hit_tokens"],
            "recomputed": p["query_tokens"] - p["hit_tokens"], "header": kv.get("header"), "recovered": kv.get("recovered"),
            "block_tokens": kv.get("block_tokens"), "prompt_tokens": [len(q) for q in prompts]}


def kv_continuations(work, ckpt, which, a):
    d = os.path.join(work, "front-kv"); port = fr.free_port()
    sup = fr.Fastrestartd(d, kv_config(d, ckpt, port, which, a), fr.control_socket(d),
                          fastrestartd=which["fastrestartd"], fastrestartctl=which["fastrestartctl"])
    err = sup.check()
    if err: sys.exit(f"front_kill: fastrestartd --check (front-kv): {err}")
    sup.port = port; sup.start()
    try:
        sup.wait(ready_engine(), "the first engine (front-kv)", 120)
        trials = [kv_trial(sup, 1, k, f"t{k}") for k in range(1, a.kv_trials + 1)]
        many = kv_trial(sup, 6, 3, "m")
    finally:
        sup.stop(30)
    per = [t["recomputed"] for t in trials if t["requests"] == 1 and t["continued"] == 1]
    out = {"host": socket.gethostname(), "date": datetime.datetime.utcnow().isoformat() + "Z", "machine": fr.machine_cpu(),
           "max_tokens": MAX_TOKENS, "token_delay_s": a.kv_token_delay, "block_tokens": KV_BLOCK_TOKENS,
           "single_stream_trials": trials, "six_streams": many,
           "recomputed_per_stream": {"n": len(per), "median": statistics.median(per) if per else None,
                                     "max": max(per) if per else None, "min": min(per) if per else None},
           "six_streams_recomputed_per_stream": many["recomputed"] / 6}
    print(json.dumps({k: out[k] for k in ("block_tokens", "recomputed_per_stream", "six_streams_recomputed_per_stream")}),
          flush=True)
    return out


def stream_tokens(port, i):
    ok, got = ask(port, body_of(i % 16, True))
    return got.count('"finish_reason":') - got.count('"choices":[]') if ok else 0


def cost_only(work, ckpt, which, a):
    """The front's cost without kills, side by side: one fastrestartd with engine.listen = "front"; each
    non-streamed request goes once through the front and once straight to the same engine (its loopback
    socket), the order alternating, so drift in the machine's load hits both paths alike. Then streams, one
    client at a time and at the engine's full concurrency (--threads clients), front and direct in
    alternating rounds."""
    sup = launch(work, "front", ckpt, which, a)
    try:
        sup.wait(ready_engine(), "the first engine (front)", 120)
        st = sup.status(); front_pid = st["front"]["pid"]
        ports = {"front": sup.port, "direct": int(st["front"]["upstream"].rsplit(":", 1)[1])}
        for i in range(20):
            for p in ports.values(): assert ask(p, body_of(i % 16, False))[0]
        load0 = os.getloadavg()
        lat = {"front": [], "direct": []}; diff = []
        for i in range(a.cost_pairs):
            pair = {}
            for via in (("front", "direct") if i % 2 else ("direct", "front")):
                t = time.perf_counter(); ok, got = ask(ports[via], body_of(i % 16, False)); pair[via] = time.perf_counter() - t
                assert ok, got
                lat[via].append(pair[via])
            diff.append(pair["front"] - pair["direct"])
        res = {"load_before": load0, "pairs": a.cost_pairs,
               "p50_ms": {k: statistics.median(v) * 1e3 for k, v in lat.items()},
               "p90_ms": {k: statistics.quantiles(v, n=10)[-1] * 1e3 for k, v in lat.items()},
               "paired_diff_p50_ms": statistics.median(diff) * 1e3}
        res["added_p50_ms"] = res["p50_ms"]["front"] - res["p50_ms"]["direct"]

        def streams(via, clients, seconds):
            stop = time.monotonic() + seconds; counts = [0] * clients
            def worker(j):
                k = 0
                while time.monotonic() < stop:
                    counts[j] += stream_tokens(ports[via], j + k); k += clients
            cpu0 = cpu_s(front_pid); t0 = time.perf_counter()
            th = [threading.Thread(target=worker, args=(j,)) for j in range(clients)]
            for t in th: t.start()
            for t in th: t.join()
            return sum(counts), time.perf_counter() - t0, cpu_s(front_pid) - cpu0
        for name, clients, seconds in (("one_client", 1, 4.0), ("full_concurrency", a.threads, 4.0)):
            tot = {"front": [0, 0.0, 0.0], "direct": [0, 0.0, 0.0]}
            for r in range(4):
                for via in (("front", "direct") if r % 2 else ("direct", "front")):
                    n, dt, cpu = streams(via, clients, seconds)
                    tot[via][0] += n; tot[via][1] += dt; tot[via][2] += cpu
            res[name] = {"clients": clients,
                         "tokens_per_s": {k: v[0] / v[1] for k, v in tot.items()},
                         "tokens": {k: v[0] for k, v in tot.items()},
                         "front_cpu_s_per_1000_tokens": tot["front"][2] / tot["front"][0] * 1000,
                         "front_cpu_s_while_direct_per_1000_tokens": tot["direct"][2] / tot["direct"][0] * 1000}
            tp = res[name]["tokens_per_s"]
            res[name]["front_vs_direct"] = tp["front"] / tp["direct"] - 1
        res["load_after"] = os.getloadavg()
        out = {"host": socket.gethostname(), "date": datetime.datetime.utcnow().isoformat() + "Z", "machine": fr.machine_cpu(),
               "max_tokens": MAX_TOKENS, "token_delay_s": a.token_delay, "engine_threads": a.threads,
               "front_max_idle_connections": a.max_idle_connections,
               "cpu_clock_ticks_per_s": os.sysconf("SC_CLK_TCK"), "cost": res, "front_status": sup.status().get("front")}
        print(json.dumps(res), flush=True)
        return out
    finally:
        sup.stop(30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="a build tree, or a folder holding the programs (.bundle/bin)"); ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5); ap.add_argument("--token-delay", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=64, help="the tiny engine's HTTP threads")
    ap.add_argument("--clients", default="64,256")
    ap.add_argument("--part", choices=["all", "kill", "kv", "cost"], default="all",
                    help="kill: the load under kills and the no-kill cost; kv: tokens recomputed per continued stream; "
                         "cost: only the no-kill cost, front and direct interleaved (front_cost.json)")
    ap.add_argument("--cost-pairs", type=int, default=300, help="--part cost: non-streamed requests per path")
    ap.add_argument("--max-idle-connections", type=int, default=0,
                    help="front.max_idle_connections (kept-alive connections to the engine; 0: one per request)")
    ap.add_argument("--out", default=None, help="--part cost: the raw JSON's file name (default front_cost.json)")
    ap.add_argument("--results", default=None, help="the raw JSON's folder (default bench/results/front-kill-<host>-<date>)")
    ap.add_argument("--kv-trials", type=int, default=8, help="--part kv: single-stream trials")
    ap.add_argument("--kv-token-delay", type=float, default=0.05, help="--part kv: the engine's token delay")
    a = ap.parse_args()
    which = fr.find_programs(a.build, ["fastrestartd", "fastrestartctl", "fastrestart-tinyengine", "fastrestart-weightd",
                                       "fastrestart-front"])
    missing = [n for n, p in which.items() if not p or not os.access(p, os.X_OK)]
    if missing:
        sys.exit(f"front_kill: not found: {', '.join(missing)} (build them: scripts/build.sh)")
    work = tempfile.mkdtemp(prefix="front-kill-"); ckpt = os.path.join(work, "ckpt")
    subprocess.run([which["fastrestart-tinyengine"], "gen", "--out", ckpt], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    d = a.results or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                  f"front-kill-{socket.gethostname()}-{datetime.datetime.utcnow():%Y%m%d}")
    if a.part in ("all", "kv"):
        kv = kv_continuations(work, ckpt, which, a)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "front_kv_continuations.json"), "w") as f: json.dump(kv, f, indent=1)
        print("wrote", os.path.join(d, "front_kv_continuations.json"))
        if a.part == "kv":
            shutil.rmtree(work, ignore_errors=True)
            return
    if a.part == "cost":
        out = cost_only(work, ckpt, which, a)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, a.out or "front_cost.json")
        with open(path, "w") as f: json.dump(out, f, indent=1)
        print("wrote", path)
        shutil.rmtree(work, ignore_errors=True)
        return
    sups = {}
    try:
        for mode in ("front", "supervisor"):
            sups[mode] = launch(work, mode, ckpt, which, a)
        for mode, sup in sups.items():
            sup.wait(ready_engine(), f"the first engine ({mode})", 120)
        front_st = sups["front"].status()
        fr.log(f"ready: front on {sups['front'].port} (pid {front_st['front']['pid']}, upstream "
               f"{front_st['front'].get('upstream')}), supervisor on {sups['supervisor'].port}")
        want = {}
        for i in range(16):
            for stream in (False, True):
                b = body_of(i, stream); ok, got = ask(sups["front"].port, b)
                assert ok, got
                want[b] = normalize(got) if stream else got
                ok2, got2 = ask(sups["supervisor"].port, b)
                assert ok2 and (normalize(got2) if stream else got2) == want[b], f"the two modes answer otherwise: {got2}"
        out = {"host": socket.gethostname(), "date": datetime.datetime.utcnow().isoformat() + "Z",
               "machine": fr.machine_cpu(), "max_tokens": MAX_TOKENS, "token_delay_s": a.token_delay,
               "engine_threads": a.threads, "front_hold_s": HOLD_S, "kills": a.kills, "seconds": a.seconds, "load": []}
        for clients in [int(c) for c in a.clients.split(",")]:
            for mode, sup in sups.items():
                before = front_counters(sup.status()) if mode == "front" else None
                r = run_load(sup, clients, a.seconds, a.kills, want)
                r.update(clients=clients, mode=mode)
                if mode == "front":
                    r["front_before"], r["front_after"] = before, front_counters(sup.status())
                out["load"].append(r)
                print(json.dumps({k: r[k] for k in ("mode", "clients", "requests", "streams", "failed", "differ",
                                                    "failed_by", "slowest_s", "took_s")}), flush=True)
        # The front's cost without kills, one client at a time: through the front, and straight to the same
        # engine on fastrestartd's loopback socket.
        st = sups["front"].status()
        front_pid = st["front"]["pid"]
        upstream = int(st["front"]["upstream"].rsplit(":", 1)[1])
        cost = {}
        for via, port in (("front", sups["front"].port), ("direct", upstream)):
            lat = []
            for i in range(100):
                t = time.perf_counter(); ok, _ = ask(port, body_of(i % 16, False)); lat.append(time.perf_counter() - t)
            cpu0 = cpu_s(front_pid); t0 = time.perf_counter(); tokens = 0
            for i in range(40):
                ok, got = ask(port, body_of(i % 16, True)); tokens += got.count('"finish_reason":') - got.count('"choices":[]')
            dt = time.perf_counter() - t0
            cost[via] = {"p50_ms": statistics.median(lat) * 1e3, "stream_tokens_per_s": tokens / dt, "stream_tokens": tokens,
                         "front_cpu_s_per_1000_tokens": (cpu_s(front_pid) - cpu0) / tokens * 1000 if via == "front" else None}
        cost["added_p50_ms"] = cost["front"]["p50_ms"] - cost["direct"]["p50_ms"]
        out["no_kill"] = cost
        out["front_status"] = sups["front"].status().get("front")
        print(json.dumps(cost), flush=True)
    finally:
        for sup in sups.values():
            sup.stop(30)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "front_kill.json"), "w") as f: json.dump(out, f, indent=1)
    print("wrote", os.path.join(d, "front_kill.json"))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What clients see across kill -9 of the reference engine on a GPU: engine.listen = "front" beside "supervisor".

One command (on the GPU machine: scripts/gpu-run.sh front):
  python3 bench/front_kill_ref.py --bin .bundle/bin --checkpoint MODEL [--clients 64,256] [--kills 2] [--out DIR]
Raw JSON: DIR/front_kill_ref-<UTC stamp>.json, written after every part. Exit 2 on a violation (violations()):
a request through the front failed, or a continued batch-1 stream differs.

fastrestartd runs the batched reference engine (python/refengine, shaped like vLLM: the KV cache at the
engine's share of the GPU in the CUDA daemon's KV arena, CUDA graphs per batch size) with a `warmed`
standby, as an operator would, once per mode, one after the other (each takes the GPU):
  front       engine.listen = "front": fastrestart-front holds the clients' connections; the engine serves
              fastrestartd's loopback socket.
  supervisor  engine.listen = "supervisor": the clients connect to the port fastrestartd holds and hands to
              each engine.
Per mode:
  - the uninterrupted answers: 16 prompts, plain and streamed (greedy, MAX_TOKENS each), one at a time;
  - load: for each --clients count (half of the clients streaming), --kills kill -9 of the engine pid that
    fastrestartd's status names, each once the standby is parked and the load has run --settle-s; every
    answer is checked: a failure (error, reset, timeout, error event, status other than 200) or an answer
    other than the uninterrupted one ("differ": a batch of another size may flip a near-tie: counted apart);
  - front only, batch 1: --single-kills streams, each alone, the engine killed after it read a random number
    of token events: its answer must be the uninterrupted one token for token, and its extra wait (its time
    minus the uninterrupted stream's) is set beside the service gap (kill(2) -> the next engine's READY).
    The oracle is the second of two uninterrupted streams of the same body: the first fills the prefix
    cache, and the killed stream, like any repeat of a prompt, reads the prompt's blocks from it, so the
    oracle must too; both are kept, and whether they differ (`fresh_vs_cached`).
"""
import argparse, json, os, random, shutil, signal, subprocess, sys, tempfile, threading, time

import fastrestartd_run as fr
import front_kill as fk

HERE = os.path.dirname(os.path.abspath(__file__))
REFENGINE = os.path.join(HERE, "..", "python", "refengine", "fastrestart_refengine.py")
MAX_TOKENS = 32


def config(d, a, mode, port):
    """fastrestartd's config of one mode: the reference engine on the GPU (--engine ref), or the tiny engine on
    the CPU (--engine tiny: this bench's own test, with a host daemon's KV arena)."""
    run = os.path.join(d, "run")
    flags = ["--host", "127.0.0.1", "--port", str(port), "--served-model-name", "t", "--load-format", "fastrestart",
             "--fastrestart-socket-dir", run]
    weights = {"mode": "zero_copy", "checkpoint": a.checkpoint, "daemon_path": a.which["fastrestart-weightd"]}
    tables = {"standby": {"level": "warmed"}}
    if a.engine == "ref":
        command = [sys.executable, REFENGINE, "serve", a.checkpoint]
        flags += ["--kv-arena", "kv", "--max-model-len", str(a.max_model_len)]
        flags += ["--max-num-seqs", str(a.max_num_seqs)] if a.max_num_seqs else []
        weights.update(backend="cuda", key=fr.REFENGINE_WEIGHTS_KEY, host_arenas=True)
        tables.update(top={"gpus": ["0"]}, memory={"check_free": False})
        grace, check = 20, 30
    else:
        command = [a.which["fastrestart-tinyengine"], "serve", a.checkpoint]
        flags += ["--shutdown-grace", "2", "--kv-arena-bytes", str(32 << 20), "--kv-arena-wait", "10",
                  "--threads", "64", "--fault-token-delay", str(a.token_delay)]
        weights.update(backend="host")
        grace, check = 5, 5
    if mode == "front":
        tables["front"] = {"hold_s": fk.HOLD_S, "path": a.which["fastrestart-front"]}
    return fr.supervisor_config(
        d, "t", command, flags, port, weights,
        engine={"stop_grace_s": grace, "listen": mode, "listen_backlog": 4096},
        # READY at the engine's first possible answer, not behind the clients' requests queued (or re-sent by
        # the front) while it was dead (docs/listen-socket.md, "The private endpoint")
        readiness={"check_interval_s": check, "startup_timeout_s": 300, "endpoint": "private"},
        restart={"warm_failures_before_cold": 0, "start": ["standby", "warm", "cold"]}, **tables)


def body_of(i, stream):
    return fk.body_of(i, stream, MAX_TOKENS)


def parked(st):
    return st.get("state") == "ready" and (st.get("standby") or {}).get("state") == "parked"


class Mode:
    def __init__(self, a, mode, work):
        self.a, self.mode = a, mode
        d = os.path.join(work, mode)
        self.port = fr.free_port()
        self.sup = fr.Fastrestartd(d, config(d, a, mode, self.port), fr.control_socket(d),
                                   fastrestartd=a.which["fastrestartd"], fastrestartctl=a.which["fastrestartctl"])
        why = self.sup.check()
        if why:
            sys.exit(f"front_kill_ref: fastrestartd --check ({mode}) refused the config: {why}")
        self.sup.port = self.port

    def start(self):
        self.sup.start()
        return self.sup.wait(parked, f"the first engine and a parked standby ({self.mode})", self.a.ready_timeout)

    def kill(self, t0):
        """kill -9 of the live engine once the standby is parked; returns the kill's record at the next READY."""
        st = self.sup.wait(parked, "a parked standby", self.a.ready_timeout)
        pid = st["engine"]["pid"]
        c = fr.KillClock(pid).kill()
        st = self.sup.wait(fk.ready_engine(pid, c.t_kill), f"an engine after the kill of {pid}", self.a.ready_timeout)
        c.ready(st)
        rec = {k: c.rec.get(k) for k in ("pid", "path", "kill_to_ready_s", "kill_to_reap_s", "reap_to_ready_s")}
        rec["at_s"] = round(c.t_kill - t0, 3)
        return rec, c


def uninterrupted(m):
    want = {}
    for i in range(16):
        for stream in (False, True):
            b = body_of(i, stream)
            ok, got = fk.ask(m.port, b)
            if not ok:
                raise RuntimeError(f"the uninterrupted answer to {b} failed: {got[:300]}")
            want[b] = fk.normalize(got) if stream else got
    return want


def run_load(m, clients, want):
    """CLIENTS clients (half streaming) while --kills kill -9 land, each once the standby is parked and the
    load ran --settle-s since the start or the previous READY; the load runs --settle-s past the last."""
    a = m.a
    res = {"clients": clients, "mode": m.mode, "requests": 0, "failed": 0, "differ": 0, "streams": 0,
           "failed_by": {}, "examples": [], "slowest_s": 0.0, "kills": []}
    lock, stop = threading.Lock(), threading.Event()
    t0 = time.monotonic()

    def client(i):
        stream = i % 2 == 0
        body = body_of(i % 16, stream)
        while not stop.is_set():
            t = time.monotonic()
            ok, got = fk.ask(m.port, body, timeout=120)
            dt = time.monotonic() - t
            same = ok and ((fk.normalize(got) == want[body]) if stream else got == want[body])
            with lock:
                res["requests"] += 1
                res["streams"] += stream
                res["slowest_s"] = max(res["slowest_s"], round(dt, 3))
                if not ok:
                    res["failed"] += 1
                    k = fk.kind_of(got)
                    res["failed_by"][k] = res["failed_by"].get(k, 0) + 1
                elif not same:
                    res["differ"] += 1
                if (not ok or not same) and len(res["examples"]) < 4:
                    res["examples"].append({"after_s": round(t - t0, 3), "took_s": round(dt, 3), "got": got[:400]})

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    before = fk.front_counters(m.sup.status()) if m.mode == "front" else None
    for t in threads:
        t.start()
    try:
        for _ in range(a.kills):
            time.sleep(a.settle_s)
            rec, _ = m.kill(t0)
            res["kills"].append(rec)
        time.sleep(a.settle_s)
    finally:
        stop.set()
        # a request held across the last kill ends within ready_timeout; after SIGTERM the bench stops now
        end = time.monotonic() + (2 if STOPPING else a.ready_timeout)
        for t in threads:
            t.join(max(0.0, end - time.monotonic()))
    res["stuck_clients"] = sum(t.is_alive() for t in threads)
    res["took_s"] = round(time.monotonic() - t0, 3)
    if before is not None:
        res["front_before"], res["front_after"] = before, fk.front_counters(m.sup.status())
    return res


def stream_texts(text):
    """The generated tokens of a stream: its chunks' texts, in order."""
    toks = []
    for ev in text.split("\n\n"):
        if ev.startswith("data: {"):
            toks += [c.get("text") for c in json.loads(ev[6:]).get("choices") or []]
    return toks


def first_diff(got, want):
    """The index of the first token where two token lists differ (the shorter one's length when it is the
    other's beginning); None when they are equal."""
    if got == want:
        return None
    return next((j for j, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))


def uninterrupted_stream(m, body):
    """One stream read whole without a kill: (its text, seconds)."""
    t = time.monotonic()
    ok, text = fk.read_stream(m.port, body)
    took = time.monotonic() - t
    if not ok:
        raise RuntimeError(f"the uninterrupted stream failed: {text[:300]}")
    return text, took


def single_streams(m, rng):
    """Batch 1: one stream at a time, twice uninterrupted, then again with the engine killed after it read a
    random number of token events: the same tokens as the second uninterrupted stream (the oracle), and the
    extra wait beside the service gap. The first uninterrupted stream fills the prefix cache; the oracle and
    the killed stream read the prompt's blocks from it (an engine not bitwise equal over cached and computed
    positions answers a prompt's first computation otherwise: `fresh_vs_cached`, how often)."""
    out = []
    for k in range(m.a.single_kills):
        body = body_of(k % 16, True)
        st = m.sup.wait(parked, "a parked standby", m.a.ready_timeout)
        fresh, _ = uninterrupted_stream(m, body)
        want, alone_s = uninterrupted_stream(m, body)
        at = rng.randint(2, MAX_TOKENS - 4)
        pid = st["engine"]["pid"]
        clock = fr.KillClock(pid)
        t = time.monotonic()
        ok, got = fk.read_stream(m.port, body, at, clock.kill)
        dt = time.monotonic() - t
        st = m.sup.wait(fk.ready_engine(pid, clock.t_kill), f"an engine after the kill of {pid}", m.a.ready_timeout)
        clock.ready(st)
        rec = {"killed_after_events": at, "ok": ok, "took_s": round(dt, 4), "uninterrupted_s": round(alone_s, 4),
               "extra_wait_s": round(dt - alone_s, 4), "path": clock.rec.get("path"),
               "kill_to_ready_s": clock.rec.get("kill_to_ready_s"),
               "tokens_equal": ok and stream_texts(got) == stream_texts(want),
               "got_tokens": stream_texts(got) if ok else None, "want_tokens": stream_texts(want),
               "fresh_tokens": stream_texts(fresh)}
        fresh_diff = first_diff(rec["fresh_tokens"], rec["want_tokens"])
        rec["fresh_vs_cached"] = {"equal": True} if fresh_diff is None else {"equal": False, "first_diff": fresh_diff}
        if ok and not rec["tokens_equal"]:
            rec["first_diff"] = first_diff(rec["got_tokens"], rec["want_tokens"])
        if rec["kill_to_ready_s"] is not None:
            rec["extra_minus_gap_s"] = round(rec["extra_wait_s"] - rec["kill_to_ready_s"], 4)
        if not ok or not rec["tokens_equal"]:
            rec["got"], rec["want"] = got[:600], want[:600]
        fr.log(f"  batch-1 kill {k + 1}: " + json.dumps({x: rec[x] for x in rec if x not in ("got", "want", "got_tokens",
                                                                                              "want_tokens", "fresh_tokens")}))
        out.append(rec)
    return out


def violations(res):
    """What breaks the front's promise: a failed request through it (in flight at a kill included), a batch-1
    stream continued with other tokens, or, for the tiny engine (bit-exact at any batch), any answer other
    than the uninterrupted one. The reference engine's batched answers may differ at a near-tie between
    batch sizes: counted, not a violation. The supervisor mode's failures are what the front saves."""
    out = []
    front = res["modes"].get("front") or {}
    if front.get("error"):
        out.append(f"front: {front['error']}")
    for r in front.get("load", []):
        if r["failed"]:
            out.append(f"front, {r['clients']} clients: {r['failed']} failed {r['failed_by']}")
        if r["differ"] and res["args"]["engine"] == "tiny":
            out.append(f"front, {r['clients']} clients: {r['differ']} answers differ")
    for i, b in enumerate(front.get("batch1", [])):
        if not b["ok"] or not b["tokens_equal"]:
            out.append(f"front, batch-1 stream {i + 1}: " + ("failed" if not b["ok"] else "other tokens"))
    return out


STOPPING = False


def interrupted(*_):
    global STOPPING
    STOPPING = True
    raise KeyboardInterrupt("SIGTERM")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=["ref", "tiny"], default="ref")
    ap.add_argument("--token-delay", type=float, default=0.01, help="--engine tiny: s between its tokens")
    ap.add_argument("--bin", default="build", help="a build tree, or a folder holding the programs (.bundle/bin)")
    ap.add_argument("--checkpoint", help="the model (--engine ref: bench/gen_llama_checkpoint.py's; --engine "
                    "tiny: default one generated)")
    ap.add_argument("--clients", default="64,256")
    ap.add_argument("--kills", type=int, default=2, help="kill -9 per client count and mode")
    ap.add_argument("--single-kills", type=int, default=3, help="front: batch-1 streams killed mid-way")
    ap.add_argument("--settle-s", type=float, default=4.0)
    ap.add_argument("--modes", default="front,supervisor")
    ap.add_argument("--max-num-seqs", type=int, help="the engine's slots (default: vLLM's rule)")
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--ready-timeout", type=float, default=300)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    a = ap.parse_args()
    needed = ["fastrestartd", "fastrestartctl", "fastrestart-weightd", "fastrestart-front"]
    needed += ["fastrestart-tinyengine"] if a.engine == "tiny" else []
    a.which = fr.find_programs(a.bin, needed)
    for name in needed:
        if not a.which[name]:
            sys.exit(f"front_kill_ref: {name} not found in {a.bin} (as a build tree or a folder) or on PATH")
    work = tempfile.mkdtemp(prefix="front-kill-ref-")
    if not a.checkpoint and a.engine == "ref":
        sys.exit("front_kill_ref: --checkpoint: the reference engine's model (bench/gen_llama_checkpoint.py)")
    if not a.checkpoint:
        a.checkpoint = os.path.join(work, "model")
        subprocess.run([a.which["fastrestart-tinyengine"], "gen", "--out", a.checkpoint], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"front_kill_ref-{time.strftime('%Y-%m-%dT%H%M%SZ', time.gmtime())}.json")
    res = {"args": {k: v for k, v in vars(a).items() if k != "which"}, "machine": fr.machine_cpu(),
           "gpu": (fr.nvidia_smi("--query-gpu=name,memory.total") or "").strip(), "max_tokens": MAX_TOKENS,
           "front_hold_s": fk.HOLD_S, "modes": {}}

    def save():
        with open(path, "w") as f:
            json.dump(res, f, indent=1)

    signal.signal(signal.SIGTERM, interrupted)
    rc = 0
    for mode in a.modes.split(","):
        m = Mode(a, mode, work)
        out = res["modes"][mode] = {"load": []}
        try:
            t = time.monotonic()
            m.start()
            out["first_ready_s"] = round(time.monotonic() - t, 2)
            want = uninterrupted(m)
            save()
            for clients in [int(c) for c in a.clients.split(",")]:
                r = run_load(m, clients, want)
                out["load"].append(r)
                save()
                print(json.dumps({k: r[k] for k in ("mode", "clients", "requests", "streams", "failed", "differ",
                                                    "failed_by", "slowest_s", "took_s")}), flush=True)
            if mode == "front" and a.single_kills:
                out["batch1"] = single_streams(m, rng)
                save()
        except (Exception, KeyboardInterrupt) as e:
            out["error"] = f"{type(e).__name__}: {e}"
            fr.log(f"front_kill_ref ({mode}): {out['error']}")
            rc = 1
        finally:
            out["front_status"] = (m.sup.try_status() or {}).get("front")
            out["stop_exit"] = m.sup.stop(30)
            save()
            # What each restart spent its time on (the engine's phases, the index's recovery), kept beside the
            # JSON: the lines of fastrestartd's log that tell a restart's steps, not the requests' noise.
            steps = ("READY", "exited", "released", "leased KV arena", "prefix index:", "fastrestart-kv:",
                     "batched forward vs", "load path=", "ready in ")
            try:  # a fastrestartd that never started wrote no log: the error above says why
                log = m.sup.text()
            except OSError:
                log = ""
            with open(f"{path[:-5]}-{mode}-fastrestartd.log", "w") as f:
                f.write("".join(line for line in log.splitlines(keepends=True) if any(k in line for k in steps)))
        if rc:
            break
    shutil.rmtree(work, ignore_errors=True)
    res["violations"] = violations(res)
    save()
    for v in res["violations"]:
        print("VIOLATION:", v, flush=True)
    print("wrote", path)
    return rc or (2 if res["violations"] else 0)


if __name__ == "__main__":
    sys.exit(main())

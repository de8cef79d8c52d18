#!/usr/bin/env python3
"""fastrestart-front under kill -9 of the engine, beside clients talking to the engine directly.

One command: python3 bench/front_kill.py [--build build] [--kills 3] [--seconds 8]
Writes raw JSON to bench/results/front-kill-<host>-<date>/front_kill.json.

The tiny engine (fastrestart-tinyengine, CPU) serves on a loopback port; fastrestart-front listens on a
socket this script owns (passed as fd 3, LISTEN_FDS=1, as fastrestartd or systemd pass it) with
--upstream that port. The upstream here is the engine's own port, rebound by the next engine after each
kill (the front holds requests and retries refused connections until it answers), not fastrestartd's
listen socket. For each of 64 and 256 concurrent clients (half streaming), two runs under the same kill
schedule: through the front, and straight to the engine. Every answer is compared with the uninterrupted
answer to the same request (streams byte for byte, their id and created replaced; plain answers without
id and created); a failure is an error, a reset, an error event, or an answer that differs. Then the
front's cost without kills: p50 latency of a non-streamed request, streamed tokens/s, and the front's CPU
seconds per 1,000 streamed tokens.
"""
import argparse, concurrent.futures as cf, datetime, http.client, json, os, random, signal, socket
import statistics, subprocess, sys, tempfile, threading, time

MAX_TOKENS = 24


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


class Engine:
    def __init__(self, bin_, ckpt, port, delay):
        self.cmd = [bin_, "serve", ckpt, "--port", str(port), "--threads", "64", "--fault-token-delay", str(delay)]
        self.port = port
        self.p = None

    def start(self):
        self.p = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        until = time.time() + 30
        while time.time() < until:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1); c.request("GET", "/health")
                if c.getresponse().status == 200: return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("engine did not start")

    def kill(self):
        self.p.send_signal(signal.SIGKILL); self.p.wait()


def start_front(bin_, listen, upstream_port, status):
    def child():
        os.dup2(listen.fileno(), 3)
        os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="1", LISTEN_FDNAMES="fastrestart-engine")
    return subprocess.Popen([bin_, "--upstream", f"127.0.0.1:{upstream_port}", "--hold-s", "30",
                             "--status-file", status], preexec_fn=child, pass_fds=(listen.fileno(),),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def body_of(i, stream):
    b = {"prompt": f"client {i} asks", "max_tokens": MAX_TOKENS, "temperature": 0}
    if stream: b.update(stream=True, stream_options={"include_usage": True})
    return json.dumps(b)


def ask(port, body, timeout=60):
    """(ok, answer text) for one request; a stream is its body, else the JSON without id/created."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse(); data = r.read().decode("utf-8", "replace"); c.close()
    except (OSError, http.client.HTTPException) as e:
        return False, repr(e)
    if r.status != 200: return False, f"{r.status} {data[:200]}"
    if '"stream": true' in body:
        return ('"error"' not in data and data.endswith("data: [DONE]\n\n")), data
    j = json.loads(data); j.pop("id", None); j.pop("created", None)
    return True, json.dumps(j, sort_keys=True)


def normalize(stream):
    """A stream with its (single) id and created masked: the rest must be byte-equal."""
    first = json.loads(stream.split("\n\n")[0][6:])
    return stream.replace(json.dumps(first["id"]), '"ID"').replace(f'"created":{first["created"]}', '"created":0')


def run_load(port, clients, seconds, engine, kills, want):
    stop = time.time() + seconds
    res = {"requests": 0, "failed": 0, "differ": 0, "streams": 0, "examples": []}
    lock = threading.Lock()

    def client(i):
        stream = i % 2 == 0
        body = body_of(i % 16, stream)
        while time.time() < stop:
            ok, got = ask(port, body)
            same = ok and ((normalize(got) == want[body]) if stream else got == want[body])
            with lock:
                res["requests"] += 1; res["streams"] += stream
                if not ok: res["failed"] += 1
                elif not same: res["differ"] += 1
                if (not ok or not same) and len(res["examples"]) < 3: res["examples"].append(got[:300])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads: t.start()
    for k in range(kills):
        time.sleep(seconds / (kills + 1))
        engine.kill(); engine.start()
    for t in threads: t.join()
    return res


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build"); ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8); ap.add_argument("--token-delay", type=float, default=0.01)
    a = ap.parse_args()
    te = os.path.join(a.build, "src/tinyengine/fastrestart-tinyengine"); fb = os.path.join(a.build, "src/front/fastrestart-front")
    tmp = tempfile.mkdtemp(prefix="front-kill-"); ckpt = os.path.join(tmp, "ckpt")
    subprocess.run([te, "gen", "--out", ckpt], check=True, stdout=subprocess.DEVNULL)
    eport = free_port()
    listen = socket.socket(); listen.bind(("127.0.0.1", 0)); listen.listen(1024); fport = listen.getsockname()[1]
    engine = Engine(te, ckpt, eport, a.token_delay); engine.start()
    front = start_front(fb, listen, eport, os.path.join(tmp, "status.json"))
    time.sleep(0.3)
    want = {}
    for i in range(16):
        for stream in (False, True):
            b = body_of(i, stream); ok, got = ask(fport, b)
            assert ok, got
            want[b] = normalize(got) if stream else got
    out = {"host": socket.gethostname(), "date": datetime.datetime.utcnow().isoformat() + "Z", "cpus": os.cpu_count(),
           "max_tokens": MAX_TOKENS, "token_delay_s": a.token_delay, "kills": a.kills, "seconds": a.seconds, "load": []}
    for clients in (64, 256):
        for via, port in (("front", fport), ("direct", eport)):
            r = run_load(port, clients, a.seconds, engine, a.kills, want)
            r.update(clients=clients, via=via); out["load"].append(r)
            print(json.dumps({k: r[k] for k in ("via", "clients", "requests", "streams", "failed", "differ")}), flush=True)
    out["front_status"] = json.load(open(os.path.join(tmp, "status.json")))
    # The front's cost without kills, one client at a time.
    cost = {}
    for via, port in (("front", fport), ("direct", eport)):
        lat = []
        for i in range(100):
            t = time.perf_counter(); ok, _ = ask(port, body_of(i % 16, False)); lat.append(time.perf_counter() - t)
        cpu0 = cpu_s(front.pid); t0 = time.perf_counter(); tokens = 0
        for i in range(40):
            ok, got = ask(port, body_of(i % 16, True)); tokens += got.count('"finish_reason":') - got.count('"choices":[]')
        dt = time.perf_counter() - t0
        cost[via] = {"p50_ms": statistics.median(lat) * 1e3, "stream_tokens_per_s": tokens / dt, "stream_tokens": tokens,
                     "front_cpu_s_per_1000_tokens": (cpu_s(front.pid) - cpu0) / tokens * 1000 if via == "front" else None}
    cost["added_p50_ms"] = cost["front"]["p50_ms"] - cost["direct"]["p50_ms"]
    out["no_kill"] = cost
    print(json.dumps(cost), flush=True)
    front.send_signal(signal.SIGTERM); front.wait(); engine.kill()
    d = os.path.join(os.path.dirname(__file__), "results",
                     f"front-kill-{socket.gethostname()}-{datetime.datetime.utcnow():%Y%m%d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "front_kill.json"), "w") as f: json.dump(out, f, indent=1)
    print("wrote", os.path.join(d, "front_kill.json"))


if __name__ == "__main__":
    main()

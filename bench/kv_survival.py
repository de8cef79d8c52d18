#!/usr/bin/env python3
"""Time to first token of a request with a long cached prefix, on the CPU, around a kill -9
(docs/kv-survival.md): cached before the kill; after the kill on the same KV arena with its index; after
the kill with the index dropped (another --block-size: another identity); and with
--no-enable-prefix-caching. One command; raw samples in bench/results/kv_survival-<stamp>.json.

  bench/kv_survival.py [--build build] [--prefix-tokens 900] [--samples 5]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def wait_file(path, proc, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if os.path.exists(path) and open(path).read().strip():
            return open(path).read().strip()
        if proc.poll() is not None:
            sys.exit(f"process exited with {proc.returncode} before writing {path}")
        time.sleep(0.02)
    sys.exit(f"timed out waiting for {path}")


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        return json.loads(r.read())


def ttft(port, prompt):
    """Seconds for a completion of one token: the prompt's prefill plus one step."""
    body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as r:
        r.read()
    return time.perf_counter() - t


class Engine:
    def __init__(self, binary, model, work, name, args):
        self.port_file = os.path.join(work, name + ".port")
        self.log = open(os.path.join(work, name + ".log"), "w")
        self.proc = subprocess.Popen([binary, "serve", model, "--port", "0", "--port-file", self.port_file] + args,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.port = int(wait_file(self.port_file, self.proc))
        end = time.time() + 120
        while time.time() < end:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.02)
        self.kv = get(self.port, "/stats")["kv_cache"]

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--prefix-tokens", type=int, default=900)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    a = ap.parse_args()
    te = os.path.join(a.build, "src/tinyengine/fastrestart-tinyengine")
    weightd = os.path.join(a.build, "src/daemon/fastrestart-weightd")
    work = tempfile.mkdtemp(prefix="kv-survival-")
    model = os.path.join(work, "model")
    config = ["--d-model", "256", "--n-heads", "8", "--n-layers", "8", "--d-ff", "1024", "--max-seq", "1024"]
    subprocess.run([te, "gen", "--out", model, "--seed", "5"] + config, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    sockets = os.path.join(work, "run")
    os.mkdir(sockets, 0o700)
    dlog = open(os.path.join(work, "weightd.log"), "w")
    daemon = subprocess.Popen([weightd, "--backend", "host", "--socket-dir", sockets], stdout=dlog, stderr=subprocess.STDOUT)
    wait_sock = time.time() + 30
    while not os.path.exists(os.path.join(sockets, "weightd-host.sock")) and time.time() < wait_sock:
        time.sleep(0.02)
    arena = ["--fastrestart-socket-dir", sockets, "--kv-arena-bytes", str(256 << 20), "--kv-arena-wait", "10"]
    prefix = ("You are a careful assistant. " * 64)[: a.prefix_tokens]
    q = lambda tag, i: prefix + f" [{tag} question {i}]?"
    res = {"prefix_tokens": len(prefix), "samples": a.samples, "config": config, "runs": {}}
    try:
        e = Engine(te, model, work, "before", arena)
        res["runs"]["cold_first_request"] = [ttft(e.port, q("cold", 0))]
        res["runs"]["cached_before_kill"] = [ttft(e.port, q("before", i)) for i in range(a.samples)]
        e.kill9()
        e = Engine(te, model, work, "after", arena)
        res["recovery_with_index"] = e.kv["recovery"]
        res["runs"]["after_kill_with_index"] = [ttft(e.port, q("after", i)) for i in range(a.samples)]
        e.kill9()
        e = Engine(te, model, work, "dropped", arena + ["--block-size", "8"])
        res["recovery_index_dropped"] = e.kv["recovery"]
        res["runs"]["after_kill_index_dropped_first_request"] = [ttft(e.port, q("dropped", 0))]
        e.kill9()
        e = Engine(te, model, work, "nocache", ["--no-enable-prefix-caching"])
        res["runs"]["no_prefix_caching"] = [ttft(e.port, q("nocache", i)) for i in range(a.samples)]
        e.kill9()
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait()
    os.makedirs(a.out, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    res["host"] = {"cpus": os.cpu_count(), "uname": " ".join(os.uname())}
    path = os.path.join(a.out, f"kv_survival-{stamp}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(f"prefix {len(prefix)} tokens, median of {a.samples} (ms); raw: {path}")
    for k, v in res["runs"].items():
        print(f"  {k:42s} {statistics.median(v) * 1e3:9.2f}")
    print(f"  recovered with index: {res['recovery_with_index']['recovered']} blocks; "
          f"index dropped: header={res['recovery_index_dropped']['header']}")


if __name__ == "__main__":
    main()

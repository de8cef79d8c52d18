#!/usr/bin/env python3
"""Time to first token of a request with a long cached prefix around a kill -9, from the client's clock.

--engine tiny (default; the CPU; docs/kv-survival.md): cached before the kill; after the kill on the same KV
arena with its index; after the kill with the index dropped (another --block-size: another identity); and
with --no-enable-prefix-caching. Raw samples in bench/results/kv_survival-<stamp>.json.

  bench/kv_survival.py [--build build] [--prefix-tokens 900] [--samples 5]

--engine ref (a GPU; docs/refengine.md, "Prefix reuse across a kill"): the batched reference engine with
its KV cache in the cuda daemon's arena and its prefix index in the host daemon's arena, side by side in one
run: the first request (nothing cached), cached before the kill, after kill -9 with the index, after kill -9
with the index dropped (the host arena released with fastrestart-weightctl: the next engine finds none),
and --no-enable-prefix-caching. Raw samples in bench/results/kv_survival_ref-<stamp>.json.

  bench/kv_survival.py --engine ref --bin-dir .bundle/bin [--model DIR | --shape 8b|tiny] \
      [--prefix-tokens 8192] [--samples 5]
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


HERE = os.path.dirname(os.path.abspath(__file__))
REFENGINE = os.path.join(HERE, "..", "python", "refengine", "fastrestart_refengine.py")


class RefEngine:
    """The reference engine serving `model` on cuda:0 until ready (its /health), with its /stats."""

    def __init__(self, model, work, name, args, timeout=900):
        self.log = open(os.path.join(work, name + ".log"), "w")
        self.port = free_port()
        t = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, REFENGINE, "serve", model, "--port", str(self.port),
                                      "--served-model-name", "m"] + args, stdout=self.log, stderr=subprocess.STDOUT)
        end = time.time() + timeout
        while True:
            if self.proc.poll() is not None:
                sys.exit(f"{name}: the engine exited with {self.proc.returncode}; see {self.log.name}")
            if time.time() > end:
                self.proc.kill()
                sys.exit(f"{name}: not ready in {timeout} s; see {self.log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        self.ready_s = time.perf_counter() - t
        self.stats = get(self.port, "/stats")
        self.prefix = self.stats["batch"].get("prefix")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_daemon(binary, sockets, backend, work):
    log = open(os.path.join(work, f"weightd-{backend}.log"), "w")
    argv = [binary, "--backend", backend, "--socket-dir", sockets] + (["--gpu", "0"] if backend == "cuda" else [])
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    end = time.time() + 60
    want = "weightd-host.sock" if backend == "host" else None
    while time.time() < end:
        names = [n for n in os.listdir(sockets) if n.endswith(".sock")]
        if (want in names) if want else any(n != "weightd-host.sock" for n in names):
            return p
        if p.poll() is not None:
            sys.exit(f"fastrestart-weightd --backend {backend} exited; see {log.name}")
        time.sleep(0.05)
    sys.exit(f"fastrestart-weightd --backend {backend}: no socket in 60 s")


def keep_logs(work, out, lines=300):
    """The engines' and daemons' logs (their last `lines` lines) into `out`: the run's work dir is temporary."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "kv_survival_logs.txt"), "w") as f:
        for name in sorted(n for n in os.listdir(work) if n.endswith(".log")):
            with open(os.path.join(work, name), errors="replace") as g:
                tail = g.readlines()[-lines:]
            f.write(f"==> {name} (last {len(tail)} lines)\n")
            f.writelines(tail)


def main_ref(a):
    work = tempfile.mkdtemp(prefix="kv-survival-ref-")
    model = a.model
    if not model:
        model = os.path.join(work, "model")
        subprocess.run([sys.executable, os.path.join(HERE, "gen_llama_checkpoint.py"), model, "--shape", a.shape],
                       check=True, stdout=subprocess.DEVNULL)
    sockets = os.path.join(work, "run")
    os.mkdir(sockets, 0o700)
    weightd = os.path.join(a.bin_dir, "fastrestart-weightd")
    weightctl = os.path.join(a.bin_dir, "fastrestart-weightctl")
    daemons = [start_daemon(weightd, sockets, "cuda", work), start_daemon(weightd, sockets, "host", work)]
    # A prompt is its UTF-8 bytes (the reference engine's tokens): the prefix is prefix_tokens bytes.
    prefix = ("You are a careful assistant. " * (a.prefix_tokens // 29 + 1))[: a.prefix_tokens]
    q = lambda tag, i: prefix + f" [{tag} question {i}]?"
    max_len = a.prefix_tokens + 256
    flags = ["--load-format", "fastrestart", "--max-num-seqs", "4", "--max-model-len", str(max_len), "--kv-arena", "kv",
             "--fastrestart-socket-dir", sockets]
    res = {"engine": "ref", "prefix_tokens": len(prefix), "samples": a.samples, "model": model, "flags": flags,
           "runs": {}, "ready_s": {}, "prefix": {}}
    try:
        e = RefEngine(model, work, "before", flags)
        res["ready_s"]["before"], res["prefix"]["before"] = e.ready_s, e.prefix
        res["runs"]["cold_first_request"] = [ttft(e.port, q("cold", 0))]
        res["runs"]["cached_before_kill"] = [ttft(e.port, q("before", i)) for i in range(a.samples)]
        e.kill9()
        e = RefEngine(model, work, "after", flags)
        res["ready_s"]["after_kill_with_index"], res["prefix"]["after_kill_with_index"] = e.ready_s, e.prefix
        res["runs"]["after_kill_with_index"] = [ttft(e.port, q("after", i)) for i in range(a.samples)]
        e.kill9()
        # The index dropped: its host arena released (nothing holds it once the engine is gone). An engine
        # that kept its index in private memory (the prefix info's arena_fallback says why) has none to release:
        # recorded, and the run goes on (its "with the index" row is then a run without one).
        rel = subprocess.run([weightctl, "--socket-dir", sockets, "--device", "host", "arena-release", "kv-index"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        res["index_release"] = {"exit": rel.returncode, "stderr": rel.stderr.strip()}
        if rel.returncode != 0:
            print(f"kv_survival: the index's host arena was not released: {rel.stderr.strip()}; prefix info "
                  f"{json.dumps(res['prefix'])}", file=sys.stderr)
        e = RefEngine(model, work, "dropped", flags)
        res["ready_s"]["after_kill_index_dropped"], res["prefix"]["after_kill_index_dropped"] = e.ready_s, e.prefix
        res["runs"]["after_kill_index_dropped_first_request"] = [ttft(e.port, q("dropped", 0))]
        res["runs"]["after_kill_index_dropped_then_cached"] = [ttft(e.port, q("dropped", i + 1)) for i in range(a.samples)]
        e.kill9()
        e = RefEngine(model, work, "nocache", flags + ["--no-enable-prefix-caching"])
        res["runs"]["no_prefix_caching"] = [ttft(e.port, q("nocache", i)) for i in range(a.samples)]
        e.kill9()
    finally:
        for d in daemons:
            d.send_signal(signal.SIGTERM)
            d.wait()
        keep_logs(work, a.out)
    os.makedirs(a.out, exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    res["host"] = {"cpus": os.cpu_count(), "uname": " ".join(os.uname())}
    path = os.path.join(a.out, f"kv_survival_ref-{stamp}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(f"reference engine, prefix {len(prefix)} tokens, time to first token from the client, median of "
          f"{a.samples} (ms; first requests: one sample); raw: {path}")
    for k, v in res["runs"].items():
        print(f"  {k:42s} {statistics.median(v) * 1e3:9.2f}")
    for k, p in res["prefix"].items():
        r = (p or {}).get("recovery") or {}
        print(f"  {k}: header={r.get('header')} recovered={r.get('recovered')} dropped={r.get('dropped')}")
    where = (res["prefix"].get("before") or {}).get("location")
    if where != "arena":
        print(f"  NOT A MEASURE OF THE INDEX: the engines kept it in {where} memory, not in the host arena, so "
              f"'after_kill_with_index' ran without one (the engines' logs say why: kv_survival_logs.txt)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=["tiny", "ref"], default="tiny")
    ap.add_argument("--build", default="build")
    ap.add_argument("--bin-dir", default=".bundle/bin", help="--engine ref: fastrestart-weightd and -weightctl")
    ap.add_argument("--model", help="--engine ref: a Llama checkpoint directory (default: one generated)")
    ap.add_argument("--shape", choices=["8b", "tiny"], default="8b", help="--engine ref: the generated checkpoint")
    ap.add_argument("--prefix-tokens", type=int)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    a = ap.parse_args()
    if a.engine == "ref":
        a.prefix_tokens = a.prefix_tokens or 8192
        return main_ref(a)
    a.prefix_tokens = a.prefix_tokens or 900
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

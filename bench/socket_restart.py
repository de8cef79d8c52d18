#!/usr/bin/env python3
"""What a client sees across a kill -9 of the engine, with the listening socket owned by the engine and by
fastrestartd (issue 29; docs/benchmarks.md, "No refused connection across a restart").

fastrestartd supervises fastrestart-tinyengine on the CPU. A load generator outside the engine (N client
threads, each sending completions back to back through http.client, a new connection per request) runs
while the engine is killed with -9 K times, for each listen mode (engine.listen = "engine": the engine
binds the port; "supervisor": fastrestartd binds it once and passes it down) and each start path:

  cold     weights.mode = "off": the engine reads the checkpoint from disk (page cache warm)
  warm     a host fastrestart-weightd holds the weights: the engine attaches them
  pre_gpu  a standby parked at its pre_gpu gate is released (start = ["standby", "warm", "cold"])
  warmed   a standby parked at its warmed gate (weights attached, warm-up forward done) is released

--startup-delay (tinyengine --fault-startup-delay) stands for the work before the pre_gpu gate that a real
engine does on every start (imports, config: 14 s for the 16 GB PyTorch engine on the H200).

Per kill: requests refused; failed requests by kind (refused, reset, timeout, http_<code>), split into those
in flight in the killed process and those that started after the kill; the service gap (kill to the end of
the first successful request that started after it, and when that request started); and the latency of the
requests that started between the kill and the READY, against the median under the same load before the
first kill. Needs fastrestartd, fastrestartctl, fastrestart-tinyengine and fastrestart-weightd (--bin, or
on PATH).

    bench/socket_restart.py --out DIR [--bin BUILD] [--kills 3] [--clients 4] [--listen engine,supervisor]
                            [--paths cold,warm,pre_gpu,warmed] [--size 64M] [--startup-delay 1.0]
Writes DIR/socket_restart.json (after every run), DIR/socket_restart.md (the table rows) and
DIR/socket_restart.svg (requests over time around the first kill of --chart-path, per listen mode).
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BINARIES = {"fastrestartd": "src/supervisor", "fastrestartctl": "src/supervisor",
            "fastrestart-tinyengine": "src/tinyengine", "fastrestart-weightd": "src/daemon"}
PATHS = ("cold", "warm", "pre_gpu", "warmed")
BODY = json.dumps({"model": "t", "prompt": "The capital of France is", "max_tokens": 4}).encode()


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the load generator ----------------------------------------------------------------------------------
class Load:
    """N threads sending completions back to back; every request recorded as (t0, t1, outcome): ok,
    refused (connect failed: ECONNREFUSED), reset (the connection broke: reset, closed before the answer,
    broken pipe), timeout (no answer within --timeout), http_<code>, or os_<errno>. After a failure a client
    waits --retry-pause before its next request (a client that retries at once would count its own loop)."""

    def __init__(self, port, clients, timeout, retry_pause):
        self.port, self.timeout, self.pause = port, timeout, retry_pause
        self.records, self.lock, self.stop = [], threading.Lock(), threading.Event()
        self.threads = [threading.Thread(target=self.client, daemon=True) for _ in range(clients)]

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(self.timeout + 5)
        with self.lock:
            return sorted(self.records)

    def one(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            try:
                conn.connect()
            except ConnectionRefusedError:
                return "refused"
            conn.request("POST", "/v1/completions", body=BODY, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            return "ok" if r.status == 200 else f"http_{r.status}"
        except socket.timeout:
            return "timeout"
        except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected, http.client.IncompleteRead,
                ConnectionAbortedError):
            return "reset"
        except OSError as e:
            return f"os_{e.errno}"
        finally:
            conn.close()

    def client(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            outcome = self.one()
            t1 = time.monotonic()
            with self.lock:
                self.records.append((t0, t1, outcome))
            if outcome != "ok":
                time.sleep(self.pause)


# --- fastrestartd ------------------------------------------------------------------------------------------
class Supervisor:
    def __init__(self, work, listen, path, a, ckpt):
        self.dir = os.path.join(work, f"{listen}-{path}")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.port = free_port()
        self.sock = os.path.join(self.dir, "ctl", "t.ctl")
        run = os.path.join(self.dir, "run")
        q = json.dumps
        warm = path != "cold"
        flags = ["--host", "127.0.0.1", "--port", str(self.port), "--served-model-name", "t",
                 "--load-format", "fastrestart" if warm else "disk", "--fastrestart-socket-dir", run,
                 "--shutdown-grace", "2", "--fault-startup-delay", str(a.startup_delay)]
        start = {"cold": ["cold"], "warm": ["warm", "cold"]}.get(path, ["standby", "warm", "cold"])
        toml = f"""[model]
name = "t"
[engine]
kind = "generic"
command = {q([a.which["fastrestart-tinyengine"], "serve", ckpt])}
flags = {q(flags)}
host = "127.0.0.1"
port = {self.port}
stop_grace_s = 5
"""
        if listen == "supervisor":
            toml += f'listen = "supervisor"\nlisten_backlog = {a.backlog}\n'
        toml += f"""[weights]
mode = "{'zero_copy' if warm else 'off'}"
backend = "host"
checkpoint = {q(ckpt)}
socket_dir = "{run}"
daemon_path = "{a.which['fastrestart-weightd']}"
[readiness]
model = "t"
poll_interval_s = 0.02
check_interval_s = 5
startup_timeout_s = 300
[restart]
backoff_initial_s = 0.01
backoff_max_s = 0.05
crash_loop_limit = 1000
warm_failures_before_cold = 0
start = {q(start)}
"""
        if path in ("pre_gpu", "warmed"):
            toml += f'[standby]\nlevel = "{path}"\n'
        toml += f"""[control]
socket = "{self.sock}"
state_dir = "{self.dir}/state"
[http]
listen = "none"
"""
        self.config = os.path.join(self.dir, "t.toml")
        with open(self.config, "w") as f:
            f.write(toml)
        self.a = a
        self.logpath = os.path.join(self.dir, "fastrestartd.log")
        self.proc = None

    def check(self):
        """fastrestartd --check: None when the config is valid, else its message (an older fastrestartd
        refuses engine.listen)."""
        r = subprocess.run([self.a.which["fastrestartd"], "--check", "--config", self.config], capture_output=True,
                           text=True, timeout=60)
        return None if r.returncode == 0 else (r.stderr or r.stdout).strip()

    def start(self):
        self.logf = open(self.logpath, "w")
        self.proc = subprocess.Popen([self.a.which["fastrestartd"], "--config", self.config], stdout=self.logf,
                                     stderr=subprocess.STDOUT)

    def status(self):
        r = subprocess.run([self.a.which["fastrestartctl"], "--socket", self.sock, "status", "--json"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            return None
        return json.loads(r.stdout)

    def wait(self, pred, what, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"fastrestartd exited {self.proc.returncode}; see {self.logpath}")
            st = self.status()
            if st is not None and pred(st):
                return st
            time.sleep(0.02)
        raise RuntimeError(f"no {what} within {timeout} s; see {self.logpath}")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.logf.close()


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
def run_one(a, work, listen, path, ckpt):
    sup = Supervisor(work, listen, path, a, ckpt)
    res = {"listen": listen, "path": path, "kills": []}
    why = sup.check()
    if why is not None:
        res["skipped"] = why
        return res, []
    sup.start()
    load = None
    try:
        st = sup.wait(ready_with(path), "ready engine" + (" and parked standby" if path in ("pre_gpu", "warmed") else ""),
                      a.ready_timeout)
        load = Load(sup.port, a.clients, a.timeout, a.retry_pause)
        load.start()
        time.sleep(a.steady_s)
        res["steady_until"] = time.monotonic()
        for i in range(a.kills):
            pid = st["engine"]["pid"]
            t_kill = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            st = sup.wait(lambda s: s.get("state") == "ready" and (s.get("engine") or {}).get("pid") not in (None, pid),
                          f"READY after kill #{i + 1}", a.ready_timeout)
            t_ready = time.monotonic()
            ls = st.get("last_start") or {}
            res["kills"].append({"t_kill": t_kill, "t_ready_seen": t_ready, "path": ls.get("path"),
                                 "death_to_ready_s": ls.get("since_previous_exit_s")})
            log(f"{listen}/{path} kill #{i + 1}: READY seen after {t_ready - t_kill:.3f} s (path {ls.get('path')})")
            st = sup.wait(ready_with(path), "steady state", a.ready_timeout)  # the next standby parked
            time.sleep(a.between_s)
    finally:
        records = load.finish() if load is not None else []
        sup.stop()
    return res, records


def analyse(res, records):
    """Fills res with the per-kill figures from the request records."""
    if not res["kills"]:
        return res
    base = [t1 - t0 for t0, t1, o in records if o == "ok" and t1 < res["kills"][0]["t_kill"]]
    base_median = statistics.median(base) if base else None
    res["baseline"] = {"requests": len(base), "median_latency_s": round(base_median, 4) if base else None}
    # A kill's window ends at the next kill; a request still running then is the next kill's (in flight).
    ends = [k["t_kill"] for k in res["kills"][1:]] + [float("inf")]
    for k, end in zip(res["kills"], ends):
        tk, tr = k["t_kill"], k["t_ready_seen"]
        in_flight = [r for r in records if r[0] < tk <= r[1]]
        after = [r for r in records if tk <= r[0] and r[1] < end]
        failed_after = {}
        for _, _, o in after:
            if o != "ok":
                failed_after[o] = failed_after.get(o, 0) + 1
        ok_after = [r for r in after if r[2] == "ok"]
        first = min(ok_after, key=lambda r: r[1]) if ok_after else None
        during = [r[1] - r[0] for r in after if r[0] <= tr and r[2] == "ok"]
        k.update({
            "kill_to_ready_seen_s": round(tr - tk, 4),
            "in_flight": len(in_flight),
            "in_flight_failed": {o: sum(1 for r in in_flight if r[2] == o) for o in sorted({r[2] for r in in_flight}) if o != "ok"},
            "refused": failed_after.get("refused", 0),
            "failed_after_kill": failed_after,
            "gap_s": round(first[1] - tk, 4) if first else None,
            "first_ok_started_after_s": round(first[0] - tk, 4) if first else None,
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

    rows = ["| listen | path | kills | refused per kill | failed after the kill (by kind) | in flight, failed | "
            "service gap s (first ok started after, s) | during the restart: max latency s (over median) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        if r.get("skipped"):
            rows.append(f"| {r['listen']} | {r['path']} | not run: {r['skipped'][:120]} | | | | | |")
            continue
        ks = [k for k in r["kills"] if "gap_s" in k]
        kinds = {}
        for k in ks:
            for o, n in k["failed_after_kill"].items():
                kinds.setdefault(o, []).append(n)
        failed = ", ".join(f"{o} {rng(v, '{:d}')}" for o, v in sorted(kinds.items()) if o != "refused") or "0"
        inflight = [sum(k["in_flight_failed"].values()) for k in ks]
        med = r.get("baseline", {}).get("median_latency_s")
        rows.append(f"| {r['listen']} | {r['path']} | {len(ks)} | {rng([k['refused'] for k in ks], '{:d}')} | {failed} | "
                    f"{rng(inflight, '{:d}')} | {rng([k['gap_s'] for k in ks])} ({rng([k['first_ok_started_after_s'] for k in ks])}) | "
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
        for t0, t1, o in recs:
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build"), help="a build tree with the four programs")
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--listen", default="engine,supervisor")
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--size", default="64M", help="the tiny engine's checkpoint (fastrestart-tinyengine gen --size)")
    ap.add_argument("--startup-delay", type=float, default=1.0, help="the engine's work before its pre_gpu gate, s")
    ap.add_argument("--backlog", type=int, default=1024, help="engine.listen_backlog with listen = supervisor")
    ap.add_argument("--timeout", type=float, default=30.0, help="the clients' timeout, s")
    ap.add_argument("--retry-pause", type=float, default=0.05, help="a client's pause after a failed request, s")
    ap.add_argument("--steady-s", type=float, default=3.0, help="load before the first kill (the median), s")
    ap.add_argument("--between-s", type=float, default=1.5, help="load after each steady state before the next kill, s")
    ap.add_argument("--ready-timeout", type=float, default=120.0)
    ap.add_argument("--chart-path", default="warm", help="the start path whose first kill the chart shows")
    a = ap.parse_args()
    a.which = {}
    for name, sub in BINARIES.items():
        p = os.path.join(a.bin, sub, name)
        a.which[name] = p if os.access(p, os.X_OK) else shutil.which(name)
        if not a.which[name]:
            sys.exit(f"socket_restart: {name} not found in {os.path.join(a.bin, sub)} or on PATH")
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="fr-socket-bench-")
    ckpt = os.path.join(work, "model")
    subprocess.run([a.which["fastrestart-tinyengine"], "gen", "--out", ckpt, "--size", a.size], check=True,
                   stdout=subprocess.DEVNULL)
    out = {"args": {k: v for k, v in vars(a).items() if k != "which"}, "runs": [],
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count()}
    chart = []
    status = 0
    for listen in a.listen.split(","):
        for path in a.paths.split(","):
            log(f"{listen}/{path}: {a.kills} kills, {a.clients} clients")
            try:
                res, records = run_one(a, work, listen, path, ckpt)
            except Exception as e:  # keep what the other runs measured
                res, records = {"listen": listen, "path": path, "kills": [], "error": f"{type(e).__name__}: {e}"}, []
                log(f"{listen}/{path}: {res['error']}")
                status = 1
            analyse(res, records)
            res["requests"] = {o: sum(1 for r in records if r[2] == o) for o in sorted({r[2] for r in records})}
            out["runs"].append(res)
            if path == a.chart_path and res["kills"]:
                k = res["kills"][0]
                chart.append((f"engine.listen = \"{listen}\", {path} start", records, k["t_kill"], k["t_ready_seen"]))
                # The records of the charted kill, relative to it (the chart can be redrawn from the JSON).
                res["chart_records"] = [(round(t0 - k["t_kill"], 4), round(t1 - t0, 4), o) for t0, t1, o in records
                                        if -1.0 <= t0 - k["t_kill"] <= 4.0]
            with open(os.path.join(a.out, "socket_restart.json"), "w") as f:
                json.dump(out, f, indent=1)
    rows = md_rows(out["runs"])
    with open(os.path.join(a.out, "socket_restart.md"), "w") as f:
        f.write(rows)
    print(rows)
    if chart:
        svg_chart(chart, os.path.join(a.out, "socket_restart.svg"))
    shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())

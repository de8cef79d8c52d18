#!/usr/bin/env python3
"""One start path of bench/gpu_standby.sh: kill -9 the engine of a running fastrestartd KILLS times and
measure each restart (docs/standby.md, docs/benchmarks.md "Standby engines").

Before each kill on a standby path it waits until the standby is parked (status `standby.state`), records
the parked standby's GPU memory (nvidia-smi's per-process figure for its pid, and status
`standby.gpu_bytes`) and the GPU's used memory; after each READY it records `last_start` (path,
`since_previous_exit_s` = death to READY, `time_to_ready_s`), `standby.last_release`, and the oracle: the
completion of the oracle prompt (4 greedy tokens with log-probabilities; the text and token ids must equal
the reference on every path) and, for the reference engine, its `/stats` `oracle.logits_sha256`.

    standby_cycles.py --socket CTL --log FASTRESTARTD_LOG --port P --model NAME --path PATH --kills N
                      --out RUN.json [--reference ORACLE.json] [--park-timeout 180] [--pid FASTRESTARTD_PID]
The first run of an engine writes --reference (when the file does not exist); later runs compare to it.
Writes --out after every kill, so a run cut short by its timeout keeps what it measured.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

PROMPT = "The capital of France is"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Run:
    def __init__(self, a):
        self.a = a
        self.res = {"path": a.path, "kills": [], "errors": []}

    def save(self):
        with open(self.a.out, "w") as f:
            json.dump(self.res, f, indent=1)

    def ctl(self, *args):
        r = subprocess.run(["fastrestartctl", "--socket", self.a.socket, *args], capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"fastrestartctl {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
        return r.stdout

    def status(self):
        return json.loads(self.ctl("status", "--json"))

    def readies(self):
        with open(self.a.log, errors="replace") as f:
            return f.read().count("READY: path")

    def alive(self):
        if self.a.pid is None:
            return
        try:
            os.kill(self.a.pid, 0)
        except ProcessLookupError:
            with open(self.a.log, errors="replace") as f:
                tail = f.read()[-600:]
            raise RuntimeError(f"fastrestartd (pid {self.a.pid}) exited; its log ends: {tail!r}") from None

    def wait_ready(self, n, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.readies() >= n:
                return self.status()
            self.alive()
            time.sleep(0.01)
        raise RuntimeError(f"no READY #{n} within {timeout} s")

    def wait_parked(self, timeout):
        deadline = time.monotonic() + timeout
        sb = None
        while time.monotonic() < deadline:
            sb = self.status().get("standby")
            if sb is None:
                raise RuntimeError("status has no `standby`: this fastrestartd has no standby path")
            if sb.get("state") == "parked":
                return sb
            if sb.get("state") == "disabled":
                raise RuntimeError(f"standby disabled: {sb.get('disabled')}")
            time.sleep(0.05)
        raise RuntimeError(f"the standby did not park within {timeout} s (last: {sb})")

    def http(self, path, body=None):
        url = f"http://127.0.0.1:{self.a.port}{path}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data, {"Content-Type": "application/json"} if data else {})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.load(r)

    def oracle(self):
        c = self.http("/v1/completions", {"model": self.a.model, "prompt": PROMPT, "max_tokens": 4,
                                          "temperature": 0, "logprobs": 0})["choices"][0]
        one = self.http("/v1/completions", {"model": self.a.model, "prompt": PROMPT, "max_tokens": 1,
                                            "temperature": 0})["choices"][0]["text"]
        stats = self.http("/stats")
        o = {"text": c["text"], "token_ids": c.get("token_ids"),
             "logprobs": (c.get("logprobs") or {}).get("token_logprobs"), "text_1": one,
             "logits_sha256": (stats.get("oracle") or {}).get("logits_sha256"),
             "graph_check": (stats.get("cuda_graph") or {}).get("graph_check"),
             "standby": stats.get("standby"), "phases": (stats.get("startup") or {}).get("phases")}
        return o

    def compare(self, o):
        ref = self.reference
        if ref is None:
            return None
        # The graph computes the prompt token by token: its log-probabilities may differ in the last bits
        # (docs/refengine.md, "CUDA graph"); the text, the token ids and the prefill's logits may not.
        keys = ["text", "token_ids", "text_1", "logits_sha256"]
        if not o.get("graph_check") and not ref.get("graph_check"):
            keys.append("logprobs")
        return [k for k in keys if o.get(k) != ref.get(k)]

    @staticmethod
    def gpu():
        """(GPU used MiB, {pid: used MiB}) from nvidia-smi; ({}, None) where it cannot tell."""
        try:
            used = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True, timeout=20).stdout.split()
            apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                                   "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                  timeout=20).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None, {}
        per = {}
        for line in apps.splitlines():
            parts = [x.strip() for x in line.split(",")]
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                per[int(parts[0])] = int(parts[1])
        return (int(used[0]) if used and used[0].isdigit() else None), per

    def run(self):
        a = self.a
        self.reference = None
        if a.reference and os.path.exists(a.reference):
            with open(a.reference) as f:
                self.reference = json.load(f)
        st = self.wait_ready(1, a.ready_timeout)
        first = self.oracle()
        self.res["first_start"] = {"last_start": st.get("last_start"), "oracle": first}
        if a.reference and self.reference is None:
            with open(a.reference, "w") as f:
                json.dump(first, f, indent=1)
            self.reference = first
            log(f"oracle reference: {first['text']!r} (logits {str(first.get('logits_sha256'))[:16]})")
        self.res["first_start"]["oracle_differs"] = self.compare(first)
        self.save()
        standby = a.path in ("warmed", "pre_gpu", "warmed-graph")
        for i in range(a.kills):
            k = {"i": i + 1}
            try:
                if standby:
                    sb = self.wait_parked(a.park_timeout)
                    used, per = self.gpu()
                    k["parked"] = {"pid": sb.get("pid"), "level": sb.get("level"), "gpu_bytes": sb.get("gpu_bytes"),
                                   "age_s": sb.get("age_s"), "nvidia_smi_mib": per.get(sb.get("pid"), 0)
                                   if per else None, "gpu_used_mib": used}
                st = self.status()
                pid = st["engine"]["pid"]
                n = self.readies()
                t = time.monotonic()
                os.kill(pid, signal.SIGKILL)
                st = self.wait_ready(n + 1, a.ready_timeout)
                k["kill_to_ready_seen_s"] = round(time.monotonic() - t, 4)
                ls = st.get("last_start") or {}
                k.update(path=ls.get("path"), death_to_ready_s=ls.get("since_previous_exit_s"),
                         exec_to_ready_s=ls.get("time_to_ready_s"),
                         last_release=(st.get("standby") or {}).get("last_release"))
                k["gpu_used_mib"], _ = self.gpu()
                o = self.oracle()
                k["oracle"] = o
                k["oracle_differs"] = self.compare(o)
                log(f"{a.path} kill -9 #{i + 1}: path {k['path']}, death to READY {k['death_to_ready_s']} s"
                    + (f", parked standby {k['parked']['nvidia_smi_mib']} MiB" if standby else "")
                    + (f", ORACLE DIFFERS {k['oracle_differs']}" if k["oracle_differs"] else ""))
            except Exception as e:  # keep what was measured; the summary shows the error
                k["error"] = f"{type(e).__name__}: {e}"
                self.res["errors"].append(k["error"])
                log(f"{a.path} kill #{i + 1}: {k['error']}")
                self.res["kills"].append(k)
                self.save()
                break
            self.res["kills"].append(k)
            self.save()
        self.summarize()
        self.save()
        return 0 if not self.res["errors"] else 1

    def summarize(self):
        ks = [k for k in self.res["kills"] if "error" not in k]
        d = [k["death_to_ready_s"] for k in ks if k.get("death_to_ready_s") is not None]
        s = {"n": len(ks), "paths": sorted({str(k.get("path")) for k in ks})}
        if d:
            s.update(median_s=round(statistics.median(d), 4), max_s=round(max(d), 4), min_s=round(min(d), 4))
        # From the kill(2) call to this script seeing READY (its 10 ms polls of the log included): an upper
        # bound that also covers the kernel's teardown of the dead process before fastrestartd reaps it.
        kr = [k["kill_to_ready_seen_s"] for k in ks if k.get("kill_to_ready_seen_s") is not None]
        if kr:
            s.update(kill_to_ready_seen_median_s=round(statistics.median(kr), 4), kill_to_ready_seen_max_s=round(max(kr), 4))
        parked = [k["parked"] for k in ks if k.get("parked")]
        if parked:
            s["parked_mib"] = sorted({p.get("nvidia_smi_mib") for p in parked if p.get("nvidia_smi_mib") is not None})
            s["parked_gpu_bytes"] = sorted({p.get("gpu_bytes") for p in parked if p.get("gpu_bytes") is not None})
            used = [p["gpu_used_mib"] for p in parked if p.get("gpu_used_mib") is not None]
            if used:
                s["gpu_used_parked_first_last_mib"] = [used[0], used[-1]]
        rel = [k["last_release"].get("release_to_ready_s") for k in ks
               if isinstance(k.get("last_release"), dict) and k["last_release"].get("release_to_ready_s") is not None]
        if rel:
            s["release_to_ready_median_s"] = round(statistics.median(rel), 4)
        s["oracle_mismatches"] = sum(1 for k in ks if k.get("oracle_differs"))
        s["graph_checks"] = sorted({str(k["oracle"].get("graph_check")) for k in ks if k.get("oracle")})
        self.res["summary"] = s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--path", required=True, choices=["cold", "warm", "warmed", "warmed-graph", "pre_gpu"])
    ap.add_argument("--kills", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reference")
    ap.add_argument("--pid", type=int, help="fastrestartd's pid: its exit ends the run at once")
    ap.add_argument("--park-timeout", type=float, default=180)
    ap.add_argument("--ready-timeout", type=float, default=300)
    a = ap.parse_args()
    r = Run(a)
    try:
        return r.run()
    except Exception as e:
        r.res["errors"].append(f"{type(e).__name__}: {e}")
        r.summarize()
        r.save()
        log(f"{a.path}: {type(e).__name__}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())

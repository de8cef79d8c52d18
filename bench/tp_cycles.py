#!/usr/bin/env python3
"""One run of bench/gpu_tp.sh: the tensor-parallel reference engine under a running fastrestartd, killed
(kill -9) rank by rank, each restart measured and checked (docs/refengine.md "Tensor parallel").

After the first READY (cold: every rank misses, loads its shard from disk and publishes it) it records the
oracle: /stats `oracle.logits_sha256`, the 4-token greedy completion of the oracle prompt with its
log-probabilities, and `tensor_parallel` (each rank's pid, device, load path, weight bytes). Then for each
entry of --kills (a rank) it kill -9s that rank's process (rank 0: status engine.pid; rank r: /stats
tensor_parallel.ranks[r].pid), waits for the next READY and checks: every rank's path is `attach`, the
oracle is bitwise the first one, a killed worker is named in fastrestartd's log by rank 0 ("rank R (pid P)
was killed by signal 9"). Around every cycle: the GPU's used memory (nvidia-smi; flat = nothing leaks) and
what each daemon holds per entry (fastrestart-weightctl status: the entry of each tp_rank).

    tp_cycles.py --socket CTL --log FASTRESTARTD_LOG --port P --model NAME --tp N --kills 0,0,1,1
                 --socket-dir DIR --devices cuda:0[,cuda:1] --out RUN.json [--pid FASTRESTARTD_PID]
Writes --out after every cycle, so a run cut short by its timeout keeps what it measured.
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
        self.res = {"tp": a.tp, "kills": [], "errors": []}

    def save(self):
        with open(self.a.out, "w") as f:
            json.dump(self.res, f, indent=1)

    def status(self):
        r = subprocess.run(["fastrestartctl", "--socket", self.a.socket, "status", "--json"], capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"fastrestartctl status: exit {r.returncode}: {r.stderr.strip()}")
        return json.loads(r.stdout)

    def text(self):
        with open(self.a.log, errors="replace") as f:
            return f.read()

    def readies(self):
        return self.text().count("READY: path")

    def alive(self):
        if self.a.pid is None:
            return
        try:
            os.kill(self.a.pid, 0)
        except ProcessLookupError:
            raise RuntimeError(f"fastrestartd (pid {self.a.pid}) exited; its log ends: {self.text()[-800:]!r}") from None

    def wait_ready(self, n, timeout):
        """Until READY #n; an engine that failed to load twice meanwhile ends the run at once (fastrestartd
        would go on restarting it until the run's limit), naming the failure."""
        deadline = time.monotonic() + timeout
        failed0 = self.text().count("load failed:")
        while time.monotonic() < deadline:
            text = self.text()
            if text.count("READY: path") >= n:
                return self.status()
            if text.count("load failed:") >= failed0 + 2:
                last = [line for line in text.splitlines() if "load failed:" in line][-1]
                raise RuntimeError(f"the engine failed to load twice before READY #{n}; the last: {last.strip()}")
            self.alive()
            time.sleep(0.01)
        raise RuntimeError(f"no READY #{n} within {timeout} s")

    def http(self, path, body=None):
        url = f"http://127.0.0.1:{self.a.port}{path}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data, {"Content-Type": "application/json"} if data else {})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.load(r)

    def oracle(self):
        c = self.http("/v1/completions", {"model": self.a.model, "prompt": PROMPT, "max_tokens": 4,
                                          "logprobs": 0})["choices"][0]
        stats = self.http("/stats")
        return {"text": c["text"], "token_ids": c.get("token_ids"),
                "logprobs": (c.get("logprobs") or {}).get("token_logprobs"),
                "logits_sha256": (stats.get("oracle") or {}).get("logits_sha256"),
                "load": {k: v for k, v in (stats.get("load") or {}).items() if k != "attach_timings"},
                "tensor_parallel": stats.get("tensor_parallel"),
                "phases": (stats.get("startup") or {}).get("phases")}

    @staticmethod
    def gpu_used_mib():
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=20).stdout.split()
            return [int(x) for x in out if x.isdigit()]
        except (OSError, subprocess.TimeoutExpired):
            return None

    def held(self):
        """{device: [{"tp_rank", "tp_size", "pool_bytes", "state"}]} from each daemon's own status."""
        out = {}
        for dev in sorted(set(self.a.devices.split(","))):
            try:
                r = subprocess.run(["fastrestart-weightctl", "--socket-dir", self.a.socket_dir, "--device", dev,
                                    "status", "--json"], capture_output=True, text=True, timeout=30)
                st = json.loads(r.stdout)
                out[dev] = {"held_bytes": st.get("held_bytes"), "entries": [
                    {"tp_rank": (e.get("config") or {}).get("tp_rank"), "tp_size": (e.get("config") or {}).get("tp_size"),
                     "pool_bytes": e.get("pool_bytes"), "state": e.get("state")} for e in st.get("entries", [])]}
            except (OSError, ValueError, subprocess.TimeoutExpired) as e:
                out[dev] = {"error": f"{type(e).__name__}: {e}"}
        return out

    def compare(self, o):
        ref = self.res["first"]["oracle"]
        return [k for k in ("text", "token_ids", "logprobs", "logits_sha256") if o.get(k) != ref.get(k)]

    def run(self):
        a = self.a
        st = self.wait_ready(1, a.ready_timeout)
        first = self.oracle()
        self.res["first"] = {"last_start": st.get("last_start"), "oracle": first, "gpu_used_mib": self.gpu_used_mib(),
                             "held": self.held(), "daemons": st.get("daemons"), "memory": st.get("memory")}
        ranks = (first.get("tensor_parallel") or {}).get("ranks") or []
        log(f"TP={a.tp} cold: READY, paths {[r.get('path') for r in ranks]}, logits {str(first['logits_sha256'])[:16]}, "
            f"text {first['text']!r}, GPU used {self.res['first']['gpu_used_mib']} MiB")
        if len(ranks) != a.tp:
            self.res["errors"].append(f"cold: /stats tensor_parallel has {len(ranks)} ranks, expected {a.tp}")
        self.save()
        for i, rank in enumerate(int(x) for x in a.kills.split(",") if x != ""):
            k = {"i": i + 1, "rank": rank}
            try:
                st = self.status()
                tpi = self.http("/stats").get("tensor_parallel") or {}
                pid = st["engine"]["pid"] if rank == 0 else tpi["ranks"][rank]["pid"]
                k["pid"] = pid
                n = self.readies()
                t = time.monotonic()
                os.kill(pid, signal.SIGKILL)
                st = self.wait_ready(n + 1, a.ready_timeout)
                k["kill_to_ready_seen_s"] = round(time.monotonic() - t, 4)
                ls = st.get("last_start") or {}
                k.update(path=ls.get("path"), death_to_ready_s=ls.get("since_previous_exit_s"),
                         exec_to_ready_s=ls.get("time_to_ready_s"))
                o = self.oracle()
                k["oracle"] = o
                k["oracle_differs"] = self.compare(o)
                k["rank_paths"] = [r.get("path") for r in (o.get("tensor_parallel") or {}).get("ranks", [])]
                k["all_attached"] = k["rank_paths"] == ["attach"] * a.tp
                if rank > 0:
                    k["named_in_log"] = f"rank {rank} (pid {pid}) was killed by signal 9" in self.text()
                k["gpu_used_mib"] = self.gpu_used_mib()
                k["held"] = self.held()
                bad = [] if k["all_attached"] else [f"rank paths {k['rank_paths']}"]
                bad += [f"oracle differs {k['oracle_differs']}"] if k["oracle_differs"] else []
                bad += ["worker death not named in the log"] if rank > 0 and not k["named_in_log"] else []
                log(f"TP={a.tp} kill -9 of rank {rank} #{i + 1}: path {k['path']}, death to READY "
                    f"{k['death_to_ready_s']} s, ranks {k['rank_paths']}, GPU used {k['gpu_used_mib']} MiB"
                    + (f"; BAD: {'; '.join(bad)}" if bad else ""))
                if bad:
                    self.res["errors"].append(f"kill #{i + 1} (rank {rank}): {'; '.join(bad)}")
            except Exception as e:  # keep what was measured; the summary shows the error
                k["error"] = f"{type(e).__name__}: {e}"
                self.res["errors"].append(k["error"])
                log(f"TP={a.tp} kill #{i + 1}: {k['error']}")
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
        s = {"n": len(ks), "paths": sorted({str(k.get("path")) for k in ks})}
        d = [k["death_to_ready_s"] for k in ks if k.get("death_to_ready_s") is not None]
        if d:
            s.update(median_s=round(statistics.median(d), 4), max_s=round(max(d), 4), min_s=round(min(d), 4))
        for rank in sorted({k["rank"] for k in ks}):
            dr = [k["death_to_ready_s"] for k in ks if k["rank"] == rank and k.get("death_to_ready_s") is not None]
            if dr:
                s[f"rank{rank}_kill_median_s"] = round(statistics.median(dr), 4)
        s["all_attached"] = all(k.get("all_attached") for k in ks) if ks else None
        s["oracle_mismatches"] = sum(1 for k in ks if k.get("oracle_differs"))
        first = self.res.get("first") or {}
        s["cold_paths"] = [r.get("path") for r in ((first.get("oracle") or {}).get("tensor_parallel") or {}).get("ranks", [])]
        s["logits_sha256"] = (first.get("oracle") or {}).get("logits_sha256")
        used = [k["gpu_used_mib"] for k in ks if k.get("gpu_used_mib")]
        if used:  # per GPU: after the first and the last restart, and the extremes (flat: nothing leaks)
            s["gpu_used_mib_first_last_max_min"] = [
                [u[0][g], u[-1][g], max(x[g] for x in u), min(x[g] for x in u)]
                for u in [used] for g in range(min(len(x) for x in used))]
        if ks and ks[-1].get("held"):
            s["held_last"] = ks[-1]["held"]
        ranks = ((ks[-1]["oracle"].get("tensor_parallel") or {}).get("ranks") if ks else None) or []
        s["rank_weight_bytes"] = [r.get("weight_bytes") for r in ranks]
        self.res["summary"] = s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tp", type=int, required=True)
    ap.add_argument("--kills", required=True, help="comma-separated ranks, one kill -9 each, in order")
    ap.add_argument("--socket-dir", required=True)
    ap.add_argument("--devices", default="cuda:0")
    ap.add_argument("--out", required=True)
    ap.add_argument("--pid", type=int, help="fastrestartd's pid: its exit ends the run at once")
    ap.add_argument("--ready-timeout", type=float, default=240)
    a = ap.parse_args()
    r = Run(a)
    try:
        return r.run()
    except Exception as e:
        r.res["errors"].append(f"{type(e).__name__}: {e}")
        r.summarize()
        r.save()
        log(f"TP={a.tp}: {type(e).__name__}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())

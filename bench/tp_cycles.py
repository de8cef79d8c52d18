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
import statistics
import subprocess
import sys

import fastrestartd_run as fr
from fastrestartd_run import PROMPT, log


class Run(fr.Driver):
    log_tail_chars = 800
    stop_on_load_failures = True

    def __init__(self, a):
        super().__init__(a, {"tp": a.tp, "kills": [], "errors": []})
        self.label = f"TP={a.tp}"

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
        out = fr.nvidia_smi("--query-gpu=memory.used")
        return None if out is None else [int(x) for x in out.split() if x.isdigit()]

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

        def one(rank, k):
            k["rank"] = rank
            st = self.status()
            tpi = self.http("/stats").get("tensor_parallel") or {}
            pid = st["engine"]["pid"] if rank == 0 else tpi["ranks"][rank]["pid"]
            k["pid"] = pid
            self.kill_and_wait(pid, k, st["engine"]["pid"])
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
            log(f"TP={a.tp} kill -9 of rank {rank} #{k['i']}: path {k['path']}, kill to READY "
                f"{k.get('kill_to_ready_s')} s (reap to READY {k.get('reap_to_ready_s')} s), ranks {k['rank_paths']}, GPU used {k['gpu_used_mib']} MiB"
                + (f"; BAD: {'; '.join(bad)}" if bad else ""))
            if bad:
                self.res["errors"].append(f"kill #{k['i']} (rank {rank}): {'; '.join(bad)}")

        return self.cycles([int(x) for x in a.kills.split(",") if x != ""], one)

    def summarize(self):
        ks = [k for k in self.res["kills"] if "error" not in k]
        s = fr.restart_summary(ks)
        for rank in sorted({k["rank"] for k in ks}):
            dr = [k["kill_to_ready_s"] for k in ks if k["rank"] == rank and k.get("kill_to_ready_s") is not None]
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
    fr.add_daemon_args(ap)
    ap.add_argument("--tp", type=int, required=True)
    ap.add_argument("--kills", required=True, help="comma-separated ranks, one kill -9 each, in order")
    ap.add_argument("--socket-dir", required=True)
    ap.add_argument("--devices", default="cuda:0")
    ap.add_argument("--out", required=True)
    ap.add_argument("--pid", type=int, help="fastrestartd's pid: its exit ends the run at once")
    ap.add_argument("--ready-timeout", type=float, default=240)
    a = ap.parse_args()
    return Run(a).main()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""One start path of bench/gpu_standby.sh and bench/gpu_vllm_shape.sh: kill -9 the engine of a running
fastrestartd KILLS times and time each restart from the kill(2) (docs/standby.md, docs/benchmarks.md).

Each kill is timed on this script's clock (fastrestartd_run.KillClock): kill(2) -> READY (fastrestartd's
READY stamp, `last_start.ready_at_s`), kill(2) -> the first answered request (--clients threads sending
requests across the kill: the first answer to a request sent after the kill, the first byte of an answer to
one (--stream: the first SSE event) and READY minus it (how far READY is from the engine's first answer),
and the first answer at all), and the breakdown: kill -> fastrestartd's reap of the dead engine -> a
standby's release -> its KV arena's lease wait and swap_in (the engine's /stats) -> READY. Before each
kill on a standby path it waits until the standby is parked (status `standby.state`), records the parked
standby's GPU memory (nvidia-smi's per-process figure for its pid, and status `standby.gpu_bytes`) and the
GPU's used memory; after each READY the oracle: the completion of the oracle prompt (4 greedy tokens with
log-probabilities; the text and token ids must equal the reference on every path) and, for the reference
engine, its `/stats` `oracle.logits_sha256`.

    standby_cycles.py --socket CTL --log FASTRESTARTD_LOG --port P --model NAME --path PATH --kills N
                      --out RUN.json [--reference ORACLE.json] [--park-timeout 180] [--pid FASTRESTARTD_PID]
                      [--clients 1] [--stream]
    standby_cycles.py --launch tiny [--bin BUILD] --path PATH --kills N --out RUN.json
With --launch tiny it starts fastrestartd itself (fastrestartd_run.Fastrestartd) on the CPU: the tiny engine
(--tiny-size checkpoint, generated; --startup-delay s of work before its pre_gpu gate, standing for an
engine's imports) over a host weight daemon, the same start path (warmed_arena: --kv-arena-bytes), and
stops it at the end. The first run of an engine writes --reference (when the file does not exist); later
runs compare to it. Writes --out after every kill, so a run cut short by its timeout keeps what it measured.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import fastrestartd_run as fr
from fastrestartd_run import PROMPT, log


class Run(fr.Driver):
    def __init__(self, a):
        super().__init__(a, {"path": a.path, "kills": [], "errors": []})
        self.label = a.path

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
             "batched": bool((stats.get("batch") or {}).get("enabled")),
             "standby": stats.get("standby"), "phases": (stats.get("startup") or {}).get("phases"),
             "kv_arena": (stats.get("batch") or {}).get("kv_arena")}
        return o

    def compare(self, o):
        ref = self.reference
        if ref is None:
            return None
        # The graph computes the prompt token by token: its log-probabilities may differ in the last bits
        # (docs/refengine.md, "CUDA graph"); the text, the token ids and the prefill's logits may not.
        # The batched engine (docs/refengine.md, "Batched serving") attends over its slot's whole length,
        # which follows the KV budget, and that differs between paths (a warmed standby's reserve lowers
        # the share): its log-probabilities may differ in the last bits too; its prefill logits may not.
        keys = ["text", "token_ids", "text_1", "logits_sha256"]
        if not o.get("graph_check") and not ref.get("graph_check") and not o.get("batched"):
            keys.append("logprobs")
        return [k for k in keys if o.get(k) != ref.get(k)]

    @staticmethod
    def gpu():
        """(GPU used MiB, {pid: used MiB}) from nvidia-smi; (None, {}) where it cannot tell."""
        used = fr.nvidia_smi("--query-gpu=memory.used")
        apps = fr.nvidia_smi("--query-compute-apps=pid,used_memory") if used is not None else None
        if apps is None:
            return None, {}
        used = used.split()
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
        standby = a.path in ("warmed", "pre_gpu", "warmed-graph", "warmed_arena")
        snapshot = a.path == "snapshot_arena"
        if snapshot:
            self.create_snapshot()

        def one(_, k):
            if standby:
                sb = self.wait_parked(a.park_timeout)
                used, per = self.gpu()
                k["parked"] = {"pid": sb.get("pid"), "level": sb.get("level"), "gpu_bytes": sb.get("gpu_bytes"),
                               "age_s": sb.get("age_s"), "nvidia_smi_mib": per.get(sb.get("pid"), 0)
                               if per else None, "gpu_used_mib": used}
            if snapshot:
                k["gpu_used_before_kill_mib"], _ = self.gpu()
            st = self.kill_and_wait(self.status()["engine"]["pid"], k)
            k["last_release"] = (st.get("standby") or {}).get("last_release")
            if snapshot:
                k["last_restore"] = (st.get("snapshot") or {}).get("last_restore")
            k["gpu_used_mib"], _ = self.gpu()
            o = self.oracle()
            k["oracle"] = o
            k["oracle_differs"] = self.compare(o)
            # the breakdown's arena steps, as the released standby timed them (its /stats)
            for key in ("kv_arena_wait_s", "kv_arena_swap_in_s"):
                if (o.get("standby") or {}).get(key) is not None:
                    k[key] = o["standby"][key]
            log(f"{a.path} kill -9 #{k['i']}: path {k['path']}, kill to READY {k.get('kill_to_ready_s')} s, to the first "
                f"answer {k.get('kill_to_first_answer_s')} s, to its first byte {k.get('kill_to_first_byte_s')} s (READY "
                f"minus first byte {k.get('ready_minus_first_byte_s')} s; kill to reap {k.get('kill_to_reap_s')} s, reap "
                f"to READY {k.get('reap_to_ready_s')} s)"
                + (f", parked standby {k['parked']['nvidia_smi_mib']} MiB" if standby else "")
                + (f", ORACLE DIFFERS {k['oracle_differs']}" if k["oracle_differs"] else ""))

        rc = self.cycles(range(a.kills), one)
        line = fr.first_byte_line(self.res["summary"])
        if line:
            log(f"{a.path} {line}")
        return rc

    def create_snapshot(self):
        """snapshot_arena: `fastrestartctl snapshot create` of the live engine (weights and KV arena left
        out: docs/snapshot.md), which restores it as the live engine at once; its answer (create time,
        artifact size, the restore's time to ready) and the manifest's arenas into res["create"]."""
        memory = self.engine_memory(self.status()["engine"]["pid"])
        n = self.readies()
        t = time.monotonic()
        out = json.loads(fr.ctl(self.a.socket, "snapshot", "create", "--json", timeout=600))
        self.wait_ready(n + 1, self.a.ready_timeout)
        created = out.get("created") or {}
        inspect = json.loads(fr.ctl(self.a.socket, "snapshot", "inspect", created.get("id", ""), "--json"))
        m = inspect.get("manifest") or {}
        images = {}
        st = self.status()
        sdir = ((st.get("snapshot") or {}).get("dir")) or ""
        idir = os.path.join(sdir, created.get("id", ""), "images")
        if os.path.isdir(idir):
            for f in os.listdir(idir):  # by kind: pages-*.img (memory), pagemap-*, files, ...
                kind = f.split("-")[0].split(".")[0]
                images[kind] = images.get(kind, 0) + os.path.getsize(os.path.join(idir, f))
        self.res["create"] = {"answer": out, "wall_s": round(time.monotonic() - t, 3), "image_bytes": m.get("image_bytes"),
                              "timings": m.get("timings"), "arenas": (m.get("weights") or {}).get("arenas"),
                              "weights_excluded": (m.get("weights") or {}).get("excluded"),
                              "engine_memory_before": memory,
                              "images_by_kind": dict(sorted(images.items(), key=lambda x: -x[1])[:6])}
        log(f"engine memory before the create: {memory}; images by kind: {self.res['create']['images_by_kind']}")
        self.save()
        log(f"snapshot created: {created.get('id')} {(m.get('image_bytes') or 0) / 1e9:.2f} GB, "
            f"arenas {[(x.get('name'), x.get('bytes')) for x in self.res['create']['arenas'] or []]}, "
            f"create+restore {self.res['create']['wall_s']} s")
        if not out.get("ok", False):
            raise RuntimeError(f"snapshot create: {out}")

    @staticmethod
    def engine_memory(pid):
        """The engine's host memory as a dump sees it (/proc/PID/smaps): anonymous and file-backed resident
        bytes, and the largest anonymous mappings by name (what an artifact carries besides GPU memory)."""
        out = {"anon_mib": 0, "file_mib": 0, "largest_anon": []}
        try:
            cur, maps = None, []
            with open(f"/proc/{pid}/smaps") as f:
                for line in f:
                    head = line.split()
                    if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                        cur = {"name": head[5] if len(head) > 5 else "[anon]", "rss": 0, "anon": 0}
                        maps.append(cur)
                    elif line.startswith("Rss:") and cur is not None:
                        cur["rss"] = int(head[1])
                    elif line.startswith("Anonymous:") and cur is not None:
                        cur["anon"] = int(head[1])
            out["anon_mib"] = sum(x["anon"] for x in maps) // 1024
            out["file_mib"] = (sum(x["rss"] for x in maps) - sum(x["anon"] for x in maps)) // 1024
            by = {}
            for x in maps:
                by[x["name"]] = by.get(x["name"], 0) + x["anon"]
            out["largest_anon"] = [(k, v // 1024) for k, v in sorted(by.items(), key=lambda x: -x[1])[:6]]
        except OSError as e:
            out["error"] = str(e)
        return out

    def summarize(self):
        ks = [k for k in self.res["kills"] if "error" not in k]
        s = fr.restart_summary(ks)
        parked = [k["parked"] for k in ks if k.get("parked")]
        if parked:
            s["parked_mib"] = sorted({p.get("nvidia_smi_mib") for p in parked if p.get("nvidia_smi_mib") is not None})
            s["parked_gpu_bytes"] = sorted({p.get("gpu_bytes") for p in parked if p.get("gpu_bytes") is not None})
            used = [p["gpu_used_mib"] for p in parked if p.get("gpu_used_mib") is not None]
            if used:
                s["gpu_used_parked_first_last_mib"] = [used[0], used[-1]]
        # --kv-arena: the released standby's lease wait (for the dead engine's exit) and its swap_in, and
        # any start that fell back to a KV cache of its own (with the reason)
        arena = [(k.get("oracle") or {}).get("standby") or {} for k in ks]
        waits = [x["kv_arena_wait_s"] for x in arena if x.get("kv_arena_wait_s") is not None]
        swaps = [x["kv_arena_swap_in_s"] for x in arena if x.get("kv_arena_swap_in_s") is not None]
        if waits:
            s.update(kv_arena_wait_median_s=round(statistics.median(waits), 4), kv_arena_wait_max_s=round(max(waits), 4),
                     kv_arena_swap_in_median_s=round(statistics.median(swaps), 4))
        fell = [((k.get("oracle") or {}).get("kv_arena") or {}).get("fallback") for k in ks]
        if any(fell):
            s["kv_arena_fallbacks"] = [f for f in fell if f]
        # snapshot_arena: the artifact, each restore's helper timings (the arena's lease wait among them) and
        # the GPU's used memory before each kill
        if self.res.get("create"):
            s["image_gb"] = round((self.res["create"].get("image_bytes") or 0) / 1e9, 3)
        rs = [k["last_restore"].get("timings") or {} for k in ks if isinstance(k.get("last_restore"), dict)]
        for key in ("arena_wait_s", "criu_restore_s", "cuda_restore_s", "reattach_s", "oracle_s", "total_s"):
            vals = [r[key] for r in rs if isinstance(r.get(key), (int, float))]
            if vals:
                s[f"restore_{key[:-2]}_median_s"] = round(statistics.median(vals), 4)
        used = [k["gpu_used_before_kill_mib"] for k in ks if k.get("gpu_used_before_kill_mib") is not None]
        if used:
            s["gpu_used_before_kill_mib"] = used
        s["oracle_mismatches"] = sum(1 for k in ks if k.get("oracle_differs"))
        s["graph_checks"] = sorted({str(k["oracle"].get("graph_check")) for k in ks if k.get("oracle")})
        self.res["summary"] = s


def tiny_config(a, d, port, ckpt, progs):
    """--launch tiny: the fastrestartd config of a.path for the tiny engine on the CPU over a host weight
    daemon, its files under d."""
    run = os.path.join(d, "run")
    flags = ["--load-format", "fastrestart", "--fastrestart-socket-dir", run, "--fault-startup-delay",
             str(a.startup_delay), "--shutdown-grace", "2", "--host", "127.0.0.1", "--port", str(port),
             "--served-model-name", a.model]
    start, level = {"cold": (["cold"], None), "warm": (["warm", "cold"], None),
                    "pre_gpu": (["standby", "warm", "cold"], "pre_gpu"), "warmed": (["standby", "warm", "cold"], "warmed"),
                    "warmed_arena": (["standby", "warm", "cold"], "warmed")}[a.path]
    if a.path == "warmed_arena":
        flags += ["--kv-arena-bytes", str(a.kv_arena_bytes)]
    return fr.supervisor_config(
        d, a.model, [progs["fastrestart-tinyengine"], "serve", ckpt], flags, port,
        {"mode": "zero_copy", "backend": "host", "checkpoint": ckpt, "daemon_path": progs["fastrestart-weightd"]},
        readiness={"poll_interval_s": 0.01, "check_interval_s": 30}, restart={"start": start},
        **({"standby": {"level": level}} if level else {}))


def launch_tiny(a):
    """--launch tiny: generates the checkpoint, starts fastrestartd; sets a.socket, a.log, a.port, a.pid.
    Returns (the Fastrestartd, the work folder)."""
    progs = fr.find_programs(a.bin, ["fastrestartd", "fastrestartctl", "fastrestart-weightd", "fastrestart-tinyengine"])
    missing = [n for n, p in progs.items() if not p]
    if missing:
        sys.exit(f"standby_cycles: {', '.join(missing)} not found in {a.bin} (a build tree or a folder) or on PATH")
    work = tempfile.mkdtemp(prefix="fr-standby-cycles-")
    ckpt = os.path.join(work, "model")
    subprocess.run([progs["fastrestart-tinyengine"], "gen", "--out", ckpt, "--size", a.tiny_size], check=True,
                   stdout=subprocess.DEVNULL)
    a.port = fr.free_port()
    d = os.path.join(work, a.path)
    sup = fr.Fastrestartd(d, tiny_config(a, d, a.port, ckpt, progs), fr.control_socket(d),
                          log_path=a.log, fastrestartd=progs["fastrestartd"], fastrestartctl=progs["fastrestartctl"])
    sup.start()
    a.socket, a.log, a.pid = sup.sock, sup.logpath, sup.pid
    os.environ["PATH"] = os.path.dirname(progs["fastrestartctl"]) + os.pathsep + os.environ.get("PATH", "")
    return sup, work


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--launch", choices=["tiny"], help="start fastrestartd with the tiny engine on the CPU")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build"),
                    help="--launch: a build tree, or a folder holding the programs")
    ap.add_argument("--socket")
    ap.add_argument("--log", help="fastrestartd's log (--launch: where to write it)")
    ap.add_argument("--port", type=int)
    ap.add_argument("--model", default="t")
    ap.add_argument("--path", required=True, choices=["cold", "warm", "warmed", "warmed-graph", "warmed_arena", "pre_gpu",
                                                      "snapshot_arena"])
    ap.add_argument("--kills", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reference")
    ap.add_argument("--pid", type=int, help="fastrestartd's pid: its exit ends the run at once")
    ap.add_argument("--park-timeout", type=float, default=180)
    ap.add_argument("--ready-timeout", type=float, default=300)
    ap.add_argument("--tiny-size", default="64M", help="--launch tiny: the checkpoint's size")
    ap.add_argument("--startup-delay", type=float, default=1.0, help="--launch tiny: the engine's work before its pre_gpu gate, s")
    ap.add_argument("--kv-arena-bytes", type=int, default=64 << 20, help="--launch tiny, warmed_arena: the KV arena")
    fr.add_clock_args(ap)
    a = ap.parse_args()
    if a.launch is None and (a.socket is None or a.log is None or a.port is None):
        ap.error("--socket, --log and --port name the running fastrestartd (or --launch tiny starts one)")
    sup = work = None
    if a.launch:
        if a.path in ("snapshot_arena", "warmed-graph"):
            ap.error(f"--launch tiny runs cold, warm, pre_gpu, warmed and warmed_arena, not {a.path}")
        a.log = a.log or os.path.splitext(a.out)[0] + "-fastrestartd.log"
        sup, work = launch_tiny(a)
    try:
        run = Run(a)
        if a.launch:
            run.res["machine"] = fr.machine_cpu()
            run.res["launch"] = {"engine": "fastrestart-tinyengine (CPU, host weight daemon)", "size": a.tiny_size,
                                 "startup_delay_s": a.startup_delay, "clients": a.clients}
        return run.main()
    finally:
        if sup is not None:
            sup.stop()
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

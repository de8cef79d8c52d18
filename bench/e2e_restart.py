#!/usr/bin/env python3
"""The end-to-end restart benchmark (issue 6; docs/bench-notes.md "End to end"): time to ready per start path
for a PyTorch Llama engine (python/refengine) and for fastrestart-tinyengine's CUDA build, both supervised
by fastrestartd on GPU 0, plus the anchors (safetensors.torch.load_file to CUDA, per-tensor CUDA IPC).

Paths, each over --runs starts (medians reported):
  cold_dropped  weights.mode off, the engine reads safetensors from disk, page cache dropped before each start
  cold_cached   the same from a warm page cache
  warm          fastrestartd's CUDA weight daemon holds the weights; the engine attaches (kill -9, then restart)
  floor         the engine with its weights merely allocated (torch.empty; refengine only)
Also: kill -9 of the warm engine --kills times (from the kill(2): to READY=1 and to the first answered request), --cycles restart cycles with the GPU's used
memory and the daemon's held bytes after each, bitwise-equal oracle logits on every path, the timeline of
one warm restart, and a chart (matplotlib, when importable).

Needs on PATH: fastrestartd, fastrestartctl, fastrestart-weightd, fastrestart-tinyengine; the Python binding
importable (PYTHONPATH=.bundle/python); torch, transformers, safetensors. scripts/gpu-run.sh e2e runs it.

    bench/e2e_restart.py --out DIR [--size full|small] [--runs 5] [--kills 10] [--cycles 20]
                         [--only refengine,tinyengine,anchors]
Writes DIR/e2e.json (after every stage, so a run cut short keeps what it measured), DIR/e2e.md, DIR/e2e.png
and DIR/logs.tar.gz (every fastrestartd log, the engines' output included).
"""
import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

import fastrestartd_run as fr  # same folder: the launcher, the kill clock, fastrestartctl
from fastrestartd_run import free_port
from h200_weights import drop_caches  # same folder: one definition of "cold"

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REFENGINE = os.path.join(ROOT, "python", "refengine", "fastrestart_refengine.py")
GB = 1e9


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 4) if xs else None


def http_json(port, path, timeout=30):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return json.load(r)


def config_toml(d, name, command, flags, port, weights, backend):
    """The fastrestartd config of one stage: engine NAME on 127.0.0.1:PORT, its files under d."""
    return fr.supervisor_config(
        d, name, command, flags + ["--host", "127.0.0.1", "--port", str(port), "--served-model-name", name], port,
        {"mode": weights["mode"], "backend": backend, "checkpoint": weights["checkpoint"],
         "daemon_path": shutil.which("fastrestart-weightd"), "key": weights.get("key", {})},
        top={"gpus": ["0"] if backend == "cuda" else []}, engine={"stop_grace_s": 20},
        readiness={"startup_timeout_s": 1200, "check_interval_s": 30})


class Supervisor(fr.Fastrestartd):
    """One fastrestartd of a stage (fastrestartd_run.Fastrestartd, started), its engine's HTTP API."""

    def __init__(self, work, name, command, flags, port, weights, out, backend="cuda"):
        d = os.path.join(work, name)
        shutil.rmtree(d, ignore_errors=True)
        super().__init__(d, config_toml(d, name, command, flags, port, weights, backend), fr.control_socket(d),
                         log_path=os.path.join(out, "logs", f"fastrestartd-{name}.log"))
        self.port, self.name = port, name
        self.start()

    def ctl(self, *args, timeout=1200):
        return super().ctl(*args, timeout=timeout)

    def wait_ready(self, n, timeout=1200):
        return super().wait_ready(n, timeout)

    def engine_stats(self):
        return http_json(self.port, "/stats")

    def answer(self):
        """The oracle request's tokens and log-probabilities, hashed: equal hashes = bitwise-equal answers."""
        body = json.dumps({"model": self.name, "prompt": "The capital of France is", "max_tokens": 4,
                           "logprobs": 0}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            c = json.load(r)["choices"][0]
        return hashlib.sha256(json.dumps([c["token_ids"], c["logprobs"]["token_logprobs"]]).encode()).hexdigest()

    def stop(self):
        return super().stop(120)


class Bench:
    def __init__(self, a):
        self.a = a
        self.res = {"args": vars(a), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.work = "/var/tmp/fr-e2e"
        # Logs gather here and leave as one archive (the GPU machine returns at most 8 files).
        self.logs = os.path.join(self.work, "logs")
        shutil.rmtree(self.logs, ignore_errors=True)
        os.makedirs(self.logs)

    def save(self):
        with open(os.path.join(self.a.out, "e2e.json"), "w") as f:
            json.dump(self.res, f, indent=1)

    def machine(self):
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                            "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
        import torch
        import transformers
        self.res["machine"] = {"gpu": q, "kernel": os.uname().release, "torch": torch.__version__,
                               "transformers": transformers.__version__, "python": sys.version.split()[0]}
        log(f"machine: {self.res['machine']}")

    # --- checkpoints ---------------------------------------------------------------------------------
    def llama_ckpt(self):
        d = os.path.join(self.work, "llama-" + self.a.size)
        if not os.path.exists(os.path.join(d, "config.json")):
            shape = ["--shape", "tiny"] if self.a.size == "small" else []
            t = time.monotonic()
            subprocess.run([sys.executable, os.path.join(HERE, "gen_llama_checkpoint.py"), d, *shape], check=True)
            log(f"generated {d} in {time.monotonic() - t:.1f} s")
        return d

    def tiny_ckpt(self):
        size = "16G" if self.a.size == "full" else "256M"
        d = os.path.join(self.work, "tiny-" + size)
        if not os.path.isdir(d):
            t = time.monotonic()
            subprocess.run(["fastrestart-tinyengine", "gen", "--out", d, "--size", size, "--dtype", "BF16"],
                           check=True, stdout=subprocess.DEVNULL)
            log(f"generated {d} in {time.monotonic() - t:.1f} s")
        return d

    @staticmethod
    def ckpt_bytes(d):
        return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".safetensors"))

    # --- one engine, every path ----------------------------------------------------------------------
    def starts(self, sup, n, label, drop=False, first=False):
        """n starts of the supervised engine: the first READY (first=True) then stop/start cycles."""
        out = []
        for i in range(n):
            if first and i == 0:
                st = sup.wait_ready(1)
            else:
                k = sup.readies()
                sup.ctl("stop-engine")
                dropped = drop_caches() if drop else None
                sup.ctl("start-engine")
                st = sup.wait_ready(k + 1)
                if drop and not dropped:
                    self.res.setdefault("notes", []).append(f"{label}: page cache not dropped")
            es = sup.engine_stats()
            ls = st["last_start"]
            out.append({"path": ls["path"], "time_to_ready_s": ls["time_to_ready_s"],
                        "load_path": es["load"].get("path"), "phases": es.get("startup", {}).get("phases")
                        or es["load"].get("phases"), "oracle": es.get("oracle"), "answer": sup.answer(),
                        "memory": st.get("memory")})
            log(f"{label} #{i + 1}: {ls['path']} / engine {es['load'].get('path')}: "
                f"exec to READY {ls['time_to_ready_s']:.3f} s")
        return out

    def kills(self, sup, n, label):
        """n kill -9s of the supervised engine, each timed from the kill(2) (fastrestartd_run.KillClock), with
        --clients clients sending requests across it (kill -> the first answered request)."""
        out = []
        for i in range(n):
            st = sup.status()
            k = sup.readies()
            prober = fr.Prober(sup.port, fr.completion_body(sup.name), clients=self.a.clients).start() if self.a.clients else None
            if prober:
                prober.wait_answered_since(time.monotonic(), 60)
            clock = fr.KillClock(st["engine"]["pid"]).kill()
            try:
                st = sup.wait_ready(k + 1)
                clock.ready(st, time.monotonic())
                if prober:
                    prober.wait_answered_since(clock.t_kill, 600)
            finally:
                if prober:
                    clock.answers(prober.finish())
            c = clock.record()
            es = sup.engine_stats()
            m = (st.get("memory") or [{}])[0]
            c.update({"load_path": es["load"].get("path"),
                      "phases": es.get("startup", {}).get("phases") or es["load"].get("phases"),
                      "attach_timings": es["load"].get("attach_timings"),
                      "oracle": es.get("oracle"), "answer": sup.answer(), "gpu_used_bytes": m.get("used_bytes"),
                      "daemon_held_bytes": m.get("daemon_held_bytes")})
            out.append(c)
            log(f"{label} kill -9 #{i + 1}: {c['path']} / engine {es['load'].get('path')}: kill to READY "
                f"{c.get('kill_to_ready_s')} s, to the first answer {c.get('kill_to_first_answer_s')} s (kill to reap "
                f"{c.get('kill_to_reap_s')} s, exec to READY {c['exec_to_ready_s']:.3f} s), "
                f"GPU used {(m.get('used_bytes') or 0) / GB:.2f} GB, daemon holds {(m.get('daemon_held_bytes') or 0) / GB:.2f} GB")
        return out

    def engine(self, kind):
        a = self.a
        if kind == "refengine":
            ck = self.llama_ckpt()
            # the single-request engine these figures were measured on (docs/refengine.md)
            command = [sys.executable, REFENGINE, "serve", ck, "--max-num-seqs", "1", "--enforce-eager"]
            disk, warm_fmt, floor = ["--load-format", "disk"], ["--load-format", "fastrestart"], ["--load-format", "dummy"]
            key = {"arch": "LlamaForCausalLM", "dtype": "BF16", "engine": "fastrestart-refengine 0.1.0",
                   "tp_size": "1", "tp_rank": "0"}
        else:
            ck = self.tiny_ckpt()
            command = [shutil.which("fastrestart-tinyengine"), "serve", ck]
            dev = a.tinyengine_device
            disk = ["--device", dev, "--load-format", "disk"]
            warm_fmt = ["--device", dev, "--load-format", "fastrestart"]
            floor = None
            key = None  # the engine's version string is read from its /stats below
        backend = "host" if kind == "tinyengine" and a.tinyengine_device == "cpu" else "cuda"
        r = self.res.setdefault(kind, {})
        r["checkpoint"] = {"path": ck, "bytes": self.ckpt_bytes(ck)}
        self.save()
        port = free_port()
        if kind in a.warm_only.split(","):  # its cold and floor figures come from an earlier run
            disk_cfg, floor = None, None
        else:
            disk_cfg = disk
        if disk_cfg is None:
            version = "0.1.0"
        else:
            version = self.cold_paths(kind, r, command, disk, port, ck, backend)
        if key is None:
            key = {"arch": "tinyengine", "dtype": "BF16", "engine": f"fastrestart-tinyengine {version}",
                   "tp_size": "1", "tp_rank": "0"}
        self.floor_and_warm(kind, r, command, floor, warm_fmt, port, ck, backend, key)

    def cold_paths(self, kind, r, command, disk, port, ck, backend):
        a = self.a
        sup = Supervisor(self.work, f"{kind}-cold", command, disk, port,
                         {"mode": "off", "checkpoint": ck}, self.work, backend)
        try:
            drop_caches()
            r["cold_dropped"] = self.starts(sup, a.runs, f"{kind} cold_dropped", drop=True, first=True)
            self.save()
            r["cold_cached"] = self.starts(sup, a.runs, f"{kind} cold_cached")
            self.save()
            return sup.engine_stats().get("version")
        finally:
            sup.stop()

    def floor_and_warm(self, kind, r, command, floor, warm_fmt, port, ck, backend, key):
        a = self.a
        if floor:
            sup = Supervisor(self.work, f"{kind}-floor", command, floor, port, {"mode": "off", "checkpoint": ck}, self.work, backend)
            try:
                r["floor"] = self.starts(sup, a.runs, f"{kind} floor", first=True)
            finally:
                sup.stop()
            self.save()
        warm_fmt += ["--fastrestart-socket-dir", os.path.join(self.work, f"{kind}-warm", "run")]
        sup = Supervisor(self.work, f"{kind}-warm", command, warm_fmt, port,
                         {"mode": "zero_copy", "checkpoint": ck, "key": key}, self.work, backend)
        try:
            r["warm_first"] = self.starts(sup, 1, f"{kind} warm first start", first=True)
            r["warm_kill9"] = self.kills(sup, a.kills, kind)
            self.save()
            more = max(0, a.cycles - a.kills)
            r["warm_cycles"] = self.kills(sup, more, f"{kind} cycle") if more else []
            # With the engine stopped after the cycles, what is left on the GPU is the daemon's: its pools
            # plus its CUDA context. Equal to the first cycle's figure = nothing leaked.
            k = sup.readies()
            sup.ctl("stop-engine")
            time.sleep(2)
            m = (sup.status().get("memory") or [{}])[0]
            r["engine_stopped_after_cycles"] = {"gpu_used_bytes": m.get("used_bytes"),
                                                "daemon_held_bytes": m.get("daemon_held_bytes")}
            log(f"{kind}: engine stopped after the cycles: GPU used {m.get('used_bytes', 0) / GB:.3f} GB, "
                f"daemon holds {m.get('daemon_held_bytes', 0) / GB:.3f} GB")
            sup.ctl("start-engine")
            sup.wait_ready(k + 1)
            r["warm_restart"] = self.starts(sup, a.runs if a.restarts is None else a.restarts, f"{kind} warm restart")
            r["daemons"] = json.loads(sup.ctl("daemons"))
        finally:
            sup.stop()
        self.save()

    # --- anchors -------------------------------------------------------------------------------------
    def anchors(self):
        ck = self.llama_ckpt()
        files = sorted(os.path.join(ck, f) for f in os.listdir(ck) if f.endswith(".safetensors"))
        r = self.res.setdefault("anchors", {})
        code = f"""
import json, sys, time
import torch
from safetensors.torch import load_file
torch.empty(1, device="cuda:0"); torch.cuda.synchronize()
t = time.monotonic()
n = 0
for f in {files!r}:
    n += sum(v.numel() * v.element_size() for v in load_file(f, device="cuda:0").values())
torch.cuda.synchronize()
print(json.dumps({{"seconds": time.monotonic() - t, "bytes": n}}))
"""
        runs = []
        for _ in range(self.a.runs):
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
        r["safetensors_load_file_cuda_cached"] = runs
        log(f"safetensors.torch.load_file to cuda (warm page cache): median {med([x['seconds'] for x in runs]):.3f} s")
        self.save()
        r["per_tensor_cuda_ipc"] = self.ipc_anchor(files)
        r["fastrestart_attach"] = self.attach_anchor(files)
        self.save()

    def ipc_anchor(self, files):
        """The legacy mechanism (vLLM's ipc_cache, SGLang): one CUDA IPC handle per tensor, rebuilt with
        torch.multiprocessing's reductions in a fresh consumer process, as a restarting engine would."""
        producer = f"""
import pickle, sys, torch
from safetensors.torch import load_file
from torch.multiprocessing.reductions import reduce_tensor
state = {{}}
for f in {files!r}:
    state.update(load_file(f, device="cuda:0"))
torch.cuda.synchronize()
handles = {{k: reduce_tensor(v) for k, v in state.items()}}
with open(sys.argv[1], "wb") as f:
    pickle.dump(handles, f)
print("ready", flush=True)
sys.stdin.read()  # hold the memory until told to go
"""
        consumer = """
import json, pickle, sys, time, torch
torch.empty(1, device="cuda:0"); torch.cuda.synchronize()
with open(sys.argv[1], "rb") as f:
    handles = pickle.load(f)
t = time.monotonic()
state = {k: fn(*args) for k, (fn, args) in handles.items()}
torch.cuda.synchronize()
dt = time.monotonic() - t
print(json.dumps({"seconds": dt, "tensors": len(state)}))
"""
        hp = os.path.join(self.work, "ipc-handles.pkl")
        prod = subprocess.Popen([sys.executable, "-c", producer, hp], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
        runs = []
        try:
            if prod.stdout.readline().strip() != "ready":
                raise RuntimeError("the IPC producer failed")
            for _ in range(self.a.runs):
                p = subprocess.run([sys.executable, "-c", consumer, hp], capture_output=True, text=True)
                if p.returncode != 0:
                    runs.append({"error": p.stderr.strip()[-500:]})
                    continue
                runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
        finally:
            prod.stdin.close()
            prod.wait(60)
        ok = [x["seconds"] for x in runs if "seconds" in x]
        log(f"per-tensor CUDA IPC attach ({runs[0].get('tensors')} tensors): median "
            f"{med(ok) * 1e3 if ok else float('nan'):.2f} ms" if ok else f"per-tensor IPC failed: {runs[:1]}")
        return runs

    def attach_anchor(self, files):
        """Our attach of the same files from a CUDA weight daemon, in a fresh process each time."""
        run_dir = os.path.join(self.work, "anchor-run")
        shutil.rmtree(run_dir, ignore_errors=True)
        key = {"arch": "LlamaForCausalLM", "dtype": "BF16", "engine": "anchor", "tp_size": "1", "tp_rank": "0"}
        d = subprocess.Popen(["fastrestart-weightd", "--backend", "cuda", "--gpu", "0", "--socket-dir", run_dir,
                              *[x for f in files for x in ("--preload", f)],
                              *[x for k, v in key.items() for x in ("--config", f"{k}={v}")]],
                             stdout=open(os.path.join(self.logs, "weightd-anchor.log"), "w"), stderr=subprocess.STDOUT)
        consumer = f"""
import json, time, torch, fastrestart
torch.empty(1, device="cuda:0"); torch.cuda.synchronize()
for _ in range(600):
    r = fastrestart.attach({files!r}, {key!r}, socket_dir={run_dir!r}, device="cuda:0", fallback=True)
    if r.hit: break
    time.sleep(0.5)
t = time.monotonic()
r = fastrestart.attach({files!r}, {key!r}, socket_dir={run_dir!r}, device="cuda:0")
state = {{k: torch.from_dlpack(v) for k, v in r.tensors.items()}}
torch.cuda.synchronize()
print(json.dumps({{"seconds": time.monotonic() - t, "hit": r.hit, "tensors": len(state), "timings": r.timings}}))
"""
        runs = []
        try:
            for _ in range(self.a.runs):
                p = subprocess.run([sys.executable, "-c", consumer], capture_output=True, text=True)
                if p.returncode != 0:
                    runs.append({"error": p.stderr.strip()[-500:]})
                    continue
                runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
        finally:
            d.send_signal(signal.SIGTERM)
            d.wait(60)
        ok = [x["seconds"] for x in runs if x.get("hit")]
        log(f"fastrestart attach + from_dlpack ({runs[0].get('tensors')} tensors): median "
            f"{med(ok) * 1e3:.2f} ms" if ok else f"fastrestart attach failed: {runs[:1]}")
        return runs

    # --- report --------------------------------------------------------------------------------------
    def report(self):
        lines = [f"# End-to-end restart benchmark ({self.res['started']}, size {self.a.size})", ""]
        m = self.res.get("machine", {})
        lines += [f"machine: {m}", ""]
        summary = {}
        for kind in ("refengine", "tinyengine"):
            r = self.res.get(kind)
            if not r:
                continue
            s = summary[kind] = {}
            for p in ("cold_dropped", "cold_cached", "floor", "warm_restart"):
                if r.get(p):
                    s[p] = med([x["time_to_ready_s"] for x in r[p]])
            if r.get("warm_kill9"):
                s["warm_kill9_exec_to_ready"] = med([x["exec_to_ready_s"] for x in r["warm_kill9"]])
                # from the kill(2): the headline; the reap-based figure is a row of its breakdown
                s["warm_kill9_kill_clock"] = fr.kill_clock_summary(r["warm_kill9"])
                s["warm_paths"] = sorted({x["load_path"] for x in r["warm_kill9"] + r.get("warm_cycles", [])})
                cyc = r["warm_kill9"] + r.get("warm_cycles", [])
                used = [x["gpu_used_bytes"] for x in cyc if x.get("gpu_used_bytes")]
                held = [x["daemon_held_bytes"] for x in cyc if x.get("daemon_held_bytes") is not None]
                if used:
                    s["cycles"] = len(cyc)
                    s["gpu_used_first_last_gb"] = [round(used[0] / GB, 3), round(used[-1] / GB, 3)]
                    s["gpu_used_growth_mb"] = round((used[-1] - used[0]) / 1e6, 1)
                    s["daemon_held_gb"] = sorted({round(h / GB, 3) for h in held})
            if r.get("engine_stopped_after_cycles"):
                e = r["engine_stopped_after_cycles"]
                if e.get("gpu_used_bytes") is not None:
                    s["engine_stopped_gpu_used_gb"] = round(e["gpu_used_bytes"] / GB, 3)
                    s["engine_stopped_used_minus_held_gb"] = round(
                        (e["gpu_used_bytes"] - (e.get("daemon_held_bytes") or 0)) / GB, 3)
            shas, answers = {}, {}
            for p in ("cold_dropped", "cold_cached", "warm_first", "warm_kill9", "warm_cycles", "warm_restart"):
                for x in r.get(p) or []:
                    if x.get("oracle"):
                        shas.setdefault(x["oracle"]["logits_sha256"], set()).add(x["load_path"])
                    if x.get("answer"):
                        answers.setdefault(x["answer"], set()).add(x["load_path"])
            if shas:  # the reference engine's full logits vector of the oracle prompt, hashed
                s["oracle_logits_distinct"] = len(shas)
            s["answers_distinct"] = len(answers)  # 4 tokens and their log-probabilities, hashed
            s["oracle_paths"] = sorted({p for v in answers.values() for p in v})
            if "cold_dropped" in s and "warm_kill9_exec_to_ready" in s:
                s["speedup_cold_dropped_over_warm"] = round(s["cold_dropped"] / s["warm_kill9_exec_to_ready"], 1)
            if "floor" in s and "warm_kill9_exec_to_ready" in s:
                s["warm_minus_floor_s"] = round(s["warm_kill9_exec_to_ready"] - s["floor"], 3)
        an = self.res.get("anchors", {})
        for k in ("safetensors_load_file_cuda_cached", "per_tensor_cuda_ipc", "fastrestart_attach"):
            ok = [x["seconds"] for x in an.get(k, []) if "seconds" in x]
            if ok:
                summary.setdefault("anchors", {})[k + "_s"] = med(ok)
        self.res["summary"] = summary
        lines += ["```", json.dumps(summary, indent=1), "```"]
        with open(os.path.join(self.a.out, "e2e.md"), "w") as f:
            f.write("\n".join(lines) + "\n")
        self.save()
        print("\n".join(lines), flush=True)
        self.chart(summary)

    def timeline(self, kind):
        """(name, start, duration) of the median warm kill -9 restart, from the kill(2) to READY=1."""
        k9s = sorted((x for x in (self.res.get(kind) or {}).get("warm_kill9") or []
                      if x.get("phases") and x.get("kill_to_ready_s") is not None), key=lambda x: x["kill_to_ready_s"])
        if not k9s:
            return []
        k9 = k9s[len(k9s) // 2]
        reap = k9.get("kill_to_reap_s") or 0.0
        t = reap + k9["reap_to_ready_s"] - k9["exec_to_ready_s"]
        steps = [("kill(2) to fastrestartd's reap", 0.0, reap), ("reap to engine exec", reap, t - reap)]
        for name, v in k9["phases"].items():
            if v is not None:
                steps.append((name[:-2] if name.endswith("_s") else name, t, v))
                t += v
        steps.append(("readiness probe, READY=1", t, max(0.0, k9["kill_to_ready_s"] - t)))
        return steps

    NAMES = {"cold_dropped": "cold, disk (cache dropped)", "cold_cached": "cold, disk (page cache)",
             "warm_kill9_exec_to_ready": "warm (weight daemon)", "floor": "floor (no weights)"}

    def chart(self, summary):
        kinds = [k for k in ("refengine", "tinyengine") if k in summary]
        if not kinds:
            return
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return self.chart_gnuplot(summary, kinds)
        fig, axes = plt.subplots(1, len(kinds) + 1, figsize=(6 * (len(kinds) + 1), 4.5))
        for ax, kind in zip(axes, kinds):
            s = summary[kind]
            keys = [k for k in self.NAMES if s.get(k) is not None]
            bars = ax.bar([self.NAMES[k].replace(" (", "\n(") for k in keys], [s[k] for k in keys])
            ax.bar_label(bars, labels=[f"{s[k]:.2f} s" for k in keys])
            ax.set_title(kind)
            ax.set_ylabel("engine exec to READY=1 (s), median")
        ax, steps = axes[-1], self.timeline(kinds[0])
        for i, (n, start, dur) in enumerate(steps):
            ax.barh(i, dur, left=start)
            ax.text(start + dur, i, f" {n} {dur * 1e3:.0f} ms", va="center", fontsize=8)
        ax.set_yticks([])
        ax.invert_yaxis()
        ax.set_xlabel("seconds since the kill(2)")
        ax.set_title(f"one warm restart ({kinds[0]}, kill -9)")
        fig.tight_layout()
        path = os.path.join(self.a.out, "e2e.png")
        fig.savefig(path, dpi=110)
        log(f"chart: {path}")

    def chart_gnuplot(self, summary, kinds):
        """The same chart with gnuplot (Debian: gnuplot-nox) where matplotlib is missing."""
        if not shutil.which("gnuplot"):
            log("no chart: neither matplotlib nor gnuplot")
            return
        d = os.path.join(self.a.out, "e2e-chart")
        os.makedirs(d, exist_ok=True)
        plots = []
        for i, kind in enumerate(kinds):
            s = summary[kind]
            keys = [k for k in self.NAMES if s.get(k) is not None]
            with open(os.path.join(d, f"{kind}.dat"), "w") as f:
                for j, k in enumerate(keys):
                    f.write(f'{j} "{self.NAMES[k]}" {s[k]}\n')
            plots.append(f"""set title "{kind}: engine exec to READY=1 (s), median"
set style fill solid 0.8
set boxwidth 0.6
set yrange [0:{max(s[k] for k in keys) * 1.15}]
set xtics rotate by -20 font ",9"
set ytics
plot "{d}/{kind}.dat" using 1:3:xtic(2) with boxes notitle lc rgb "#4477aa", \\
     "" using 1:3:(sprintf("%.2f s", $3)) with labels offset 0,0.7 notitle""")
        steps = self.timeline(kinds[0])
        with open(os.path.join(d, "timeline.dat"), "w") as f:
            for i, (n, start, dur) in enumerate(steps):
                f.write(f'{i} {start} {dur} "{n} {dur * 1e3:.0f} ms"\n')
        end = steps[-1][1] + steps[-1][2] if steps else 1
        plots.append(f"""set title "one warm restart of {kinds[0]} after kill -9 (s since the kill(2))"
set xrange [0:{end * 1.7}]
set yrange [{len(steps)}:-1]
unset xtics
set xtics font ",9"
unset ytics
plot "{d}/timeline.dat" using ($2+$3/2):1:($3/2):(0.35) with boxxyerror fs solid 0.8 lc rgb "#44aa77" notitle, \\
     "" using ($2+$3):1:4 with labels left offset 0.5,0 font ",8" notitle""")
        png = os.path.join(self.a.out, "e2e.png")
        script = f"""set terminal pngcairo noenhanced size {560 * len(plots)},420 font ",10"
set output "{png}"
set multiplot layout 1,{len(plots)}
""" + "\n".join(plots) + "\nunset multiplot\n"
        with open(os.path.join(d, "chart.gp"), "w") as f:
            f.write(script)
        r = subprocess.run(["gnuplot", os.path.join(d, "chart.gp")], capture_output=True, text=True)
        log(f"chart: {png}" if r.returncode == 0 else f"gnuplot failed: {r.stderr.strip()[-300:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", choices=["full", "small"], default="full")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--only", default="anchors,refengine,tinyengine")
    ap.add_argument("--warm-only", default="", help="engines (comma-separated) to measure on the warm path only")
    ap.add_argument("--restarts", type=int, default=None, help="warm restarts after the cycles (default --runs)")
    ap.add_argument("--report-from", metavar="E2E_JSON",
                    help="measure nothing: write the report and chart of an earlier run's e2e.json into --out")
    fr.add_clock_args(ap)
    ap.add_argument("--tinyengine-device", default="cuda:0",
                    help="cpu runs the tinyengine stage on a machine without a GPU (host weight daemon)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    b = Bench(a)
    if a.report_from:
        with open(a.report_from) as f:
            b.res = json.load(f)
        b.report()
        return 0
    if "refengine" in a.only or "anchors" in a.only:
        b.machine()
    for stage in a.only.split(","):
        t = time.monotonic()
        try:
            if stage == "anchors":
                b.anchors()
            else:
                b.engine(stage)
        except Exception as e:  # keep going: the other stages' figures are still worth having
            log(f"stage {stage} failed: {type(e).__name__}: {e}")
            b.res.setdefault("errors", {})[stage] = f"{type(e).__name__}: {e}"
        log(f"stage {stage}: {time.monotonic() - t:.1f} s")
        b.save()
    b.report()
    subprocess.run(["tar", "-czf", os.path.join(a.out, "logs.tar.gz"), "-C", b.work, "logs"], check=False)
    return 1 if b.res.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The H200 weight-store benchmark (issue 2; results in docs/bench-notes.md).

Run by scripts/gpu-run.sh on the GPU machine, with the bundle's binaries on PATH. In one run:
  - generate the Llama-3.1-8B-shaped checkpoint (gen_llama_checkpoint.py) unless present;
  - read it with `dd iflag=direct` (the disk's own rate);
  - start fastrestart-weightd --backend cuda, preload it from a cold page cache, attach from fresh
    processes (fastrestart-weightctl attach --json, and fr_attach_bench for attach/verify/copy timings
    with the CUDA context already up, as in an engine), write through a read-only zero_copy mapping in a
    child process (must be refused) and verify the digest afterwards, then evict and preload again from a
    warm page cache;
  - safetensors.torch.load_file(..., device="cuda") of the same files, cold and warm.
Writes results.json into the output folder and prints a summary. Cold means `sync; echo 3 >
/proc/sys/vm/drop_caches` right before.

    h200_weights.py --out DIR [--ckpt DIR] [--scale 1.0] [--skip-safetensors] [--backend cuda|host]
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

CONFIG = ["arch=LlamaForCausalLM", "dtype=bfloat16", "tp_size=1", "tp_rank=0", "engine=bench"]


def log(*a):
    print(*a, flush=True)


def run(cmd, check=True, **kw):
    t = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    dt = time.perf_counter() - t
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}")
    return p, dt


def drop_caches():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError as e:
        log(f"cannot drop the page cache ({e}); 'cold' figures are not cold")
        return False


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON in:\n" + text)


class Bench:
    def __init__(self, a):
        self.a = a
        self.res = {"scale": a.scale, "ckpt": a.ckpt}
        self.here = os.path.dirname(os.path.abspath(__file__))
        self.weightd, self.weightctl, self.bench = (
            shutil.which(n) for n in ("fastrestart-weightd", "fastrestart-weightctl", "fr_attach_bench"))
        self.sock = "/tmp/fr-bench-sock"
        # --backend host exercises the script on a machine without a GPU (the CUDA-only stages then fail).
        self.backend = ["--backend", "host"] if a.backend == "host" else ["--backend", "cuda", "--gpu", "0"]
        self.ctl = [self.weightctl, "--socket-dir", self.sock, "--device", "host" if a.backend == "host" else "cuda:0"]

    def save(self):
        with open(os.path.join(self.a.out, "results.json"), "w") as f:
            json.dump(self.res, f, indent=1)

    def stage(self, name, fn):
        """Runs one measurement; a failure is recorded and the next stages still run."""
        try:
            fn()
        except Exception as e:
            self.res.setdefault("errors", {})[name] = str(e)
            log(f"{name} FAILED: {e}")
        self.save()

    def checkpoint(self):
        a = self.a
        self.files = sorted(glob.glob(os.path.join(a.ckpt, "*.safetensors")))
        if not self.files:
            p, dt = run([sys.executable, os.path.join(self.here, "gen_llama_checkpoint.py"), a.ckpt, "--scale",
                         str(a.scale)])
            self.res["generate"] = {"seconds": dt, **last_json(p.stdout)}
            log(f"generated {a.ckpt} in {dt:.1f} s: {p.stdout.strip()}")
            self.files = sorted(glob.glob(os.path.join(a.ckpt, "*.safetensors")))
        self.total = sum(os.path.getsize(f) for f in self.files)
        self.res["files"], self.res["file_bytes"] = len(self.files), self.total

    def dd(self):
        drop_caches()
        t = time.perf_counter()
        for f in self.files:
            run(["dd", f"if={f}", "of=/dev/null", "bs=64M", "iflag=direct"])
        dt = time.perf_counter() - t
        self.res["dd_direct"] = {"seconds": dt, "gbps": self.total / dt / 1e9}
        log(f"dd iflag=direct: {self.total / 1e9:.2f} GB in {dt:.2f} s = {self.total / dt / 1e9:.2f} GB/s")

    def preload(self, label):
        p, dt = run(self.ctl + ["preload", "--wait", "--dtype", "BF16"] + self.files + ["--config"] + CONFIG)
        st = json.loads(run(self.ctl + ["status", "--json"])[0].stdout)
        e = st["entries"][0]
        self.res[label] = {"seconds": dt, "gbps": self.total / dt / 1e9, "daemon_progress": e.get("progress"),
                           "held_bytes": st.get("held_bytes"), "digest": e.get("digest")}
        log(f"{label}: {dt:.2f} s = {self.total / dt / 1e9:.2f} GB/s (daemon: {e.get('progress')})")

    def weightctl_attach(self):
        attaches = []
        for _ in range(3):
            p, _ = run(self.ctl + ["attach", "--json"] + self.files + ["--config"] + CONFIG)
            attaches.append(last_json(p.stdout))
        self.res["weightctl_attach"] = attaches
        log("weightctl attach (fresh process; connect/total include its CUDA context): " + ", ".join(
            f"total {x['timings']['total_s'] * 1e3:.2f} ms (request {x['timings']['request_s'] * 1e3:.3f}, "
            f"map {x['timings']['map_s'] * 1e3:.3f})" for x in attaches))

    def attach_bench(self):
        p, _ = run([self.bench, "--socket-dir", self.sock, "--repeat", "10"] + self.files + ["--config"] + CONFIG)
        b = last_json(p.stdout)
        self.res["attach_bench"] = b
        if "error" in b:
            raise RuntimeError(b["error"])
        v = b["verify"]["verify_s"]
        log(f"fr_attach_bench: context {b['context_s'] * 1e3:.1f} ms, attach first {b['attach_first_total_s'] * 1e3:.3f} ms, "
            f"median {b['attach_median_total_s'] * 1e3:.3f} ms (map {b['attach_median_map_s'] * 1e3:.3f} ms), "
            f"verify {v * 1e3:.2f} ms ({self.total / v / 1e12:.2f} TB/s), copy {b['copy']['copy_s'] * 1e3:.2f} ms")

    def write_test(self):
        p, _ = run([self.bench, "--socket-dir", self.sock, "--write-test"] + self.files + ["--config"] + CONFIG,
                   check=False)
        w = last_json(p.stdout)
        self.res["write_through_read_only"] = {"exit_code": p.returncode, **w}
        p, _ = run(self.ctl + ["attach", "--json", "--verify"] + self.files + ["--config"] + CONFIG, check=False)
        self.res["verify_after_write_test"] = {"exit_code": p.returncode, "output": p.stdout[-2000:]}
        log(f"write through a read-only zero_copy mapping in a child: exit {self.res['write_through_read_only']['exit_code']}, "
            f"{w.get('write_through_read_only')}; verify afterwards: exit {p.returncode}")

    def start_daemon(self, extra, logname):
        shutil.rmtree(self.sock, ignore_errors=True)
        os.makedirs(self.sock, mode=0o700)
        dlog = open(os.path.join(self.a.out, logname), "w")
        daemon = subprocess.Popen([self.weightd] + self.backend + ["--socket-dir", self.sock] + extra,
                                  stdout=dlog, stderr=subprocess.STDOUT)
        for _ in range(200):
            if glob.glob(os.path.join(self.sock, "*.sock")) or daemon.poll() is not None:
                break
            time.sleep(0.05)
        if daemon.poll() is not None:
            raise RuntimeError(f"fastrestart-weightd exited at start; see {logname}")
        return daemon, dlog

    def stop_daemon(self, daemon, dlog):
        try:
            if daemon.poll() is None:
                run(self.ctl + ["shutdown"], check=False)
                daemon.wait(timeout=30)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
            dlog.close()

    def daemon_stages(self):
        daemon, dlog = self.start_daemon([], "weightd.log")
        try:
            self.res["preload_cold_page_cache_dropped"] = drop_caches()
            self.stage("preload_cold", lambda: self.preload("preload_cold"))
            self.stage("weightctl_attach", self.weightctl_attach)
            self.stage("attach_bench", self.attach_bench)
            self.stage("write_test", self.write_test)
            self.stage("evict", lambda: run(self.ctl + ["evict", "--all"]))
            self.stage("preload_warm", lambda: self.preload("preload_warm"))
        finally:
            self.stop_daemon(daemon, dlog)

    def warm_with_more_readers(self, threads):
        """A fresh daemon (nothing cached in it) preloading from the still-warm page cache."""
        daemon, dlog = self.start_daemon(["--reader-threads", str(threads)], f"weightd-{threads}.log")
        try:
            self.preload(f"preload_warm_fresh_daemon_{threads}_readers")
        finally:
            self.stop_daemon(daemon, dlog)

    def safetensors(self, label):
        code = ("import sys, time, json, torch\n"
                "from safetensors.torch import load_file\n"
                "torch.empty(1, device='cuda'); torch.cuda.synchronize()\n"
                "t = time.perf_counter(); keep = [load_file(f, device='cuda') for f in sys.argv[1:]]\n"
                "torch.cuda.synchronize(); print(json.dumps({'seconds': time.perf_counter() - t}))\n")
        if label.endswith("cold"):
            drop_caches()
        p, _ = run([sys.executable, "-c", code] + self.files)
        s = last_json(p.stdout)["seconds"]
        self.res[label] = {"seconds": s, "gbps": self.total / s / 1e9}
        log(f"{label}: {s:.2f} s = {self.total / s / 1e9:.2f} GB/s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--ckpt", default="/var/tmp/fr-llama8b")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--skip-safetensors", action="store_true")
    ap.add_argument("--backend", default="cuda", choices=["cuda", "host"])
    b = Bench(ap.parse_args())
    b.checkpoint()
    b.stage("dd_direct", b.dd)
    b.stage("daemon", b.daemon_stages)
    for threads in (8, 16):
        b.stage(f"warm_{threads}_readers", lambda: b.warm_with_more_readers(threads))
    if not b.a.skip_safetensors:
        b.stage("safetensors_cold", lambda: b.safetensors("safetensors_cold"))
        b.stage("safetensors_warm", lambda: b.safetensors("safetensors_warm"))
    b.save()
    return 1 if b.res.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The H200 weight-store benchmark (issue 2; results in docs/benchmarks.md).

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

    h200_weights.py --out DIR [--ckpt DIR] [--scale 1.0] [--skip-safetensors]
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--ckpt", default="/var/tmp/fr-llama8b")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--skip-safetensors", action="store_true")
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    weightd, weightctl, bench = (shutil.which(n) for n in ("fastrestart-weightd", "fastrestart-weightctl", "fr_attach_bench"))
    res = {"scale": a.scale, "ckpt": a.ckpt}

    files = sorted(glob.glob(os.path.join(a.ckpt, "*.safetensors")))
    if not files:
        p, dt = run([sys.executable, os.path.join(here, "gen_llama_checkpoint.py"), a.ckpt, "--scale", str(a.scale)])
        res["generate"] = {"seconds": dt, **last_json(p.stdout)}
        log(f"generated {a.ckpt} in {dt:.1f} s: {p.stdout.strip()}")
        files = sorted(glob.glob(os.path.join(a.ckpt, "*.safetensors")))
    total = sum(os.path.getsize(f) for f in files)
    res["files"], res["file_bytes"] = len(files), total

    drop_caches()
    t = time.perf_counter()
    for f in files:
        run(["dd", f"if={f}", "of=/dev/null", "bs=64M", "iflag=direct"])
    dt = time.perf_counter() - t
    res["dd_direct"] = {"seconds": dt, "gbps": total / dt / 1e9}
    log(f"dd iflag=direct: {total / 1e9:.2f} GB in {dt:.2f} s = {total / dt / 1e9:.2f} GB/s")

    sock = "/tmp/fr-bench-sock"
    shutil.rmtree(sock, ignore_errors=True)
    os.makedirs(sock, mode=0o700)
    dlog = open(os.path.join(a.out, "weightd.log"), "w")
    daemon = subprocess.Popen([weightd, "--backend", "cuda", "--gpu", "0", "--socket-dir", sock], stdout=dlog,
                              stderr=subprocess.STDOUT)
    ctl = [weightctl, "--socket-dir", sock, "--device", "cuda:0"]
    try:
        for _ in range(200):
            if glob.glob(os.path.join(sock, "*.sock")) or daemon.poll() is not None:
                break
            time.sleep(0.05)
        if daemon.poll() is not None:
            raise RuntimeError("fastrestart-weightd exited at start; see weightd.log")

        def preload(label):
            p, dt = run(ctl + ["preload", "--wait", "--dtype", "BF16"] + files + ["--config"] + CONFIG)
            st = json.loads(run(ctl + ["status", "--json"])[0].stdout)
            e = st["entries"][0]
            res[label] = {"seconds": dt, "gbps": total / dt / 1e9, "daemon_progress": e.get("progress"),
                          "held_bytes": st.get("held_bytes"), "digest": e.get("digest")}
            log(f"{label}: {dt:.2f} s = {total / dt / 1e9:.2f} GB/s (daemon: {e.get('progress')})")

        res["preload_cold_page_cache_dropped"] = drop_caches()
        preload("preload_cold")

        attaches = []
        for _ in range(3):
            p, _ = run(ctl + ["attach", "--json"] + files + ["--config"] + CONFIG)
            attaches.append(last_json(p.stdout))
        res["weightctl_attach"] = attaches
        log("weightctl attach (fresh process, total includes its CUDA context): " +
            ", ".join(f"{x['timings']['total_s'] * 1e3:.2f} ms (map {x['timings']['map_s'] * 1e3:.3f})" for x in attaches))

        p, _ = run([bench, "--socket-dir", sock, "--repeat", "10"] + files + ["--config"] + CONFIG)
        b = last_json(p.stdout)
        res["attach_bench"] = b
        log(f"fr_attach_bench: context {b['context_s'] * 1e3:.1f} ms, attach first {b['attach_first_total_s'] * 1e3:.3f} ms, "
            f"median {b['attach_median_total_s'] * 1e3:.3f} ms (map {b['attach_median_map_s'] * 1e3:.3f} ms), "
            f"verify {b['verify']['verify_s'] * 1e3:.2f} ms ({total / b['verify']['verify_s'] / 1e12:.2f} TB/s), "
            f"copy {b['copy']['copy_s'] * 1e3:.2f} ms")

        p, _ = run([bench, "--socket-dir", sock, "--write-test"] + files + ["--config"] + CONFIG, check=False)
        w = last_json(p.stdout)
        res["write_through_read_only"] = {"exit_code": p.returncode, **w}
        p, _ = run(ctl + ["attach", "--json", "--verify"] + files + ["--config"] + CONFIG, check=False)
        v = last_json(p.stdout)
        res["verify_after_write_test"] = {"exit_code": p.returncode, **v}
        log(f"write through read-only mapping in a child: exit {res['write_through_read_only']['exit_code']}, "
            f"{w.get('write_through_read_only')}; verify afterwards: exit {p.returncode}, hit {v.get('hit')}")

        run(ctl + ["evict", "--all"])
        preload("preload_warm")
        run(ctl + ["shutdown"])
        daemon.wait(timeout=30)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        dlog.close()

    if not a.skip_safetensors:
        code = ("import sys, time, json, torch\n"
                "from safetensors.torch import load_file\n"
                "torch.cuda.init(); torch.empty(1, device='cuda'); torch.cuda.synchronize()\n"
                "t = time.perf_counter(); keep = [load_file(f, device='cuda') for f in sys.argv[1:]]\n"
                "torch.cuda.synchronize(); print(json.dumps({'seconds': time.perf_counter() - t}))\n")
        for label in ("safetensors_cold", "safetensors_warm"):
            if label.endswith("cold"):
                drop_caches()
            p, _ = run([sys.executable, "-c", code] + files)
            s = last_json(p.stdout)["seconds"]
            res[label] = {"seconds": s, "gbps": total / s / 1e9}
            log(f"{label}: {s:.2f} s = {total / s / 1e9:.2f} GB/s")

    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())

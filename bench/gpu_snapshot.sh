#!/usr/bin/env bash
# Snapshot benchmark on the GPU machine (docs/snapshot.md, "GPU benchmark"): fastrestartd supervising
# fastrestart-tinyengine's CUDA forward on GPU 0, weights mode copy from a CUDA weight daemon,
# start = ["snapshot", "warm", "cold"]. Measures, one command:
#   1. the cold start (disk), then a warm restart (the daemon's cache, copied device to device);
#   2. `fastrestartctl snapshot create`: create time, artifact size, and the restore that follows it;
#   3. RESTORES x kill -9 of the engine: kill(2) to READY (bench/fastrestartd_run.py's kill clock; and the
#      restore's own exec to READY);
#   4. where CRIU cannot run (`criu check` fails, or a gVisor sandbox reports kernel 4.4.0), it says so
#      and still measures the driver's checkpoint API alone on the live engine (lock, checkpoint, restore,
#      unlock by pid through fastrestart-snapshot cuda ...), which needs no CRIU.
# Results: $OUT/snapshot-summary.txt, $OUT/snapshot-results.json, fastrestartd's log.
#
# usage (repository root, .bundle/ from scripts/gpu-bundle.sh carried):
#   bench/gpu_snapshot.sh [SIZE=8G] [RESTORES=3]
#   FR_BENCH_ENGINE=refengine bench/gpu_snapshot.sh tiny|8b [RESTORES]   the PyTorch reference engine
#   FR_BENCH_MODE=zero_copy ...   snapshots without the weights: the engine maps the daemon's pool, releases
#          it before the dump and re-maps it at the same address after the restore (docs/snapshot.md)
#   FR_BENCH_GRAPH=1 ...          tiny engine, CUDA: --cuda-graph-check (a CUDA graph captured over the
#          weights before the checkpoint must read the same after every restore)
set -uo pipefail
size=${1:-8G}
restores=${2:-3}
root=$(pwd)
bundle=$root/.bundle
[ -x "$bundle/bin/fastrestart-snapshot" ] || { echo "gpu_snapshot: no bundle at $bundle (scripts/gpu-bundle.sh)" >&2; exit 1; }
export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$bundle/bin:$PATH
OUT=${OUT:-/tmp/fr-gpu-out}
mkdir -p "$OUT"
summary=$OUT/snapshot-summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
w=/var/tmp/frsnap
rm -rf "$w"
mkdir -p "$w"
port=8300
# FR_BENCH_DEVICE=cpu: the same flow on the CPU forward with the host backend (a dry run without a GPU).
device=${FR_BENCH_DEVICE:-cuda:0}
# FR_BENCH_ENGINE=refengine: the PyTorch reference engine (python/refengine) instead of the tiny engine;
# SIZE is then a checkpoint shape of bench/gen_llama_checkpoint.py (tiny: 75 MB, 8b: 16.06 GB).
engine=${FR_BENCH_ENGINE:-tinyengine}
wmode=${FR_BENCH_MODE:-copy}
extra_flags=""
[ "${FR_BENCH_GRAPH:-0}" = 1 ] && [ "$engine" = tinyengine ] && [ "$device" != cpu ] && extra_flags=', "--cuda-graph-check"'
if [ "$device" = cpu ]; then gpus='[]'; backend=host; else gpus='["0"]'; backend=cuda; fi

say "== machine"
say "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1); device $device"
say "kernel $(uname -r); $(. /etc/os-release && echo "$PRETTY_NAME"); bundle $(head -1 "$bundle/MANIFEST" 2>/dev/null)"
gvisor=no
dmesg 2>/dev/null | grep -qi gvisor && gvisor=yes
[ "$(uname -r)" = "4.4.0" ] && gvisor=yes
say "gVisor: $gvisor"
criu_version=$(criu --version 2>&1 | head -1)
say "criu: $criu_version"
criu check >"$OUT/criu-check.log" 2>&1
criu_rc=$?
say "criu check: exit $criu_rc: $(grep -E 'Looks good|Error' "$OUT/criu-check.log" | head -3 | tr '\n' ' ')"

# Why snapshottable engines get their own mount namespace (supervisor/child.h): cuInit's result in a PID
# namespace with the host's /proc, then with a /proc of its own (0 = CUDA_SUCCESS, 304 = OPERATING_SYSTEM).
if [ "$device" != cpu ] && command -v unshare >/dev/null; then
  probe='import ctypes; print(ctypes.CDLL("libcuda.so.1").cuInit(0))'
  say "cuInit: plain $(python3 -c "$probe" 2>&1 | tail -1); PID namespace, host /proc $(unshare -p -f python3 -c "$probe" 2>&1 | tail -1); PID + mount namespace, own /proc $(unshare -p -f -m --mount-proc python3 -c "$probe" 2>&1 | tail -1)"
fi

say "== checkpoint"
t0=$(date +%s.%N)
if [ "$engine" = refengine ]; then
  python3 "$root/bench/gen_llama_checkpoint.py" "$w/model" --shape "$size" >/dev/null 2>&1 || { say "gen failed"; exit 1; }
  say "generated a Llama-shaped ($size) BF16 checkpoint in $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
  engine_command="\"$(command -v python3)\", \"$root/python/refengine/fastrestart_refengine.py\", \"serve\", \"$w/model\", \"--max-num-seqs\", \"1\", \"--enforce-eager\""
  export PYTHONPATH=$bundle/python${PYTHONPATH:+:$PYTHONPATH}  # the binding, for the engine
else
  fastrestart-tinyengine gen --out "$w/model" --size "$size" --dtype BF16 >/dev/null 2>&1 || { say "gen failed"; exit 1; }
  say "generated a $size BF16 tiny-engine checkpoint in $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
  engine_command="\"$(command -v fastrestart-tinyengine)\", \"serve\", \"$w/model\""
fi

cat >"$w/snap.toml" <<TOML
gpus = $gpus
[model]
name = "snap"
[engine]
command = [$engine_command]
flags = ["--host", "127.0.0.1", "--port", "$port", "--served-model-name", "snap", "--device", "$device",
         "--load-format", "fastrestart", "--fastrestart-mode", "$wmode", "--fastrestart-socket-dir", "$w/run"$extra_flags]
host = "127.0.0.1"
port = $port
stop_grace_s = 10
[weights]
mode = "$wmode"
backend = "$backend"
checkpoint = "$w/model"
socket_dir = "$w/run"
daemon_path = "$(command -v fastrestart-weightd)"
[readiness]
model = "snap"
startup_timeout_s = 600
poll_interval_s = 0.02
check_interval_s = 5
[restart]
start = ["snapshot", "warm", "cold"]
backoff_initial_s = 0.01
backoff_max_s = 0.05
crash_loop_limit = 100
[control]
socket = "$w/ctl/snap.ctl"
state_dir = "$w/state"
[http]
listen = "none"
[snapshot]
criu = "$(command -v criu)"
helper_path = "$(command -v fastrestart-snapshot)"
timeout_s = 240
TOML
ctl() { timeout 300 fastrestartctl --socket "$w/ctl/snap.ctl" "$@"; }
say "weights.mode $wmode${extra_flags:+, engine flags$extra_flags}"
sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
log=$OUT/fastrestartd-snapshot.log
python3 "$root/bench/fastrestartd_run.py" exec "$w/snap.toml" "$log" &  # the benches' one launcher
sup=$!
trap 'kill $sup 2>/dev/null; wait $sup 2>/dev/null' EXIT
readies() { grep -c 'READY: path' "$log"; }
wait_ready() { for _ in $(seq 12000); do [ "$(readies)" -ge "$1" ] && return 0; sleep 0.05; done; return 1; }
last() { ctl status --json | python3 -c "import json,sys; s=json.load(sys.stdin); print(json.dumps(s))"; }
results=$OUT/snapshot-results.json
echo '{}' >"$results"
record() {  # record KEY JSON
  python3 - "$results" "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); r[sys.argv[2]] = json.loads(sys.argv[3]); json.dump(r, open(sys.argv[1], "w"), indent=2)
PY
}

say "== cold and warm"
wait_ready 1 || { say "never ready"; tail -30 "$log" | tee -a "$summary"; exit 1; }
cold=$(last)
record cold "$(echo "$cold" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["last_start"]))')"
ctl restart >/dev/null
wait_ready 2 || { say "warm restart never ready"; exit 1; }
warm=$(last)
record warm "$(echo "$warm" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["last_start"]))')"
echo "$cold" "$warm" | python3 -c '
import json, sys
dec = json.JSONDecoder(); t = sys.stdin.read(); c, i = dec.raw_decode(t); w, _ = dec.raw_decode(t[i:].lstrip())
print("cold start: %.3f s (path %s); warm restart: %.3f s (path %s) to READY" % (c["last_start"]["time_to_ready_s"],
      c["last_start"]["path"], w["last_start"]["time_to_ready_s"], w["last_start"]["path"]))
print("snapshots:", "enabled" if w["snapshot"]["enabled"] else "UNAVAILABLE: " + w["snapshot"]["problem"])' | tee -a "$summary"

say "== snapshot create"
t0=$(date +%s.%N)
ctl snapshot create --json >"$OUT/snapshot-create.json" 2>&1
create_rc=$?
say "snapshot create: exit $create_rc in $(python3 -c "print(round($(date +%s.%N) - $t0, 2))") s wall"
python3 - "$OUT/snapshot-create.json" <<'PY' | tee -a "$summary"
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception:
    print("not JSON:", open(sys.argv[1]).read()[:500]); sys.exit(0)
if not r.get("ok"):
    print("FAILED:", r.get("error", {}).get("message", r)); sys.exit(0)
c, rs, st = r["created"], r["restore"], r["start"]
print(f"created {c['id']}: {c['create_s']:.2f} s, artifact {c['image_bytes']/1e9:.2f} GB")
print(f"restore after create: {st['time_to_ready_s']:.3f} s to READY; helper timings {json.dumps(rs.get('timings'))}")
PY
[ $create_rc -eq 0 ] && record create "$(cat "$OUT/snapshot-create.json")"

if [ $create_rc -eq 0 ]; then
  say "== $restores x kill -9, restored from the snapshot"
  n=$(readies)
  for i in $(seq "$restores"); do
    pid=$(ctl status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["engine"]["pid"])')
    # the kill clock: kill(2) at time.monotonic() T, then READY on fastrestartd's stamps of the same clock
    t_kill=$(python3 "$root/bench/fastrestartd_run.py" kill "$pid" | cut -d' ' -f1)
    n=$((n + 1))
    wait_ready "$n" || { say "restore $i never ready"; break; }
    s=$(last)
    clock=$(echo "$s" | python3 "$root/bench/fastrestartd_run.py" clock "$t_kill" "$pid")
    echo "$clock" | python3 -c '
import json, sys
c = json.load(sys.stdin)
print("restore: path %s, kill to READY %s s (kill to reap %s s, reap to READY %s s, restore exec to READY %s s)" % (
      c.get("path"), c.get("kill_to_ready_s"), c.get("kill_to_reap_s"), c.get("reap_to_ready_s"), c.get("exec_to_ready_s")))' | tee -a "$summary"
    record "restore_$i" "$(echo "$s" | python3 -c 'import json,sys; s=json.load(sys.stdin); c=json.loads(sys.argv[1]); print(json.dumps({"kill_clock": c, "last_start": s["last_start"], "snapshot": s["snapshot"]}))' "$clock")"
  done
  ctl snapshot inspect --json >"$OUT/snapshot-inspect.json" 2>&1
  python3 -c 'import json,sys; b=json.load(open(sys.argv[1]))["break_even"]; print("break-even:", json.dumps(b))' "$OUT/snapshot-inspect.json" | tee -a "$summary"
  python3 - "$OUT/snapshot-inspect.json" <<'PY' | tee -a "$summary"
import json, sys
m = json.load(open(sys.argv[1])).get("manifest", {})
w = m.get("weights")
if not w:
    print("weights: in the artifact (the engine took no part in the exchange)")
else:
    for e in w.get("entries", []):
        print(f"weights excluded: {w['excluded']}; entry {e['fingerprint']} digest {e['digest']} {e['bytes']/1e9:.2f} GB "
              f"at 0x{e['base']:x} on {e['device']} (release {m.get('timings', {}).get('release_s', 0):.3f} s)")
PY
  if [ -n "$extra_flags" ]; then
    grep -h "cuda graph check" "$log" | sed 's/^.*cuda graph check/cuda graph check/' | tail -4 | tee -a "$summary"
    grep -c "cuda graph check after resume.*matches" "$log" | sed 's/^/graph checks matched after resume: /' | tee -a "$summary"
  fi
  du -sb "$w/state/snapshots" | awk '{printf "artifact directory: %.2f GB\n", $1/1e9}' | tee -a "$summary"
else
  say "== the driver's checkpoint API alone (no CRIU), on the live engine"
  pid=$(ctl status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["engine"]["pid"])')
  for step in lock checkpoint restore unlock; do
    t0=$(date +%s.%N)
    out=$(fastrestart-snapshot cuda "$step" --pid "$pid" 2>&1 | tr '\n' ' ')
    say "cuda $step (pid $pid): $(python3 -c "print(round($(date +%s.%N) - $t0, 3))") s: $out"
  done
  nvidia-smi --query-gpu=memory.used --format=csv,noheader | head -1 | sed 's/^/GPU memory used after unlock: /' | tee -a "$summary"
  curl -s -m 30 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"The capital of France is","max_tokens":1,"model":"snap"}' | head -c 300 | sed 's/^/engine after the driver round trip: /' | tee -a "$summary"
  echo | tee -a "$summary"
fi
ctl status >"$OUT/snapshot-status.txt" 2>&1
say "== done (results: $results)"

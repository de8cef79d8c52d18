#!/usr/bin/env bash
# On the GPU machine (from scripts/gpu-run.sh, binaries on PATH): fastrestartd supervising
# fastrestart-tinyengine's CUDA forward with a CUDA weight daemon on GPU 0. Measures the cold start, then
# kill -9 of the engine N times: the time from the engine's death to READY and the engine's own load path.
# usage: bench/gpu_supervisor.sh OUTDIR [SIZE=4G] [KILLS=5]
set -uo pipefail
out=${1:?outdir}; size=${2:-4G}; kills=${3:-5}
w=/var/tmp/frgpu; rm -rf "$w"; mkdir -p "$w"
ck=$w/model
t0=$(date +%s.%N)
fastrestart-tinyengine gen --out "$ck" --size "$size" --dtype BF16 >/dev/null 2>&1 || { echo "gen failed"; exit 1; }
echo "generated a $size BF16 tiny-engine checkpoint in $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
port=8200
cat >"$w/gpu.toml" <<TOML
gpus = ["0"]
[model]
name = "gpu"
[engine]
kind = "generic"
command = ["$(command -v fastrestart-tinyengine)", "serve", "$ck"]
flags = ["--host", "127.0.0.1", "--port", "$port", "--served-model-name", "gpu", "--device", "cuda:0",
         "--load-format", "fastrestart", "--fastrestart-socket-dir", "$w/run"]
host = "127.0.0.1"
port = $port
stop_grace_s = 10
[weights]
mode = "zero_copy"
backend = "cuda"
checkpoint = "$ck"
socket_dir = "$w/run"
daemon_path = "$(command -v fastrestart-weightd)"
[readiness]
model = "gpu"
startup_timeout_s = 600
poll_interval_s = 0.02
check_interval_s = 5
[restart]
backoff_initial_s = 0.01
backoff_max_s = 0.05
crash_loop_limit = 100
[control]
socket = "$w/ctl/gpu.ctl"
state_dir = "$w/state"
[http]
listen = "none"
TOML
ctl() { fastrestartctl --socket "$w/ctl/gpu.ctl" "$@"; }
sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
python3 "$(dirname "$0")/fastrestartd_run.py" exec "$w/gpu.toml" "$out/fastrestartd-gpu.log" &  # the benches' one launcher
sup=$!
# 0 until the launcher has created its log (grep alone prints nothing then, and the test below errs).
ready() { local n; n=$(grep -c 'READY: path' "$out/fastrestartd-gpu.log" 2>/dev/null); echo "${n:-0}"; }
wait_ready() { for _ in $(seq 6000); do [ "$(ready)" -ge "$1" ] && return 0; sleep 0.05; done; return 1; }
wait_ready 1 || { echo "never ready"; tail -30 "$out/fastrestartd-gpu.log"; kill $sup; exit 1; }
ctl status --json >"$out/status-cold.json"
python3 - "$out/status-cold.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
ls = s["last_start"]; m = s["memory"][0] if s["memory"] else {}
print(f"cold start (disk, page cache dropped): path {ls['path']}, exec to READY {ls['time_to_ready_s']:.3f} s")
print(f"gpu: {m.get('name')} used {m.get('used_bytes',0)/1e9:.2f} GB of {m.get('total_bytes',0)/1e9:.1f}, "
      f"budget {m.get('budget_bytes',0)/1e9:.1f} GB, daemon holds {m.get('daemon_held_bytes',0)/1e9:.2f} GB")
PY
grep -o 'gpu-memory-utilization [0-9.]*' "$out/fastrestartd-gpu.log" | tail -1 | sed 's/^/engine started with --/'
for i in $(seq "$kills"); do
  pid=$(ctl status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["engine"]["pid"])')
  kill -9 "$pid"
  wait_ready $((i + 1)) || { echo "no READY after kill $i"; break; }
  ctl status --json | python3 -c '
import json, sys
s = json.load(sys.stdin); ls = s["last_start"]
print("kill -9 #%s: path %s, death to READY %.3f s (exec to READY %.3f s)" % (sys.argv[1], ls["path"], ls["since_previous_exit_s"], ls["time_to_ready_s"]))' "$i"
done
grep -E 'load path=' "$out/fastrestartd-gpu.log" | tail -1 | sed -E 's/^.*tinyengine\[[0-9]+\]: //' | cut -c1-300
ctl status | tail -4
kill -TERM $sup; wait $sup; echo "fastrestartd exit $?"

#!/usr/bin/env bash
# Issue 4's benchmark: what fastrestartd adds to a restart, measured over many restarts on the CPU.
#   - engine exit -> the new engine's exec (drain, policy, backoff 1 ms, spawn)
#   - engine ready (its readiness request answered) -> READY=1 sent
#   - fastrestartd's resident memory
#   - time to ready, cold vs warm, with a SIZE tiny-engine checkpoint (host-backend weight daemon)
# usage: bench/supervisor_overhead.sh [SIZE=2G] [KILLS=20]    (on ./build; prints a summary)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
size=${1:-2G}; kills=${2:-20}
export PATH="$root/build/src/supervisor:$root/build/src/daemon:$root/build/src/tinyengine:$PATH"
w=$(mktemp -d /tmp/fr-bench-XXXXXX); mkdir -m 0700 "$w/run" "$w/ctl"
trap 'kill -TERM $sup 2>/dev/null; wait 2>/dev/null; rm -rf "$w"' EXIT
fastrestart-tinyengine gen --out "$w/model" --size "$size" >/dev/null 2>&1
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$w/b.toml" <<TOML
gpus = []
[model]
name = "bench"
[engine]
command = ["fastrestart-tinyengine", "serve", "$w/model"]
flags = ["--host", "127.0.0.1", "--port", "$port", "--served-model-name", "bench", "--load-format", "fastrestart",
         "--fastrestart-socket-dir", "$w/run"]
port = $port
[weights]
backend = "host"
checkpoint = "$w/model"
socket_dir = "$w/run"
[readiness]
model = "bench"
poll_interval_s = 0.005
check_interval_s = 10
[restart]
backoff_initial_s = 0.001
backoff_max_s = 0.001
crash_loop_limit = 1000
[control]
socket = "$w/ctl/b.ctl"
state_dir = "$w/state"
[http]
listen = "none"
TOML
sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
python3 bench/fastrestartd_run.py exec "$w/b.toml" "$w/log" --log-level debug &  # the benches' one launcher
sup=$!
n_ready() { grep -c 'READY: path' "$w/log" || true; }
wait_ready() { for _ in $(seq 3000); do [ "$(n_ready)" -ge "$1" ] && return 0; sleep 0.01; done; echo "timeout"; tail "$w/log"; exit 1; }
wait_ready 1
for i in $(seq "$kills"); do
  pid=$(grep -oE 'READY: path \w+ in [0-9.]+ s \(engine pid [0-9]+' "$w/log" | tail -1 | grep -oE '[0-9]+$')
  kill -9 "$pid"
  wait_ready $((i + 1))
done
rss=$(awk '/VmRSS/ {print $2}' /proc/$sup/status)
hwm=$(awk '/VmHWM/ {print $2}' /proc/$sup/status)
kill -TERM $sup; wait $sup || true
python3 - "$w/log" "$rss" "$hwm" "$size" <<'PY'
import re, sys, statistics
from datetime import datetime
log, rss, hwm, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ts = lambda l: datetime.strptime(l[1:24], "%Y-%m-%d %H:%M:%S.%f").timestamp()
exit_to_exec, ready_to_notify, paths = [], [], []
last_exit = last_pass = None
for l in open(log):
    if not l.startswith("["): continue
    if "exited: crash" in l: last_exit = ts(l)
    elif "] engine: " in l and last_exit is not None:
        exit_to_exec.append(ts(l) - last_exit); last_exit = None
    elif "readiness passed" in l: last_pass = ts(l)
    elif "READY: path" in l:
        m = re.search(r"READY: path (\w+) in ([0-9.]+) s", l)
        paths.append((m.group(1), float(m.group(2))))
        if last_pass is not None: ready_to_notify.append(ts(l) - last_pass)
ms = lambda v: f"median {statistics.median(v)*1e3:.1f} ms, max {max(v)*1e3:.1f} ms (n={len(v)})"
print(f"engine exit -> new engine exec: {ms(exit_to_exec)} (includes the 1 ms backoff)")
print(f"readiness passed -> READY=1:   {ms(ready_to_notify)} (includes asking the daemon whether the engine attached)")
print(f"fastrestartd resident memory:  {rss/1024:.1f} MiB now, {hwm/1024:.1f} MiB peak")
cold = [t for p, t in paths if p == "cold"]; warm = [t for p, t in paths if p == "warm"]
print(f"time to ready with a {size} checkpoint: cold {cold[0]:.2f} s (page cache dropped); warm median {statistics.median(warm):.3f} s (n={len(warm)})")
PY

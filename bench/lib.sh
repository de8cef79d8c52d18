# shellcheck shell=bash
# Sourced by the GPU benchmarks that run fastrestartd from the bundle (bench/gpu_standby.sh, bench/gpu_tp.sh),
# from the repository root with .bundle/ from scripts/gpu-bundle.sh carried.

# bench_setup NAME SUMMARY: the bundle's binaries, libraries and Python binding on the paths (exit 1, naming
# NAME, without a bundle); $OUT (default /tmp/fr-gpu-out) created, $summary = $OUT/SUMMARY emptied, the clock
# of elapsed started. Sets root, bundle, summary, t_start.
bench_setup() {
  root=$(pwd)
  bundle=$root/.bundle
  [ -x "$bundle/bin/fastrestartd" ] || { echo "$1: no bundle at $bundle (scripts/gpu-bundle.sh)" >&2; exit 1; }
  export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PATH=$bundle/bin:$PATH
  export PYTHONPATH=$bundle/python${PYTHONPATH:+:$PYTHONPATH}  # the binding: attach, publish, the standby gate
  OUT=${OUT:-/tmp/fr-gpu-out}
  mkdir -p "$OUT"
  summary=$OUT/$2
  : >"$summary"
  t_start=$(date +%s)
}

# say TEXT...: to stdout and the summary
say() { echo "$*" | tee -a "$summary"; }

# elapsed: seconds since bench_setup
elapsed() { echo $(($(date +%s) - t_start)); }

# bench_machine RUNS BUDGET: the GPU, torch and transformers, the bundle's commit, the runs and the time budget
bench_machine() {
  say "== machine"
  say "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
  say "$(timeout 60 python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1 | tail -1)"
  say "bundle $(head -1 "$bundle/MANIFEST" 2>/dev/null); runs: $1; budget $2 s"
}

# fastrestartd_toml NAME PORT DIR GPUS BACKEND CHECKPOINT COMMAND FLAGS START [KEY] [READINESS] [SECTIONS]:
# the config of one run on stdout: engine NAME (also the served model name) on 127.0.0.1:PORT, started as
# [COMMAND] with [FLAGS, --host, --port, --served-model-name]; weights.mode zero_copy from CHECKPOINT on
# BACKEND, sockets and state under DIR; restart.start = START. KEY: a [weights.key] section, READINESS: more
# [readiness] lines, SECTIONS: more sections after [restart] (each left out where empty).
fastrestartd_toml() {
  local name=$1 port=$2 d=$3 gpus=$4 backend=$5 ck=$6 command=$7 flags=$8 start=$9 key=${10:-} \
    readiness=${11:-} sections=${12:-}
  # FR_BENCH_LISTEN: engine.listen when set ("supervisor": fastrestartd holds the port)
  local listen_line=""
  [ -n "${FR_BENCH_LISTEN:-}" ] && listen_line="listen = \"$FR_BENCH_LISTEN\""
  # sed: a part left out (KEY, READINESS or SECTIONS empty) leaves no empty line
  sed '/^$/d' <<TOML
gpus = $gpus
[model]
name = "$name"
[engine]
kind = "generic"
command = [$command]
flags = [$flags, "--host", "127.0.0.1", "--port", "$port", "--served-model-name", "$name"]
host = "127.0.0.1"
port = $port
stop_grace_s = 20
$listen_line
[weights]
mode = "zero_copy"
backend = "$backend"
checkpoint = "$ck"
socket_dir = "$d/run"
daemon_path = "$(command -v fastrestart-weightd)"
$key
[readiness]
model = "$name"
startup_timeout_s = 300
poll_interval_s = 0.01
check_interval_s = 30
$readiness
[restart]
start = $start
backoff_initial_s = 0.01
backoff_max_s = 0.05
crash_loop_limit = 1000
$sections
[control]
socket = "$d/ctl/s.ctl"
state_dir = "$d/state"
[http]
listen = "none"
TOML
}

# fastrestartd_start DIR: fastrestartd on DIR/fastrestart.toml in the background, its output in
# DIR/fastrestartd.log, started by the benches' one launcher (bench/fastrestartd_run.py exec). Sets log (that
# path) and sup (its pid).
fastrestartd_start() {
  log=$1/fastrestartd.log
  # Made here, not only by the launcher: a reader started right after (standby_cycles.py --log) would
  # otherwise race its Python start (seen on a fresh GPU machine: FileNotFoundError).
  : >"$log"
  python3 "$root/bench/fastrestartd_run.py" exec "$1/fastrestart.toml" "$log" &
  sup=$!
}

# fastrestartd_stop SECONDS: SIGTERM to $sup; fails when it has not exited within SECONDS (the caller then
# kills it; its exit status is the caller's to wait for).
fastrestartd_stop() {
  kill -TERM "$sup" 2>/dev/null
  timeout "$1" tail --pid="$sup" -f /dev/null
}

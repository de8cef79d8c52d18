#!/usr/bin/env bash
# The demo itself, on programs already built (scripts/demo.sh installs and builds them into ./build-demo;
# FR_BUILD_DIR=build runs the test tree's). No GPU needed: fastrestartd supervises fastrestart-tinyengine
# with a weight daemon on the host backend (config/demo.toml) and a pre_gpu standby, and shows each start
# path on the same engine: cold, a standby taking over after kill -9, warm (attach) after a flag push.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin="${FR_BUILD_DIR:-build-demo}"
case "$bin" in /*) ;; *) bin="$root/$bin" ;; esac
[ -x "$bin/src/supervisor/fastrestartd" ] || { echo "no $bin/src/supervisor/fastrestartd: run scripts/demo.sh first"; exit 1; }
export PATH="$bin/src/supervisor:$bin/src/daemon:$bin/src/tinyengine:$PATH"
size="${DEMO_SIZE:-512M}"
floor="${DEMO_FLOOR_S:-2}"   # seconds of startup before the GPU, as an engine's imports
# Per user: the paths and ports of config/demo.toml moved to this user's own (two users on one host, or a
# demo beside a real instance, do not collide).
uid=$(id -u)
work=/tmp/fastrestart-demo-$uid
engine_port=$((8100 + uid % 1000)) http_port=$((9401 + uid % 1000))
cfg=$work/demo.toml
log=$work/fastrestartd.log
ctl() { fastrestartctl --config "$cfg" "$@"; }
cleanup() { [ -n "${sup:-}" ] && kill -TERM "$sup" 2>/dev/null && wait "$sup" 2>/dev/null; true; }
trap cleanup EXIT
fail() { echo "demo failed: $*"; echo "last lines of $log:"; tail -20 "$log" 2>/dev/null | sed 's/^/  /'; exit 1; }
# One field of `fastrestartctl status --json`, by a Python expression over `s`.
st() { ctl status --json 2>/dev/null | python3 -c "import json,sys; s=json.load(sys.stdin); print($1)" 2>/dev/null; }
wait_ready() {  # $1: how many READY lines the log must hold
  for _ in $(seq 1200); do
    [ "$(grep -c 'READY: path' "$log" || true)" -ge "$1" ] && return 0
    kill -0 "$sup" 2>/dev/null || fail "fastrestartd exited"
    sleep 0.1
  done
  fail "not ready after 120 s"
}
wait_parked() {
  for _ in $(seq 1200); do
    [ "$(st "(s.get('standby') or {}).get('state','')")" = parked ] && return 0
    sleep 0.1
  done
  fail "the standby did not park within 120 s"
}
complete() {  # the token ids of a greedy completion of a fixed prompt
  curl -sf "localhost:$engine_port/v1/completions" -H 'content-type: application/json' \
    -d '{"model":"demo","prompt":"The capital of France is","max_tokens":8,"temperature":0}' |
    python3 -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["choices"][0]["token_ids"])))'
}
row() { printf '  %-10s %-9s %8s   %s\n' "$@"; }
secs() { python3 -c "import sys; print(f'{float(sys.argv[1]):.2f} s')" "$1"; }
# now: this machine's CLOCK_MONOTONIC, the clock of fastrestartd's status stamps (last_start.ready_at_s), so a
# restart is timed from the kill(2) or the reload request (docs/supervisor.md)
now() { python3 -c 'import time; print(time.monotonic())'; }

rm -rf "$work"
mkdir -m 0700 "$work" || { echo "cannot create $work (another user's?)"; exit 1; }
# The demo's config with a pre_gpu standby (the tiny engine parks before its weights; docs/standby.md).
sed -e "s|/tmp/fastrestart-demo|$work|g" -e "s/8100/$engine_port/g" -e "s/9401/$http_port/g" \
  -e 's/^crash_loop_window_s = .*/&\nstart = ["standby", "warm", "cold"]/' \
  "$root/config/demo.toml" >"$cfg"
# The tiny engine starts in milliseconds; a real one spends seconds to minutes in imports and setup before
# it touches the GPU (vLLM: about 14 s of imports). --fault-startup-delay stands for that floor, so the demo
# shows what each start path saves: warm skips the disk, a standby skips the floor too.
sed -i "s|\"--served-model-name\", \"demo\",|&\n  \"--fault-startup-delay\", \"$floor\",|" "$cfg"
printf '\n[standby]\nlevel = "pre_gpu"\n' >>"$cfg"
fastrestart-tinyengine gen --out "$work/model" --size "$size" >/dev/null 2>&1 || fail "checkpoint generation"
fastrestartd --check --config "$cfg" >/dev/null || { fastrestartd --check --config "$cfg"; exit 1; }

echo "fastrestart demo: fastrestartd supervising fastrestart-tinyengine ($size checkpoint, host weight daemon, no GPU)"
echo "the engine spends ${floor} s in startup before it loads (standing for imports: DEMO_FLOOR_S); a pre_gpu standby spends it in advance"
row step path time "what happened (time: engine start to READY; then from the kill(2) or the push's request to READY)"
fastrestartd --config "$cfg" >"$log" 2>&1 &
sup=$!
wait_ready 1
[ "$(st "s['last_start']['path']")" = cold ] || fail "the first start was not cold"
row start cold "$(secs "$(st "s['last_start']['time_to_ready_s']")")" "read $size from disk, published it to the weight daemon; READY"
cold=$(complete) || fail "no completion"

wait_parked
pid=$(st "s['engine']['pid']")
t=$(now)
kill -9 "$pid"
wait_ready 2
[ "$(st "s['last_start']['path']")" = standby ] || fail "the restart after kill -9 did not take the standby"
row "kill -9" standby "$(secs "$(st "s['last_start']['ready_at_s'] - $t")")" \
  "the parked standby was released: no startup floor, then it attached"
standby=$(complete) || fail "no completion from the standby"

t=$(now)
out=$(ctl reload --add-flags "--threads 4" 2>&1) || fail "the flag push failed: $out"
[ "$(st "s['last_start']['path']")" = warm ] || fail "the flag push did not start warm"
row "push" warm "$(secs "$(st "s['last_start']['ready_at_s'] - $t")")" \
  "reload --add-flags '--threads 4': new flags, so a new engine (not the standby) attached"
warm=$(complete) || fail "no completion after the push"

rc=0; ctl reload --add-flags "--max-model-len 100000" >/dev/null 2>&1 || rc=$?
[ "$rc" = 3 ] || fail "the bad push was not rolled back (exit code $rc)"
row "bad push" rollback "" "--max-model-len 100000 never became ready: rolled back, exit code 3"

[ "$cold" = "$standby" ] && [ "$cold" = "$warm" ] || fail "answers differ: cold [$cold] standby [$standby] warm [$warm]"
row answers equal "" "token ids of every start, greedy: $cold"
echo "fastrestartctl status:"
ctl status | grep -E '^(state|engine|flags|restarts|last start|standby|daemon)' | cut -c1-110 | sed 's/^/  /'

kill -TERM "$sup"; rc=0; wait "$sup" || rc=$?; sup=
order=$(grep -E 'stopping|weight daemon pid .* stopped|exiting with' "$log" | sed -E 's/^.*\] //' | tr '\n' ' ' | cut -c1-70)
row stop "exit $rc" "" "SIGTERM: the engine's group first, then the weight daemon"
echo "full log: $log   rerun: scripts/demo-run.sh"
[ "$rc" = 0 ] || fail "fastrestartd exited $rc ($order)"

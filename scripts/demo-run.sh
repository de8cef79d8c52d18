#!/usr/bin/env bash
# The demo itself, on an existing ./build (scripts/demo.sh installs and builds first). No GPU needed:
# fastrestartd supervises fastrestart-tinyengine with a weight daemon on the host backend (config/demo.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export PATH="$root/build/src/supervisor:$root/build/src/daemon:$root/build/src/tinyengine:$root/build/src/tools:$PATH"
size="${DEMO_SIZE:-512M}"
# Per user: the paths and ports of config/demo.toml moved to this user's own (two users on one host, or a
# demo beside a real instance, do not collide).
uid=$(id -u)
work=/tmp/fastrestart-demo-$uid
engine_port=$((8100 + uid % 1000)) http_port=$((9401 + uid % 1000))
cfg=$work/demo.toml
ctl() { fastrestartctl --config "$cfg" "$@"; }
cleanup() { [ -n "${sup:-}" ] && kill -TERM "$sup" 2>/dev/null && wait "$sup" 2>/dev/null; true; }
trap cleanup EXIT
wait_ready() {  # $1: how many READY lines to wait for
  for _ in $(seq 600); do
    [ "$(grep -c 'READY: path' "$work/fastrestartd.log" || true)" -ge "$1" ] && return 0
    sleep 0.1
  done
  echo "not ready; log:"; tail -30 "$work/fastrestartd.log"; exit 1
}

rm -rf "$work"
mkdir -m 0700 "$work" || { echo "cannot create $work (another user's?)"; exit 1; }
sed -e "s|/tmp/fastrestart-demo|$work|g" -e "s/8100/$engine_port/g" -e "s/9401/$http_port/g" \
  "$root/config/demo.toml" >"$cfg"
echo "== 1. a $size tiny-engine checkpoint (deterministic)"
fastrestart-tinyengine gen --out "$work/model" --size "$size" 2>&1 | grep -v '^$' | tail -1 | sed 's/^/   /'

echo "== 2. fastrestartd --config $cfg (config/demo.toml for this user; engine: fastrestart-tinyengine; weights: host-backend daemon)"
fastrestartd --check --config "$cfg" | sed 's/^/   /'
fastrestartd --config "$cfg" >"$work/fastrestartd.log" 2>&1 &
sup=$!
wait_ready 1
grep -E 'READY: path|load path=' "$work/fastrestartd.log" | sed -E 's/^.*\] //; s/^/   /' | cut -c1-160
echo "   a completion: $(curl -s "localhost:$engine_port/v1/completions" -H 'content-type: application/json' \
  -d '{"model":"demo","prompt":"Hello, ","max_tokens":8}' | python3 -c 'import json,sys; print(repr(json.load(sys.stdin)["choices"][0]["text"]))')"

echo "== 3. kill -9 the engine: fastrestartd restarts it, and it attaches to the daemon's weights"
kill -9 "$(ctl status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["engine"]["pid"])')"
wait_ready 2
grep -E 'exited: crash|READY: path|load path=' "$work/fastrestartd.log" | tail -3 | sed -E 's/^.*\] //; s/^/   /' | cut -c1-160

echo "== 4. fastrestartctl reload --add-flags '--threads 4' (engine only, warm cache)"
ctl reload --add-flags "--threads 4" | sed 's/^/   /'
echo "== 5. a push that never becomes ready is rolled back (exit code 3)"
ctl reload --add-flags "--max-model-len 100000" | sed 's/^/   /' || echo "   fastrestartctl exit code $?"

echo "== 6. fastrestartctl status"
ctl status | sed 's/^/   /'

echo "== 7. SIGTERM: the engine's group first, then the weight daemon"
kill -TERM "$sup"; wait "$sup" && echo "   fastrestartd exit code 0"; sup=
grep -E 'stopping|exited as requested|weight daemon pid .* stopped|exiting with' "$work/fastrestartd.log" | tail -5 | sed -E 's/^.*\] //; s/^/   /'
echo "full log: $work/fastrestartd.log"

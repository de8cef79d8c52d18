#!/bin/bash
# fastrestartd as PID 1 of its own PID namespace, as it is in a container (no container runtime needed):
#   1. a SIGTERM that arrives before its handlers are installed is not lost: the process that starts it blocks
#      SIGTERM, sends it to itself and execs fastrestartd, so the signal is pending across exec (a PID 1
#      without a handler would have it discarded by the kernel; an inherited block would hide it forever).
#      fastrestartd must stop cleanly, exit 0.
#   2. an orphan that is not its descendant (a process entered into its namespace with nsenter, as
#      `podman exec` and `kubectl exec` do, whose parent exits) is reparented to it and reaped.
#   3. SIGTERM from outside the namespace (what `podman stop` and the kubelet send) stops the engine and
#      exits 0.
# Usage: pid1-test.sh FASTRESTARTD. Exit 77 = skipped (not root: unshare --pid needs it).
set -euo pipefail
frd=$1
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root (unshare --pid)"; exit 77; }
for t in unshare nsenter python3; do command -v "$t" >/dev/null || { echo "SKIP: $t is not installed"; exit 77; }; done
work=$(mktemp -d /tmp/fr-pid1-test.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
chmod 700 "$work"
fail() { echo "FAIL: $*"; echo "--- fastrestartd's log:"; cat "$work"/*.log 2>/dev/null || true; exit 1; }
# wait_for SECONDS COMMAND...: until COMMAND succeeds (a visible sign), or fail.
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do ((SECONDS < deadline)) || return 1; sleep 0.1; done
}

# An engine that never becomes ready is enough: only the supervisor's own signal handling is under test.
cat >"$work/pid1.toml" <<EOF
gpus = []
[model]
name = "pid1"
[engine]
command = ["/bin/sleep", "1000"]
port = 1
stop_grace_s = 5
[weights]
mode = "off"
[control]
socket = "$work/run/pid1.ctl"
state_dir = "$work/state"
[http]
listen = "none"
EOF
mkdir -m 700 "$work/run"

echo "== 1. SIGTERM pending before the handlers exist"
rc=0
timeout -s KILL 30 unshare --pid --fork --kill-child python3 -c '
import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
os.kill(os.getpid(), signal.SIGTERM)          # PID 1 of the new namespace: pending, because blocked
os.execv(sys.argv[1], sys.argv[1:])' "$frd" --config "$work/pid1.toml" >"$work/early.log" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || fail "fastrestartd (PID 1) with a SIGTERM pending from before its handlers: exit $rc (137: killed after 30 s, it never saw the signal), want 0"
grep -q "stopping: engine first" "$work/early.log" || fail "no 'stopping: engine first' line after the early SIGTERM"
echo "ok: exited 0 after the early SIGTERM"
rm -f "$work/early.log"

echo "== 2. orphans reaped as PID 1"
unshare --pid --fork --kill-child "$frd" --config "$work/pid1.toml" >"$work/pid1.log" 2>&1 &
outer=$!
pids+=("$outer")
# fastrestartd is unshare's only child (PID 1 inside); its engine is its child.
p1() { pgrep -P "$outer" -x fastrestartd; }
wait_for 20 p1 >/dev/null || fail "fastrestartd did not start"
pid1=$(p1)
wait_for 20 pgrep -P "$pid1" -x sleep >/dev/null || fail "fastrestartd did not start its engine"
# A process entered from outside, whose parent (sh) exits at once: its orphan goes to the namespace's PID 1.
nsenter --target "$pid1" --pid sh -c 'tail -f /dev/null >/dev/null 2>&1 </dev/null & exit 0'
orphan() { pgrep -P "$pid1" -x tail; }
wait_for 20 orphan >/dev/null || fail "the orphan was not reparented to fastrestartd (PID 1)"
opid=$(orphan)
kill -KILL "$opid"
gone() { [[ ! -e /proc/$opid ]]; }
wait_for 20 gone || fail "orphan $opid was not reaped: state $(awk '{print $3}' /proc/$opid/stat 2>/dev/null) (Z = zombie)"
echo "ok: orphan $opid reparented to PID 1 and reaped"

echo "== 3. SIGTERM from outside the namespace"
kill -TERM "$pid1"
rc=0
timeout 30 tail --pid="$outer" -f /dev/null || fail "fastrestartd did not exit within 30 s of SIGTERM"
wait "$outer" || rc=$?
[[ $rc -eq 0 ]] || fail "exit code $rc after SIGTERM, want 0"
grep -q "stopping the engine's process group" "$work/pid1.log" || fail "the engine was not stopped"
grep -q "fastrestartd exiting with code 0" "$work/pid1.log" || fail "no 'exiting with code 0' line"
echo "pid1-test: all checks passed"

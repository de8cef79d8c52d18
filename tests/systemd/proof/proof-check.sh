#!/bin/bash
# Runs inside the harness namespace (tests/systemd/run-in-systemd.sh --check). FR_UNIT is the started unit.
set -u
fail=0
ok()   { echo "ok   - $*"; }
bad()  { echo "FAIL - $*"; fail=1; }
prop() { systemctl show -p "$1" --value "$FR_UNIT"; }
expect() { # expect NAME ACTUAL WANTED
  if [[ "$2" == "$3" ]]; then ok "$1 = '$2'"; else bad "$1 = '$2', wanted '$3'"; fi
}
wait_for() { # wait_for DESCRIPTION COMMAND...  (polls for 10 s)
  local d=$1; shift
  for _ in $(seq 1 200); do "$@" && return 0; sleep 0.05; done
  bad "timed out waiting for $d"; return 1
}
# The proof daemon writes "reloaded" and the reload command "reload-command-done" concurrently, once the
# reload counter moved: either order is correct, so compare them in one canonical order.
events() { awk '{print $1}' /run/fr-proof/events | tr '\n' ' ' | sed 's/ $//; s/reload-command-done reloaded/reloaded reload-command-done/'; }

expect "pid 1" "$(ps -o comm= -p 1)" systemd
expect "is-active" "$(systemctl is-active "$FR_UNIT")" active
expect "SubState" "$(prop SubState)" running
expect "Type" "$(prop Type)" notify
expect "NotifyAccess" "$(prop NotifyAccess)" all
expect "StatusText" "$(prop StatusText)" "proof ready"
main=$(prop MainPID)
expect "MainPID is the daemon" "$(awk 'NR==1{print $2}' /run/fr-proof/events)" "$main"

# reload: synchronous ExecReload, the daemon's RELOADING=1 / READY=1 and its new status
systemctl reload "$FR_UNIT" && ok "systemctl reload returned 0" || bad "systemctl reload failed"
expect "events after reload" "$(events)" "start ready reload-command reloading reloaded reload-command-done"
expect "StatusText after reload" "$(prop StatusText)" "proof ready, reloaded 1"
expect "is-active after reload" "$(systemctl is-active "$FR_UNIT")" active
expect "MainPID unchanged by reload" "$(prop MainPID)" "$main"

# stop: SIGTERM to the main process (KillMode=mixed), it says STOPPING=1 and exits 0
systemctl stop "$FR_UNIT" && ok "systemctl stop returned 0" || bad "systemctl stop failed"
expect "is-active after stop" "$(systemctl is-active "$FR_UNIT")" inactive
expect "Result" "$(prop Result)" success
expect "ExecMainStatus" "$(prop ExecMainStatus)" 0
expect "events after stop" "$(events)" "start ready reload-command reloading reloaded reload-command-done sigterm exit"
kill -0 "$main" 2>/dev/null && bad "main pid $main still alive" || ok "main pid $main gone"
exit $fail

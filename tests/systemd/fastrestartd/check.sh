#!/bin/bash
# Runs inside the harness namespace; FR_UNIT = fastrestart@demo.service (see ../fastrestartd-unit-test.sh).
set -u
fail=0
ok()   { echo "ok   - $*"; }
bad()  { echo "FAIL - $*"; fail=1; }
prop() { systemctl show -p "$1" --value "$FR_UNIT"; }
expect() { if [[ "$2" == "$3" ]]; then ok "$1 = '$2'"; else bad "$1 = '$2', wanted '$3'"; fi; }
expect_match() { if [[ "$2" =~ $3 ]]; then ok "$1 = '$2'"; else bad "$1 = '$2', wanted /$3/"; fi; }
journal() { journalctl --no-pager -o cat -u "$FR_UNIT"; }
line_of() { # line_of REGEX [AFTER]: the first journal line matching REGEX after line AFTER
  journal | awk -v re="$1" -v after="${2:-0}" 'NR > after && $0 ~ re { print NR; exit }'; }
ctl() { fastrestartctl --socket /run/fastrestart/demo.ctl "$@"; }

expect "is-active" "$(systemctl is-active "$FR_UNIT")" active
expect "Type" "$(prop Type)" notify
expect "NotifyAccess" "$(prop NotifyAccess)" main
expect "KillMode" "$(prop KillMode)" mixed
expect "OOMPolicy" "$(prop OOMPolicy)" continue
expect "LimitMEMLOCK" "$(prop LimitMEMLOCK)" infinity
# the unit says MemoryAccounting=yes; the harness turns it off for every service (docs/systemd.md)
expect "MemoryAccounting (harness override)" "$(prop MemoryAccounting)" no
status=$(prop StatusText)
expect_match "StatusText" "$status" '^Ready \((cold|warm|attach)[^)]*\) in .*engine pid [0-9]+'
main=$(prop MainPID)
expect "MainPID is fastrestartd" "$(readlink /proc/"$main"/exe)" /usr/bin/fastrestartd
expect "/run/fastrestart mode" "$(stat -c %a /run/fastrestart)" 700
[[ -S /run/fastrestart/demo.ctl ]] && ok "control socket /run/fastrestart/demo.ctl" || bad "no control socket /run/fastrestart/demo.ctl"
ctl status >/dev/null && ok "fastrestartctl status" || bad "fastrestartctl status failed"
env_of_engine=$(cat /proc/"$(echo "$status" | sed -E 's/.*engine pid ([0-9]+).*/\1/')"/environ 2>/dev/null | tr '\0' '\n')
if grep -qE '^(NOTIFY_SOCKET|WATCHDOG_|LISTEN_)' <<<"$env_of_engine"; then bad "the engine got NOTIFY_SOCKET/WATCHDOG_*/LISTEN_*"; else ok "the engine has no NOTIFY_SOCKET/WATCHDOG_*/LISTEN_*"; fi

# systemctl reload = ExecReload=fastrestartctl --socket /run/fastrestart/demo.ctl reload --wait
t0=$(date +%s.%N)
if systemctl reload "$FR_UNIT"; then ok "systemctl reload returned 0 ($(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}') s)"; else bad "systemctl reload failed"; fi
expect "is-active after reload" "$(systemctl is-active "$FR_UNIT")" active
expect_match "StatusText after reload" "$(prop StatusText)" '^Ready '
expect "MainPID unchanged by reload" "$(prop MainPID)" "$main"
journal | grep -E 'fastrestartctl|reload' | tail -n 5 | sed 's/^/     | /'

# systemctl stop: SIGTERM to fastrestartd only (KillMode=mixed); engine first, then the daemons, exit 0
systemctl stop "$FR_UNIT" && ok "systemctl stop returned 0" || bad "systemctl stop failed"
expect "is-active after stop" "$(systemctl is-active "$FR_UNIT")" inactive
expect "Result" "$(prop Result)" success
expect "ExecMainStatus" "$(prop ExecMainStatus)" 0
a=$(line_of "stopping: engine first"); b=$(line_of "exited as requested" "$a"); c=$(line_of "weight daemon pid [0-9]+ stopped" "$a")
d=$(line_of "fastrestartd exiting with code 0" "$a")
if [[ -n "$a" && -n "$b" && -n "$c" && -n "$d" ]] && (( a < b && b < c && c < d )); then
  ok "stop order: stopping ($a) < engine exited ($b) < daemon stopped ($c) < fastrestartd exit 0 ($d)"
else
  bad "stop order: stopping='$a' engine-exited='$b' daemon-stopped='$c' exit='$d'"
fi
if journal | grep -q "Killing process"; then bad "systemd had to SIGKILL leftovers: $(journal | grep 'Killing process' | head -n 3)"; else ok "nothing left for systemd to kill"; fi
[[ $fail -eq 0 ]] || { echo "--- journal of $FR_UNIT (last 60 lines)"; journal | tail -n 60; }
exit $fail

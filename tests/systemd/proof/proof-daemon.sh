#!/bin/bash
# Main process of fr-notify-proof.service. Events go to /run/fr-proof/events (one line each).
set -u
dir=/run/fr-proof
ev() { echo "$1 $(date +%s%N)" >> "$dir/events"; }
notify() { systemd-notify --pid=$$ "$@"; }
reloads=0
child=""
on_hup() {
  reloads=$((reloads + 1))
  ev "reloading $reloads"
  notify RELOADING=1 --status="reloading ($reloads)"
  sleep 0.2                      # the "work" of a reload
  notify --ready --status="proof ready, reloaded $reloads"
  echo "$reloads" > "$dir/reloads"
  ev "reloaded $reloads"
}
on_term() {
  ev "sigterm"
  notify STOPPING=1 --status="stopping"
  [[ -z "$child" ]] || kill "$child" 2>/dev/null
  ev "exit"
  exit 0
}
trap on_hup HUP
trap on_term TERM
ev "start $$"
echo 0 > "$dir/reloads"
notify --status="starting"
sleep 0.2
notify --ready --status="proof ready"
ev "ready"
while true; do
  sleep infinity & child=$!
  wait "$child"
done

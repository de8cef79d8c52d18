#!/bin/bash
# ExecReload of fr-notify-proof.service: ask the daemon to reload and wait until it says it is done,
# the way `fastrestartctl reload --wait` does.
set -eu
dir=/run/fr-proof
before=$(cat "$dir/reloads")
echo "reload-command $(date +%s%N)" >> "$dir/events"
kill -HUP "$1"
for _ in $(seq 1 100); do
  [[ "$(cat "$dir/reloads")" -gt "$before" ]] && { echo "reload-command-done $(date +%s%N)" >> "$dir/events"; exit 0; }
  sleep 0.05
done
echo "reload did not complete" >&2
exit 1

#!/bin/sh
# The soak's engine command: runs the engine ("$@") with the fault flags the soak queued in
# $FR_SOAK_FAULTS for this one start (the file is emptied), so each start can fail differently.
f="${FR_SOAK_FAULTS:-}"
faults=""
if [ -n "$f" ] && [ -s "$f" ]; then
  faults=$(cat "$f")
  : >"$f"
fi
# shellcheck disable=SC2086  # the fault flags are words
exec "$@" $faults

#!/bin/sh
# The soak's engine command: runs the engine ("$@") with the fault flags the soak queued for this one
# start (the file is emptied), so each start can fail differently. A process started as a standby
# (FASTRESTART_STANDBY_FD set, docs/standby.md) takes its flags from $FR_SOAK_STANDBY_FAULTS, any other
# start from $FR_SOAK_FAULTS: a standby spawned behind the engine never takes the faults queued for the
# engine's next start, nor the reverse.
if [ -n "${FASTRESTART_STANDBY_FD:-}" ]; then
  f="${FR_SOAK_STANDBY_FAULTS:-}"
else
  f="${FR_SOAK_FAULTS:-}"
fi
faults=""
if [ -n "$f" ] && [ -s "$f" ]; then
  faults=$(cat "$f")
  : >"$f"
fi
# shellcheck disable=SC2086  # the fault flags are words
exec "$@" $faults

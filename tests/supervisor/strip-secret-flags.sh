#!/bin/sh
# Runs "$@" without --api-key/--hf-token and their values: the tiny engine has no such flags (vLLM has),
# and the security test passes them so that fastrestartd holds secrets it must never show.
skip=0
for a do
  shift
  if [ "$skip" = 1 ]; then skip=0; continue; fi
  case "$a" in
    --api-key | --hf-token) skip=1; continue ;;
    --api-key=* | --hf-token=*) continue ;;
  esac
  set -- "$@" "$a"
done
exec "$@"

#!/bin/bash
# Every shipped example, config/*.toml (by glob: examples added later are covered), must pass
# `fastrestartd --check --config FILE` as shipped. Usage: config-examples-test.sh FASTRESTARTD CONFIG_DIR
set -uo pipefail
fastrestartd=$1 dir=$2
shopt -s nullglob
files=("$dir"/*.toml)
[[ ${#files[@]} -gt 0 ]] || { echo "FAIL - no $dir/*.toml"; exit 1; }
fail=0
for f in "${files[@]}"; do
  if out=$("$fastrestartd" --check --config "$f" 2>&1); then
    echo "ok   - $(basename "$f"): $out"
  else
    echo "FAIL - $(basename "$f"): $out"; fail=1
  fi
done
exit $fail

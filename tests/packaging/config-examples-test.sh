#!/bin/bash
# Every shipped example, config/*.toml (by glob: examples added later are covered), must pass
# `fastrestartd --check --syntax-only --config FILE` as shipped (their checkpoints and engines are not on the
# build machine). Usage: config-examples-test.sh FASTRESTARTD CONFIG_DIR
set -uo pipefail
fastrestartd=$1 dir=$2
shopt -s nullglob
files=("$dir"/*.toml)
[[ ${#files[@]} -gt 0 ]] || { echo "FAIL - no $dir/*.toml"; exit 1; }
fail=0
for f in "${files[@]}"; do
  if out=$("$fastrestartd" --check --syntax-only --config "$f" 2>&1); then
    echo "ok   - $(basename "$f"): $out"
  else
    echo "FAIL - $(basename "$f"): $out"; fail=1
  fi
done
exit $fail

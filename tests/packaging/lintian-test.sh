#!/bin/bash
# lintian on the .deb (build/packages/, made by cpack in scripts/test.sh or by scripts/package.sh): no error
# may remain. Warnings are printed, not fatal; the overrides the package carries (packaging/deb/
# lintian-overrides, each with its reason) are honoured as lintian always does.
# Usage: lintian-test.sh [DEB]. Exit 77 = skipped (no package or no lintian).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
deb=${1:-$(ls "$root"/build/packages/fastrestart_*.deb 2>/dev/null | head -n1)}
command -v lintian >/dev/null || { echo "SKIP: lintian is not installed (scripts/deps.sh installs it)"; exit 77; }
[[ -n "$deb" && -f "$deb" ]] || { echo "SKIP: no package (cpack in build/, or scripts/package.sh)"; exit 77; }
# Errors and warnings only; info tags are advice.
out=$(lintian --fail-on none --display-level '>=warning' --show-overrides "$deb" 2>&1)
rc=$?
printf '%s\n' "$out"
[[ $rc -eq 0 ]] || { echo "FAIL - lintian itself failed (exit $rc)"; exit 1; }
errors=$(grep -c '^E: ' <<<"$out")
warnings=$(grep -c '^W: ' <<<"$out")
overridden=$(grep -c '^O: ' <<<"$out")
echo "lintian: $errors errors, $warnings warnings, $overridden overridden tags on $(basename "$deb")"
[[ $errors -eq 0 ]] || { echo "FAIL - lintian reports errors"; exit 1; }
echo "ok   - lintian: no errors"

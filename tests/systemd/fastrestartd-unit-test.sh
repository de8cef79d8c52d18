#!/bin/bash
# fastrestartd under real systemd 252 (PID 1 of private namespaces, tests/systemd/run-in-systemd.sh): the shipped
# packaging/systemd/fastrestart@.service, unchanged, serving config/demo.toml (tiny engine, host backend) as
# fastrestart@demo. Checks: active with the READY status text; `systemctl reload` runs
# `fastrestartctl reload --wait` and the unit is ready again; `systemctl stop` stops the engine first, then the
# weight daemons, then fastrestartd exits 0. Exit 77 = skipped (not root / no systemd / binaries missing).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
FASTRESTARTD="" FASTRESTARTCTL="" harness_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --fastrestartd) FASTRESTARTD=$2; shift 2 ;;
    --fastrestartctl) FASTRESTARTCTL=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    *) harness_args+=("$1"); shift ;;
  esac
done
FASTRESTARTD=${FASTRESTARTD:-$build/src/supervisor/fastrestartd}
FASTRESTARTCTL=${FASTRESTARTCTL:-$build/src/supervisor/fastrestartctl}
WEIGHTD=$build/src/daemon/fastrestart-weightd
TINYENGINE=$build/src/tinyengine/fastrestart-tinyengine
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root (unshare --pid --mount, cgroups)"; exit 77; }
[[ -x /lib/systemd/systemd ]] || { echo "SKIP: systemd is not installed (apt-get install -y systemd)"; exit 77; }
for b in "$FASTRESTARTD" "$FASTRESTARTCTL" "$WEIGHTD" "$TINYENGINE"; do
  [[ -x "$b" ]] || { echo "SKIP: $b not built"; exit 77; }
done

work=$(mktemp -d /var/tmp/fr-unit-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT; trap 'exit 143' TERM
"$TINYENGINE" gen --out "$work/model" --size 8M >/dev/null
"$here/fastrestartd/make-config.sh" "$root/config/demo.toml" /var/lib/fr-unit-test/model > "$work/demo.toml"

"$here/run-in-systemd.sh" --private-network --instance demo \
  --copy "$FASTRESTARTD=/usr/bin/fastrestartd" \
  --copy "$FASTRESTARTCTL=/usr/bin/fastrestartctl" \
  --copy "$WEIGHTD=/usr/bin/fastrestart-weightd" \
  --copy "$TINYENGINE=/usr/bin/fastrestart-tinyengine" \
  --copy "$work/model=/var/lib/fr-unit-test/model" \
  --copy "$work/demo.toml=/etc/fastrestart/demo.toml" \
  --check "$here/fastrestartd/check.sh" --check-timeout 150 \
  "${harness_args[@]}" "$root/packaging/systemd/fastrestart@.service"

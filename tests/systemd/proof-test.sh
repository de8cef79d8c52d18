#!/bin/bash
# The harness proof: boots systemd as PID 1 in private namespaces and checks a Type=notify shell service
# (active + STATUS text, synchronous reload, orderly stop). Exit 77 = skipped (not root / no systemd).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root (unshare --pid --mount, cgroups)"; exit 77; }
[[ -x /lib/systemd/systemd ]] || { echo "SKIP: systemd is not installed (apt-get install -y systemd)"; exit 77; }
exec "$here/run-in-systemd.sh" \
  --copy "$here/proof/proof-daemon.sh=/usr/local/lib/fr-proof/proof-daemon.sh" \
  --copy "$here/proof/proof-reload.sh=/usr/local/lib/fr-proof/proof-reload.sh" \
  --check "$here/proof/proof-check.sh" \
  "$@" "$here/proof/fr-notify-proof.service"

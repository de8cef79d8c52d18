#!/bin/bash
# The .deb (build/packages/, from cpack or scripts/package.sh) under real systemd 252 (tests/systemd/
# run-in-systemd.sh): dpkg -i into the namespace's private /usr, /etc, /var; fastrestart@demo from the packaged
# unit and binaries: start, journal, a C program built with pkg-config against the installed library,
# the Python module and the vLLM plugin's entry point, systemctl reload with changed flags, ordered stop;
# dpkg -r while running leaves no process and no socket; dpkg -P removes the state and the conffile; then
# the .rpm beside the .deb installed with rpm --nodeps, run, and erased (its scriptlets). Checks: package/check.sh.
# Usage: package-install-test.sh [DEB]. Exit 77 = skipped (not root / no systemd / no package).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# (|| true: with pipefail, ls finding nothing would end the script silently instead of skipping.)
deb=${1:-$(ls "$root"/build/packages/fastrestart_*.deb 2>/dev/null | head -n1 || true)}
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root (unshare --pid --mount, cgroups)"; exit 77; }
[[ -x /lib/systemd/systemd ]] || { echo "SKIP: systemd is not installed (apt-get install -y systemd)"; exit 77; }
[[ -n "$deb" && -f "$deb" ]] || { echo "SKIP: no package (scripts/package.sh builds build/packages/fastrestart_*.deb)"; exit 77; }
[[ $# -le 1 ]] || shift

work=$(mktemp -d /var/tmp/fr-pkg-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT; trap 'exit 143' TERM
dpkg-deb -x "$deb" "$work/x"
unit=$work/x/usr/lib/systemd/system/fastrestart@.service
[[ -f "$unit" ]] || { echo "FAIL: $deb has no /usr/lib/systemd/system/fastrestart@.service"; exit 1; }
# The .rpm beside it, when there is one and rpm is installed: its scriptlets run after the deb is purged.
rpm_copy=()
rpm_file=$(ls "$(dirname "$deb")"/fastrestart-*.rpm 2>/dev/null | head -n1 || true)
[[ -n "$rpm_file" ]] && command -v rpm >/dev/null && rpm_copy=(--copy "$rpm_file=/var/tmp/fastrestart.rpm")
"$here/fastrestartd/make-config.sh" "$root/config/demo.toml" /var/lib/fr-unit-test/model > "$work/demo.toml"
# The version the vLLM plugin's .dist-info must carry (python/dist_info.py writes it from pyproject.toml).
/usr/bin/python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' \
  "$root/python/pyproject.toml" > "$work/fastrestart-vllm.version"

# The unit under test is the packaged one (the harness installs it in /run/systemd/system: its unit search
# path is private), the binaries are the packaged ones (dpkg -i inside the namespace).
"$here/run-in-systemd.sh" --private-network --no-start --instance demo \
  --copy "$deb=/var/tmp/fastrestart.deb" \
  "${rpm_copy[@]}" \
  --copy "$work/demo.toml=/var/tmp/demo.toml" \
  --copy "$root/config=/var/tmp/config-src" \
  --copy "$work/fastrestart-vllm.version=/var/tmp/fastrestart-vllm.version" \
  --copy "$here/package/pkgconfig-probe.c=/var/tmp/pkgconfig-probe.c" \
  --check "$here/package/check.sh" --check-timeout 150 "$unit"

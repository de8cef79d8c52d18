#!/bin/bash
# What the packages promise, file by file: `rpm -qlp` of the .rpm and `dpkg-deb -c` of the .deb (files and
# symlinks; directories are the packaging tools' business) must match tests/packaging/expected-files.txt
# (shell globs, one a line) plus what the source tree says must ship by glob: every config/*.toml under
# /usr/share/doc/fastrestart/examples and every module of every Python package under python/. Also: the
# conffiles / %config files, and the maintainer scripts being there.
# Usage: contents-test.sh [PACKAGE_DIR]. Exit 77 = skipped (no packages, or no rpm/dpkg-deb).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dir=${1:-$root/build/packages}
deb=$(ls "$dir"/fastrestart_*.deb 2>/dev/null | head -n1)
rpm=$(ls "$dir"/fastrestart-*.rpm 2>/dev/null | head -n1)
command -v rpm >/dev/null && command -v dpkg-deb >/dev/null || { echo "SKIP: needs rpm and dpkg-deb"; exit 77; }
[[ -n "$deb" && -n "$rpm" ]] || { echo "SKIP: no packages in $dir (cpack in build/, or scripts/package.sh)"; exit 77; }
fail=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fail=1; }

pydir=/usr/lib/python3/dist-packages
patterns=()
while IFS= read -r l; do [[ -z "$l" || "$l" == \#* ]] || patterns+=("$l"); done < "$here/expected-files.txt"
for f in "$root"/config/*.toml; do patterns+=("/usr/share/doc/fastrestart/examples/$(basename "$f")"); done
for init in "$root"/python/*/__init__.py; do
  pkg=$(dirname "$init")
  while IFS= read -r m; do patterns+=("$pydir/${m#"$root"/python/}"); done \
    < <(find "$pkg" -name '*.py' -not -path '*/tests/*' -not -path '*/__pycache__/*' | sort)
done

compare() { # compare WHAT < actual paths
  local what=$1 p a matched; local -a actual=(); mapfile -t actual
  echo "-- $what: ${#actual[@]} files"
  for a in "${actual[@]}"; do
    matched=0; for p in "${patterns[@]}"; do [[ "$a" == $p ]] && { matched=1; break; }; done
    [[ $matched -eq 1 ]] || bad "$what ships $a, which tests/packaging/expected-files.txt does not promise"
  done
  for p in "${patterns[@]}"; do
    matched=0; for a in "${actual[@]}"; do [[ "$a" == $p ]] && { matched=1; break; }; done
    [[ $matched -eq 1 ]] || bad "$what lacks $p"
  done
}
before=$fail
rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$rpm" 2>/dev/null | awk '$1 !~ /^d/ { print $2 }' | compare "rpm -qlp $(basename "$rpm")"
[[ $fail -eq $before ]] && ok "rpm -qlp lists exactly the promised files"
before=$fail
dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $6 }' | compare "dpkg-deb -c $(basename "$deb")"
[[ $fail -eq $before ]] && ok "dpkg-deb -c lists exactly the promised files"

conf=$(rpm -qcp "$rpm" 2>/dev/null)
[[ "$conf" == /etc/fastrestart/example.toml ]] && ok "rpm %config: $conf" || bad "rpm %config files: '$conf', wanted /etc/fastrestart/example.toml"
conf=$(dpkg-deb -I "$deb" conffiles 2>/dev/null)
[[ "$conf" == /etc/fastrestart/example.toml ]] && ok "deb conffiles: $conf" || bad "deb conffiles: '$conf', wanted /etc/fastrestart/example.toml"
scripts=$(rpm -qp --scripts "$rpm" 2>/dev/null | grep -oE '^(postinstall|preuninstall|postuninstall) scriptlet' | tr '\n' ',')
[[ "$scripts" == "postinstall scriptlet,preuninstall scriptlet,postuninstall scriptlet," ]] && ok "rpm scriptlets: $scripts" || bad "rpm scriptlets: '$scripts'"
for s in postinst prerm postrm triggers shlibs; do
  dpkg-deb -I "$deb" "$s" >/dev/null 2>&1 && ok "deb control member $s" || bad "deb has no control member $s"
done
exit $fail

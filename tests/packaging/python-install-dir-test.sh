#!/bin/bash
# The Python module's install directory follows CMAKE_INSTALL_PREFIX when one build tree is reconfigured for
# another prefix, in both orders (scripts/demo.sh configures /usr/local, scripts/test.sh /usr, on the same
# build/): /usr gives Debian's /usr/lib/python3/dist-packages, never a python3.X directory; an explicit
# -DFR_PYTHON_INSTALL_DIR stays. Usage: python-install-dir-test.sh SOURCE_DIR (configures in a scratch dir).
set -uo pipefail
src=$1
fail=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fail=1; }
work=$(mktemp -d /tmp/fr-pydir-XXXXXX)
trap 'rm -rf "$work"' EXIT
dest() { grep -oE '"[^"]*dist-packages[^"/]*"' "$1/python/cmake_install.cmake" | head -1 | tr -d '"'; }
configure() { cmake -S "$src" -B "$1" -G Ninja "${@:2}" >"$work/log" 2>&1 || { tail -20 "$work/log"; return 1; }; }

configure "$work/a" -DCMAKE_INSTALL_PREFIX=/usr/local && configure "$work/a" -DCMAKE_INSTALL_PREFIX=/usr || bad "configure"
d=$(dest "$work/a")
[[ $d == '${CMAKE_INSTALL_PREFIX}/lib/python3/dist-packages' ]] && ok "/usr/local then /usr: $d" || bad "/usr/local then /usr: $d"

configure "$work/b" -DCMAKE_INSTALL_PREFIX=/usr && configure "$work/b" -DCMAKE_INSTALL_PREFIX=/usr/local || bad "configure"
d=$(dest "$work/b")
[[ $d =~ ^'${CMAKE_INSTALL_PREFIX}/lib/python3.'[0-9]+/dist-packages$ ]] && ok "/usr then /usr/local: $d" || bad "/usr then /usr/local: $d"

configure "$work/b" -DCMAKE_INSTALL_PREFIX=/usr -DFR_PYTHON_INSTALL_DIR=/opt/py && configure "$work/b" -DCMAKE_INSTALL_PREFIX=/usr/local || bad "configure"
d=$(grep -oE '"/opt/py[^"]*"' "$work/b/python/cmake_install.cmake" | head -1)
[[ -n $d ]] && ok "explicit FR_PYTHON_INSTALL_DIR kept: $d" || bad "explicit FR_PYTHON_INSTALL_DIR lost"
exit $fail

#!/usr/bin/env bash
# Builds the Debian and RPM packages of fastrestart into build/packages/ and lists their contents.
# Configures a separate release tree (build-pkg/, CMAKE_INSTALL_PREFIX=/usr, no tests) and runs CPack
# (packaging/Packaging.cmake). Extra arguments go to the cmake configure step. docs/packaging.md.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=$root/build/packages
tree=${FR_PACKAGE_TREE:-$root/build-pkg}

need=()
command -v rpmbuild >/dev/null || need+=(rpm)
command -v dpkg-shlibdeps >/dev/null || need+=(dpkg-dev)
command -v fakeroot >/dev/null || need+=(fakeroot)
if [ ${#need[@]} -gt 0 ]; then
  echo "scripts/package.sh: installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
fi

extra=()
# Until the top-level CMakeLists.txt includes packaging/Packaging.cmake itself, bring it in after project().
grep -q 'packaging/Packaging.cmake' CMakeLists.txt || extra+=(-DCMAKE_PROJECT_INCLUDE="$root/packaging/Packaging.cmake")

gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
[ -f "$tree/CMakeCache.txt" ] && gen=()
cmake -S . -B "$tree" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DFASTRESTART_TESTS=OFF -DFASTRESTART_FUZZ=OFF -DCPACK_PACKAGE_DIRECTORY="$out" "${extra[@]}" "$@" >/dev/null
cmake --build "$tree" -j"$(nproc)"
rm -rf "$out"; mkdir -p "$out"
(cd "$tree" && cpack -G "DEB;RPM" -B "$out")
rm -rf "$out/_CPack_Packages"

deb=$(ls "$out"/*.deb) rpm=$(ls "$out"/*.rpm)
echo; echo "== $deb"; dpkg-deb -f "$deb" Package Version Architecture Depends Suggests; dpkg -c "$deb"
echo "-- maintainer scripts and conffiles:"; dpkg-deb -I "$deb" | grep -E '^ +[0-9]+ bytes' || true
echo; echo "== $rpm"; rpm -qp --qf '%{NAME} %{VERSION}-%{RELEASE} %{ARCH}\n' "$rpm" 2>/dev/null
rpm -qlp "$rpm" 2>/dev/null
echo "-- config files:"; rpm -qcp "$rpm" 2>/dev/null
echo "-- requires:"; rpm -qRp "$rpm" 2>/dev/null | grep -v '^rpmlib(' | tr '\n' ' '; echo
echo; echo "packages in $out:"; ls -l "$out"

#!/usr/bin/env bash
# Builds CRIU 4.2.1 from Debian sid's source package and installs the binary as DEST/criu (default
# build/criu/criu). Debian 12's criu 3.17 cannot dump on kernels >= 6.x with the new vDSO layout (fixed in
# CRIU 4.1), so snapshots need this build (docs/snapshot.md).
#
# The built binary is cached in $FR_CRIU_CACHE (default ~/.cache/fastrestart/criu-4.2.1): a rerun that finds
# it copies it and takes well under a second. The first run adds a private deb-src list for sid, downloads
# the source with `apt-get source --download-only` (the orig tarball is all that is needed; the Debian
# tarball may 404), installs the build dependencies (scripts/deps.sh lists them too) and runs `make criu`
# (~15 s on 2 cores). Needs root the first time (apt).
#
# usage: scripts/build-criu.sh [DEST]     prints the path of the installed binary on its last line
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=4.2.1
dest=${1:-$root/build/criu}
cache=${FR_CRIU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fastrestart/criu-$version}
mirror=${FR_DEBIAN_MIRROR:-http://deb.debian.org/debian}

install_binary() {
  mkdir -p "$dest"
  cp -f "$cache/criu" "$dest/criu.tmp" && mv -f "$dest/criu.tmp" "$dest/criu"
  echo "$dest/criu"
}

if [ -x "$cache/criu" ] && "$cache/criu" --version 2>/dev/null | grep -q "Version: $version"; then
  install_binary
  exit 0
fi

[ "$(id -u)" = 0 ] || { echo "build-criu: the first build needs root (apt-get); run as root once" >&2; exit 1; }
build_deps=(libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev protobuf-compiler python3-protobuf
            libnl-3-dev libnet1-dev libcap-dev pkg-config libbsd-dev libgnutls28-dev libaio-dev uuid-dev
            build-essential dpkg-dev)
missing=()
for p in "${build_deps[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "build-criu: installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2 ||
    { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2; }
fi

# A private apt configuration that knows only sid's sources, so the system's lists are untouched.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/apt/lists/partial" "$work/apt/sources.list.d" "$work/src"
echo "deb-src $mirror sid main" >"$work/apt/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o "Dir::Etc::SourceParts=$work/apt/sources.list.d"
          -o "Dir::State::Lists=$work/apt/lists" -o "APT::Sandbox::User=root")
apt-get "${apt_opts[@]}" update >&2
# The Debian revision that packages upstream $version (e.g. 4.2.1-1); apt checks the tarball's hash.
debver=$(apt-cache "${apt_opts[@]}" showsrc criu | awk -v v="$version" '$1 == "Version:" && index($2, v "-") == 1 {print $2; exit}')
[ -n "$debver" ] || { echo "build-criu: sid no longer has criu $version ($(apt-cache "${apt_opts[@]}" showsrc criu | grep '^Version:' | head -3 | tr '\n' ' '))" >&2; exit 1; }
(cd "$work/src" && apt-get "${apt_opts[@]}" source --download-only "criu=$debver" >&2) || true
orig=$(ls "$work"/src/criu_"$version"*.orig.tar.* 2>/dev/null | head -1)
[ -n "$orig" ] || { echo "build-criu: sid has no criu $version source (ls: $(ls "$work/src"))" >&2; exit 1; }
tar -C "$work/src" -xf "$orig"
srcdir=$(find "$work/src" -maxdepth 1 -type d -name "criu-*" | head -1)
make -C "$srcdir" -j"$(nproc)" criu >"$work/make.log" 2>&1 || { tail -40 "$work/make.log" >&2; exit 1; }
mkdir -p "$cache"
cp "$srcdir/criu/criu" "$cache/criu.tmp" && mv -f "$cache/criu.tmp" "$cache/criu"
"$cache/criu" --version >&2
install_binary

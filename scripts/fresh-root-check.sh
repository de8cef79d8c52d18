#!/usr/bin/env bash
# Proves the README's first command on a machine without the build packages: in a clean Debian 12 root
# (debootstrap --variant=minbase bookworm, nothing else installed), from a copy of this source tree as a
# fresh clone has it, scripts/demo.sh installs its packages (scripts/deps.sh --demo) and configures and
# builds its four programs (fastrestartd, fastrestartctl, fastrestart-weightd, fastrestart-tinyengine).
# scripts/test.sh runs it (in the background, beside the tests).
#
#   scripts/fresh-root-check.sh          deps.sh --demo, then demo.sh's configure and build at -O0 (a missing
#                                        package fails the configure or the build just the same; -O0 keeps
#                                        the compile cheap), FR_DEMO_BUILD_ONLY=1: the demo does not run
#   scripts/fresh-root-check.sh --demo   the whole of `time scripts/demo.sh`, apt included, as the README
#                                        measures it
#
# The bare root is made once and cached as a tarball in $FR_FRESH_CACHE (default
# ~/.cache/fastrestart/fresh-root; `--refresh` makes it again), and the .deb files apt downloads are kept
# there too, so a rerun downloads nothing it already has; apt still installs every package into the
# clean copy. The root runs under chroot in a private mount namespace (its /proc, /dev and the apt cache are
# mounted there and go with it). Exits 0 with "SKIP: <reason>" where it cannot run: not root, or no
# debootstrap, chroot or unshare (scripts/deps.sh installs debootstrap).
#
# A pass is remembered (build mode only) under a key over everything that decides which packages a fresh
# machine needs for the demo: scripts/deps.sh, scripts/demo.sh, every CMakeLists.txt and cmake/ file, and the
# set of system headers (#include <...>) the sources under src/ name. A later run with the same key prints
# that it passed before and for which key, and exits 0 without rebuilding (about 10 CPU minutes saved on
# CI's two cores); a change to any of those inputs runs it again. `--force` (or FR_FRESH_FORCE=1) runs it
# regardless.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
suite=bookworm
mirror=${FR_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${FR_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
cache=${FR_FRESH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fastrestart/fresh-root}
mode=build refresh=0 force=${FR_FRESH_FORCE:-0}
for a in "$@"; do
  case "$a" in
    --demo) mode=demo ;;
    --refresh) refresh=1 ;;
    --force) force=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "fresh-root-check: unknown argument '$a' (--help)" >&2; exit 2 ;;
  esac
done
skip() { echo "SKIP: fresh-root check: $*"; exit 0; }
die() { echo "fresh-root-check: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, chroot, mounts)"
for t in debootstrap chroot unshare; do command -v "$t" >/dev/null || skip "$t is not installed (scripts/deps.sh)"; done

key=$(printf '%s\n' "$suite" "$mirror" "$security_mirror" "minbase-1" | sha256sum | cut -c1-16)
rootfs_tar=$cache/rootfs-$suite-$key.tar
archives=$cache/apt-archives
mkdir -p "$cache" "$archives/partial"

# What decides the demo's packages (above): the scripts, the CMake files, the system headers included.
inputs_key() {
  cd "$src"
  {
    cat scripts/deps.sh scripts/demo.sh
    find . -path ./build\* -prune -o \( -name CMakeLists.txt -o -path './cmake/*' \) -type f -print | sort | xargs cat
    grep -rhoE '^[[:space:]]*#[[:space:]]*include[[:space:]]*<[^>]+>' src | tr -d ' \t' | sort -u
    echo "$key"
  } | sha256sum | cut -c1-16
}
passed=$cache/passed-build-$(inputs_key)
if [ "$mode" = build ] && [ "$force" != 1 ] && [ -f "$passed" ]; then
  echo "fresh-root-check: passed before for these inputs ($(basename "$passed"), $(cat "$passed")): not run again (--force runs it)"
  exit 0
fi
work=$(mktemp -d /var/tmp/fr-fresh.XXXXXX)
trap 'rm -rf "$work"' EXIT
t0=$SECONDS

# 1. The bare root, cached: debootstrap's minbase and the bookworm sources, nothing else.
if [ "$refresh" = 1 ] || [ ! -f "$rootfs_tar" ]; then
  echo "fresh-root-check: debootstrap --variant=minbase $suite ($mirror)"
  mkdir -p "$work/root"
  debootstrap --variant=minbase "$suite" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -30 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
  cat >"$work/root/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security_mirror $suite-security main
EOF
  chroot "$work/root" apt-get clean
  rm -rf "$work/root"/var/lib/apt/lists/*
  tar -C "$work/root" --numeric-owner -cf "$rootfs_tar.tmp" . && mv -f "$rootfs_tar.tmp" "$rootfs_tar"
  find "$cache" -maxdepth 1 -name "rootfs-$suite-*.tar" ! -name "$(basename "$rootfs_tar")" -delete
  rm -rf "$work/root"
  echo "fresh-root-check: bare root made in $((SECONDS - t0)) s ($(du -h "$rootfs_tar" | cut -f1))"
fi
root=$work/root
mkdir -p "$root"
tar -C "$root" --numeric-owner -xf "$rootfs_tar"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"

# 2. The source tree as a clone has it: tracked files and untracked ones git does not ignore (no build trees).
mkdir -p "$root/src"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$src" && git ls-files -co --exclude-standard -z | xargs -0 stat --printf '%n\0' 2>/dev/null |
     tar --null -T - -cf -) | tar -C "$root/src" -xf -
else
  tar -C "$src" --exclude='./build*' --exclude=./.bundle -cf - . | tar -C "$root/src" -xf -
fi

# 3. In the root, with an environment of its own (nothing of this machine's compiler launcher or paths).
if [ "$mode" = demo ]; then
  inner='cd /src && s=$(date +%s%N) && scripts/demo.sh && e=$(date +%s%N) && echo "fresh-root-check: scripts/demo.sh, apt included: $(( (e - s) / 1000000000 )) s"'
else
  inner='cd /src && s=$(date +%s) && scripts/deps.sh --demo >/tmp/deps.log 2>&1 || { tail -30 /tmp/deps.log; exit 1; }
         d=$(date +%s) && FR_DEMO_BUILD_ONLY=1 FR_DEMO_OPT=-O0 scripts/demo.sh >/tmp/demo.log 2>&1 || { tail -40 /tmp/demo.log; exit 1; }
         e=$(date +%s)
         for b in supervisor/fastrestartd supervisor/fastrestartctl daemon/fastrestart-weightd tinyengine/fastrestart-tinyengine; do
           [ -x build-demo/src/$b ] || { echo "build-demo/src/$b was not built"; exit 1; }
         done
         build-demo/src/supervisor/fastrestartd --check --syntax-only --config config/demo.toml >/dev/null || exit 1
         echo "fresh-root-check: scripts/deps.sh --demo $((d - s)) s, the four programs configured and built (-O0) $((e - d)) s"'
fi
# shellcheck disable=SC2016
unshare --mount --propagation private bash -c '
  set -e
  root=$1 archives=$2 inner=$3
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount --bind "$archives" "$root/var/cache/apt/archives"
  exec chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive /bin/bash -c "$inner"
' fresh-root "$root" "$archives" "$inner" || die "in a clean Debian 12 root: failed (above)"
if [ "$mode" = build ]; then
  find "$cache" -maxdepth 1 -name 'passed-build-*' -mtime +30 -delete
  echo "at $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%dT%H:%MZ)" >"$passed"
fi
echo "fresh-root-check: passed in $((SECONDS - t0)) s (a clean $suite minbase root; apt's downloads cached in $archives)"

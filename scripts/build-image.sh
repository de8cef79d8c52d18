#!/usr/bin/env bash
# Builds the fastrestart container image from our .deb on a Debian 12 root file system made by debootstrap
# (no base image is pulled from any registry) and imports it into podman. docs/kubernetes.md, "The image".
#
#   1. The root: `debootstrap --variant=minbase bookworm`, brought up to date with bookworm-updates and
#      bookworm-security, plus (apt-get install in the chroot) the .deb's run-time dependencies (read from
#      its Depends field) and adduser (the package's postinst creates the `fastrestart` group with it).
#      Cached as a tarball in $FR_IMAGE_CACHE (default ~/.cache/fastrestart/image), keyed by the suite, the
#      mirrors and that package list: a rerun with the same dependencies skips debootstrap (the first run is
#      network-bound: 316 s on the shared 2-core machine; from the cached root 13 s). --refresh rebuilds it
#      (security updates).
#   2. A copy of that root, `dpkg -i` of the .deb inside it (chroot), apt's caches and the docs of other
#      packages dropped.
#   3. `tar -C ROOT -c . | podman import` with fastrestartd as the entry point; the config is expected at
#      /etc/fastrestart/<name>.toml (`--config` in the container's arguments; default model.toml).
#      The image carries the .deb's SHA-256 as a label: when an image of that name was already imported
#      from the same .deb (and the same root), nothing is rebuilt.
#
# usage: scripts/build-image.sh [--deb FILE] [--name IMAGE] [--refresh] [--force]
#   --deb      the package (default: the newest build/packages/fastrestart_*.deb, from cpack or scripts/package.sh)
#   --name     the image (default localhost/fastrestart:<the package's version>)
#   --refresh  rebuild the cached root (debootstrap again: new point release and security updates)
#   --force    import even when the image is up to date
# Needs root (debootstrap, chroot), debootstrap and podman (scripts/deps.sh installs them). Prints the
# image name on its last line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
suite=bookworm
mirror=${FR_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${FR_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
cache=${FR_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fastrestart/image}
deb="" name="" refresh=0 force=0

while [ $# -gt 0 ]; do
  case "$1" in
    --deb) deb=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --refresh) refresh=1; shift ;;
    --force) force=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-image: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
die() { echo "build-image: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (debootstrap and chroot)"
for t in debootstrap podman dpkg-deb; do command -v "$t" >/dev/null || die "$t is not installed (scripts/deps.sh)"; done
if [ -z "$deb" ]; then
  deb=$(ls -t "$root"/build/packages/fastrestart_*.deb 2>/dev/null | head -n1 || true)
  [ -n "$deb" ] || die "no build/packages/fastrestart_*.deb (cd build && cpack -G DEB, or scripts/package.sh); or --deb FILE"
fi
[ -f "$deb" ] || die "$deb: no such file"
version=$(dpkg-deb -f "$deb" Version)
name=${name:-localhost/fastrestart:$version}

# The run-time dependencies: each Depends entry's first alternative, without its version constraint.
deps=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed -E 's/\|.*//; s/\(.*\)//; s/:any//; s/[[:space:]]//g' | grep -v '^$' | sort -u)
deps=$(printf '%s\n' $deps adduser ca-certificates | sort -u | paste -sd' ' -)
key=$(printf '%s\n' "$suite" "$mirror" "$security_mirror" "$deps" "layout-1" | sha256sum | cut -c1-16)
rootfs_tar=$cache/rootfs-$suite-$key.tar
deb_sha=$(sha256sum "$deb" | cut -d' ' -f1)

if [ "$force" = 0 ] && [ "$refresh" = 0 ] && [ -f "$rootfs_tar" ] &&
   [ "$(podman image inspect --format '{{index .Labels "org.fastrestart.deb-sha256"}}/{{index .Labels "org.fastrestart.rootfs"}}' "$name" 2>/dev/null)" = "$deb_sha/$key" ]; then
  echo "build-image: $name is up to date ($(basename "$deb"), root $key)" >&2
  echo "$name"
  exit 0
fi

work=$(mktemp -d /var/tmp/fr-image.XXXXXX)
cleanup() {
  for m in "$work/root/proc" "$work/root/dev/pts" "$work/root/dev"; do mountpoint -q "$m" 2>/dev/null && umount -l "$m"; done
  rm -rf "$work"
}
trap cleanup EXIT

# 1. The cached root.
if [ "$refresh" = 1 ] || [ ! -f "$rootfs_tar" ]; then
  echo "build-image: debootstrap --variant=minbase $suite ($mirror), then: $deps" >&2
  mkdir -p "$work/root" "$cache"
  debootstrap --variant=minbase "$suite" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -30 "$work/debootstrap.log" >&2; [ -f "$work/root/debootstrap/debootstrap.log" ] && tail -30 "$work/root/debootstrap/debootstrap.log" >&2; die "debootstrap failed"; }
  cat >"$work/root/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security_mirror $suite-security main
EOF
  cp -L /etc/resolv.conf "$work/root/etc/resolv.conf"
  mount -t proc proc "$work/root/proc"
  # apt (not debootstrap --include) installs the dependencies: it resolves virtual packages
  # (libspdlog1.10-fmt9 is provided by libspdlog1.10).
  export DEBIAN_FRONTEND=noninteractive
  { chroot "$work/root" apt-get update && chroot "$work/root" apt-get -y upgrade &&
    chroot "$work/root" apt-get install -y --no-install-recommends $deps; } >"$work/apt.log" 2>&1 ||
    { tail -30 "$work/apt.log" >&2; die "apt-get in the new root failed"; }
  umount "$work/root/proc"
  chroot "$work/root" apt-get clean
  rm -rf "$work/root"/var/lib/apt/lists/* "$work/root/etc/resolv.conf"
  : >"$work/root/etc/resolv.conf"  # the runtime (podman, the kubelet) mounts its own
  tar -C "$work/root" --numeric-owner -cf "$rootfs_tar.tmp" . && mv -f "$rootfs_tar.tmp" "$rootfs_tar"
  # Older roots of other dependency lists are of no further use.
  find "$cache" -maxdepth 1 -name "rootfs-$suite-*.tar" ! -name "$(basename "$rootfs_tar")" -delete
  rm -rf "$work/root"
fi

# 2. The package in a copy of it.
mkdir -p "$work/root"
tar -C "$work/root" --numeric-owner -xf "$rootfs_tar"
cp "$deb" "$work/root/tmp/fastrestart.deb"
chroot "$work/root" dpkg -i /tmp/fastrestart.deb >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; die "dpkg -i $(basename "$deb") in the image failed"; }
rm -f "$work/root/tmp/fastrestart.deb"
chroot "$work/root" fastrestartd --check --syntax-only --config /usr/share/doc/fastrestart/examples/demo.toml >/dev/null ||
  die "fastrestartd does not run in the image"
# Documentation of the other packages and locales: nothing reads them in a container.
find "$work/root/usr/share/doc" -mindepth 1 -maxdepth 1 ! -name fastrestart -exec rm -rf {} +
rm -rf "$work/root/usr/share/man/"?? "$work/root/usr/share/locale"/* "$work/root/var/cache/apt"/*.bin \
       "$work/root/var/log"/*.log "$work/root/var/log/apt"/*
# /run/fastrestart (tmpfiles.d in the package) is made by fastrestartd itself on first use; /var/lib/fastrestart
# holds each model's state dir (a volume in Kubernetes).
mkdir -p "$work/root/var/lib/fastrestart"

# 3. Import. The image this name had before is removed (when no container uses it), so reruns do not
# pile up untagged images.
previous=$(podman image inspect --format '{{.Id}}' "$name" 2>/dev/null || true)
tar -C "$work/root" --numeric-owner -c . | podman import --quiet \
  --change 'ENTRYPOINT ["/usr/bin/fastrestartd"]' \
  --change 'CMD ["--config", "/etc/fastrestart/model.toml"]' \
  --change 'ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'STOPSIGNAL SIGTERM' \
  --change 'WORKDIR /' \
  --change "LABEL org.opencontainers.image.title=fastrestart" \
  --change "LABEL org.opencontainers.image.version=$version" \
  --change "LABEL org.opencontainers.image.base.name=debian-$suite-minbase-debootstrap" \
  --change "LABEL org.fastrestart.deb-sha256=$deb_sha" \
  --change "LABEL org.fastrestart.rootfs=$key" \
  - "$name" >/dev/null
if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$name")" ]; then
  podman rmi "$previous" >/dev/null 2>&1 || true
fi
echo "build-image: imported $name ($(basename "$deb"), root $key, $(podman image inspect --format '{{.Size}}' "$name" | awk '{printf "%.0f MB", $1/1e6}'))" >&2
echo "$name"

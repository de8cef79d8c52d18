#!/usr/bin/env bash
# Installs the Debian 12 packages fastrestart builds and tests with. Idempotent; needs root.
# `--demo`: only what scripts/demo.sh needs: a compiler and every library its configure of build-demo/
# looks for (cmake/Dependencies.cmake, src/health and src/tinyengine: the whole tree is configured though
# only four programs are built), curl and python3 for its requests. The test command installs everything.
# scripts/fresh-root-check.sh proves the demo's list on a clean Debian 12 root (scripts/test.sh runs it).
set -euo pipefail
demo_pkgs=(
  build-essential cmake ninja-build pkg-config
  libuv1-dev libtomlplusplus-dev nlohmann-json3-dev libspdlog-dev libsystemd-dev
  libcli11-dev libcpp-httplib-dev libmicrohttpd-dev libxxhash-dev libhttp-parser-dev
  curl python3 procps
)
pkgs=(
  build-essential cmake ninja-build pkg-config git
  libuv1-dev libtomlplusplus-dev nlohmann-json3-dev libspdlog-dev libsystemd-dev
  libgtest-dev libgmock-dev libcli11-dev libcpp-httplib-dev libmicrohttpd-dev libxxhash-dev libhttp-parser-dev
  pybind11-dev python3-dev python3-numpy python3-pip python3-setuptools
  clang libclang-rt-14-dev
  curl procps util-linux bc
  systemd rpm dpkg-dev fakeroot lintian pandoc
  prometheus
  # CRIU's build dependencies (scripts/build-criu.sh builds CRIU 4.2.1 for snapshots)
  libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev protobuf-compiler python3-protobuf
  libnl-3-dev libnet1-dev libcap-dev libbsd-dev libgnutls28-dev libaio-dev uuid-dev
  # The container image and its test (scripts/build-image.sh, tests/container; docs/kubernetes.md)
  podman runc debootstrap
)
# The Kubernetes manifest test's validator (tests/container/package.json) runs on Node.js with npm; a
# Node.js that brings its own npm is kept.
command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
[ "${1:-}" = --demo ] && pkgs=("${demo_pkgs[@]}")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "scripts/deps.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${missing[@]}" || { apt-get update && apt-get install -y --no-install-recommends "${missing[@]}"; }
fi

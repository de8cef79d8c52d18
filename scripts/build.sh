#!/usr/bin/env bash
# Configures and builds fastrestart into ./build (CUDA backend too when the toolkit is found).
# A unity build (batches of up to 8 sources of a target as one file; docs/build-time.md) when no compiler
# launcher is set, as on CI's cold machine; with ccache (CMAKE_CXX_COMPILER_LAUNCHER) each file compiles on
# its own, so a missing #include still fails on a developer's machine. FR_UNITY_BUILD=ON|OFF overrides.
set -euo pipefail
cd "$(dirname "$0")/.."
unity="${FR_UNITY_BUILD:-$([ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && echo ON || echo OFF)}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD="$unity" "$@" >/dev/null
cmake --build build -j"$(nproc)"

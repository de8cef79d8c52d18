#!/usr/bin/env bash
# Compiles every target as CI's unity trees do (batches of 8 sources of a target as one file; CONTRIBUTING.md),
# at -O0 and without ccache, into ./build-unity: a new .cc whose anonymous-namespace helper repeats another
# file's breaks only those trees, and a ccache build (unity off) never shows it. About 10 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
unset CMAKE_CXX_COMPILER_LAUNCHER CMAKE_C_COMPILER_LAUNCHER
cmake -S . -B build-unity -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DCMAKE_UNITY_BUILD=ON \
  -DFASTRESTART_CUDA=OFF >/dev/null
cmake --build build-unity -j"$(nproc)" -- -k 0
echo "scripts/check-unity.sh: every target compiles as a unity build"

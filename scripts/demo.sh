#!/usr/bin/env bash
# The README's demo (no GPU needed): installs only what the demo needs, builds only the four programs it
# runs into ./build-demo (Release; no tests, CUDA, Python or man pages), then runs scripts/demo-run.sh:
# fastrestartd supervising fastrestart-tinyengine with a weight daemon on the host backend.
# The test command (scripts/test.sh) installs and builds everything in ./build; the two trees are separate.
# For scripts/fresh-root-check.sh: FR_DEMO_BUILD_ONLY=1 stops after the build, FR_DEMO_OPT (default -O1)
# sets the optimisation level.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --demo
# A unity build (batches of 8 sources per compile) unless a compiler launcher such as ccache is set
# (docs/build-time.md; FR_UNITY_BUILD overrides), at -O1: code generation is most of the compile time, and
# the demo's programs spend their time in I/O and waiting, not in optimised loops.
unity="${FR_UNITY_BUILD:-$([ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && echo ON || echo OFF)}"
opt="${FR_DEMO_OPT:--O1}"
cmake -S . -B build-demo -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD="$unity" \
  -DCMAKE_CXX_FLAGS_RELEASE="$opt -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="$opt -DNDEBUG" \
  -DFASTRESTART_TESTS=OFF -DFASTRESTART_CUDA=OFF -DFASTRESTART_PYTHON=OFF -DFASTRESTART_MAN=OFF >/dev/null
echo "== building fastrestartd, fastrestartctl, fastrestart-weightd, fastrestart-tinyengine (build-demo/)"
cmake --build build-demo -j"$(nproc)" --target fastrestartd fastrestartctl fastrestart-weightd fastrestart-tinyengine \
  >build-demo/build.log 2>&1 || { tail -40 build-demo/build.log; exit 1; }
[ "${FR_DEMO_BUILD_ONLY:-0}" = 1 ] && exit 0
FR_BUILD_DIR=build-demo exec scripts/demo-run.sh "$@"

#!/usr/bin/env bash
# The one test command (README quick start; .ci/run calls it): installs dependencies, builds, runs every
# test (GPU tests skip with a reason on machines without one), then fuzzes the protocol codec briefly.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
# The deb/rpm packages (tests/systemd installs the deb under a private systemd). CUDA off: faster, and the
# package test runs on the CPU.
scripts/package.sh -DFASTRESTART_CUDA=OFF >build/package.log 2>&1 || { tail -30 build/package.log; exit 1; }
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 300)
scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
echo "scripts/test.sh: all tests passed"

#!/usr/bin/env bash
# The one test command (README quick start; .ci/run calls it): installs dependencies, builds, runs every
# test (GPU tests skip with a reason on machines without one), then fuzzes the protocol codec briefly.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 300)
scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
echo "scripts/test.sh: all tests passed"

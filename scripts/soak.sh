#!/usr/bin/env bash
# The soak of the restart loop at the documented large size (docs/reliability.md, "Soak"): builds
# soak_test in ./build and runs it. CI runs the same test at its default size through ctest.
#   scripts/soak.sh                         1000 cycles, 1 GiB checkpoint, a random seed (printed)
#   FR_SOAK_SEED=123 scripts/soak.sh        replay a run
#   FR_SOAK_CYCLES=200 FR_SOAK_SIZE=16M scripts/soak.sh   the CI size
# The report (seed, exits by cause, faults, memory and descriptors) goes to build/soak-report.json.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target soak_test
export FR_SOAK_CYCLES="${FR_SOAK_CYCLES:-1000}" FR_SOAK_SIZE="${FR_SOAK_SIZE:-1G}"
export FR_SOAK_REPORT="$PWD/build/soak-report.json"
build/tests/soak/soak_test
echo "scripts/soak.sh: report in $FR_SOAK_REPORT"

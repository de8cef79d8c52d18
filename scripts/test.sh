#!/usr/bin/env bash
# The one test command (README quick start; .ci/run calls it): installs dependencies, builds, runs every
# test (GPU tests skip with a reason on machines without one; the soak at its CI size), fuzzes every input
# parser briefly, and runs the sanitizer builds (SANITIZE=0 skips them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# The published restart figures (docs/benchmarks.md, the README's table) against their raw files in
# bench/results/: no build needed, under a second.
python3 bench/check_figures.py
# CRIU 4.2.1 for the snapshot tests (build/criu/criu; cached in ~/.cache/fastrestart, so reruns take <1 s).
scripts/build-criu.sh >/dev/null
scripts/build.sh -DCMAKE_INSTALL_PREFIX=/usr
# The deb/rpm packages from this same build (tests/systemd installs the deb under a private systemd);
# scripts/package.sh makes release packages from a tree of their own.
(cd build && rm -rf packages && cpack -G "DEB;RPM" >package.log 2>&1 && rm -rf packages/_CPack_Packages) ||
  { tail -30 build/package.log; exit 1; }
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 300)
scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
# ASan + UBSan over the unit and end-to-end tests, TSan over the threaded ones (docs/reliability.md).
[ "${SANITIZE:-1}" = 0 ] || scripts/sanitize.sh
echo "scripts/test.sh: all tests passed"

#!/usr/bin/env bash
# The one test command (README quick start; .ci/run calls it): installs dependencies, builds, runs every
# test (GPU tests skip with a reason on machines without one; the soak at its CI size), fuzzes every input
# parser briefly, and runs the sanitizer builds (SANITIZE=0 skips them).
#
# The order keeps both of CI's two cores busy (docs/build-time.md, "The test command's schedule"): the
# tests mostly wait on the processes they start, so while the normal tree's tests run, the ASan tree
# builds beside them, and while the ASan tests run, the TSan and fuzz trees build; those background builds
# run at nice 19, so the tests get a core whenever they want one. The fresh-root check (a clean Debian 12
# root: scripts/deps.sh --demo, then the demo's four programs configure and build) runs in the background
# too. Each background step's output goes to build/bg-<step>.log, printed when it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
phase() { echo "scripts/test.sh: $1 (at $((SECONDS - t0)) s)"; }
scripts/deps.sh
# No test source names the system's /run/fastrestart (CONTRIBUTING.md, "Tests").
scripts/check-test-isolation.sh
# The published restart figures (docs/benchmarks.md, the README's table) against their raw files in
# bench/results/: no build needed, under a second.
python3 bench/check_figures.py
# CRIU 4.2.1 for the snapshot tests (build/criu/criu; cached in ~/.cache/fastrestart, so reruns take <1 s).
scripts/build-criu.sh >/dev/null
phase "building build/"
scripts/build.sh -DCMAKE_INSTALL_PREFIX=/usr
sanitize="${SANITIZE:-1}"

# background STEP CMD...: CMD at nice 19 in a process group of its own (setsid execs it: its pid is the
# group's id), its output in build/bg-STEP.log; its pid in bg_STEP. When this script fails or is stopped,
# every background step not yet waited for is stopped with it (`jobs -p` lists only those, so no pid that
# may have been reused is signalled): a failed run leaves no compiler or fresh-root build behind.
background() {
  local step=$1
  shift
  setsid nice -n 19 "$@" >"build/bg-$step.log" 2>&1 &
  printf -v "bg_${step//-/_}" '%s' $!
}
stop_background() {
  local rc=$? g
  [ "$rc" = 0 ] && return
  # (a step that has not yet become its own group is stopped by its pid)
  for g in $(jobs -p); do kill -TERM -- "-$g" 2>/dev/null || kill -TERM "$g" 2>/dev/null || true; done
}
trap stop_background EXIT
trap "exit 143" TERM
trap "exit 130" INT
trap "exit 129" HUP
# join STEP: waits for a background step; on failure prints its log's end and fails.
join() {
  local pid_var="bg_${1//-/_}"
  wait "${!pid_var}" || { echo "=== build/bg-$1.log"; tail -60 "build/bg-$1.log"; echo "scripts/test.sh: $1 failed"; exit 1; }
  phase "$1 done"
}
if [ "$sanitize" != 0 ]; then background asan-build env FR_PHASE=build scripts/sanitize.sh asan; fi
background fresh-root scripts/fresh-root-check.sh

# The deb/rpm packages from this same build (tests/systemd installs the deb under a private systemd);
# scripts/package.sh makes release packages from a tree of their own.
phase "packages"
(cd build && rm -rf packages && cpack -G "DEB;RPM" >package.log 2>&1 && rm -rf packages/_CPack_Packages) ||
  { tail -30 build/package.log; exit 1; }
phase "ctest"
# ... and no test made or changed /run/fastrestart while they ran.
scripts/check-test-isolation.sh -- bash -c 'cd build && ctest --output-on-failure -j"$(nproc)" --timeout 300'
phase "ctest done"

if [ "$sanitize" != 0 ]; then
  # A background build that failed is built again in the foreground before it counts as failed: ninja
  # resumes where it stopped, and a link raced by the tests beside it ("Text file busy" when gtest's
  # discovery runs the new binary) does not fail the run.
  wait "$bg_asan_build" || { echo "=== build/bg-asan-build.log"; tail -20 build/bg-asan-build.log; phase "asan-build again"; FR_PHASE=build scripts/sanitize.sh asan; }
  phase "asan-build done"
  # The TSan and fuzz trees build while the ASan + UBSan tests run.
  background tsan-fuzz-build bash -c 'FR_PHASE=build scripts/sanitize.sh tsan && FR_PHASE=build scripts/fuzz.sh'
  # ASan + UBSan over the unit and end-to-end tests, TSan over the threaded ones (docs/reliability.md).
  phase "ASan + UBSan tests"
  FR_PHASE=run scripts/sanitize.sh asan
  wait "$bg_tsan_fuzz_build" || { echo "=== build/bg-tsan-fuzz-build.log"; tail -20 build/bg-tsan-fuzz-build.log; phase "tsan-fuzz-build again"; FR_PHASE=build scripts/sanitize.sh tsan; FR_PHASE=build scripts/fuzz.sh; }
  phase "tsan-fuzz-build done"
  phase "TSan tests"
  FR_PHASE=run scripts/sanitize.sh tsan
  phase "fuzzing"
  FR_PHASE=run scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
else
  phase "fuzzing"
  scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
fi
join fresh-root
cat build/bg-fresh-root.log
echo "scripts/test.sh: all tests passed in $((SECONDS - t0)) s"

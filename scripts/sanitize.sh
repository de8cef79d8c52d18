#!/usr/bin/env bash
# Sanitizer builds and test runs (docs/reliability.md, "Sanitizers"); CI runs both (scripts/test.sh).
#   scripts/sanitize.sh asan   ASan + UBSan in ./build-asan: the unit and end-to-end tests, with every
#                              binary they start (fastrestartd, weightd, tinyengine) instrumented too
#   scripts/sanitize.sh tsan   TSan in ./build-tsan: the threaded tests (reader threads, the daemon's
#                              connection threads, the loader, the health server)
#   scripts/sanitize.sh        both
# FR_PHASE=build only builds the trees, FR_PHASE=run only runs the tests of trees already built (scripts/test.sh
# builds them in the background while the normal tests run); default: both.
# A finding in a test or in a child process aborts it; the child's report goes to build-*/sanitizer/, and
# any report there fails the run (a child's abort alone might only look like an engine crash to a test).
set -euo pipefail
cd "$(dirname "$0")/.."
kinds="${*:-asan tsan}"
jobs="$(nproc)"
phase="${FR_PHASE:-all}"
case "$phase" in all|build|run) ;; *) echo "scripts/sanitize.sh: FR_PHASE=$phase: all, build or run" >&2; exit 100 ;; esac

run_kind() {
  local kind=$1 dir sanitize targets pick
  case "$kind" in
    asan)
      # Everything but CUDA (no GPU in CI), the systemd scripts (they install the packages) and the three
      # package checks that run none of our code (the packages' contents, lintian, the Python module's
      # install directory). Nothing else is left out: a test that would race a slow instrumented run waits
      # for an event instead.
      dir=build-asan sanitize=address,undefined targets=all
      pick=(-LE 'systemd|cuda' -E '^packaging_(contents|lintian|python_install_dir)$')
      ;;
    tsan)
      dir=build-tsan sanitize=thread
      targets="daemon_test engine_loader_test health_test"
      pick=(-R '^(Preload|Weightd\.|Attach|CApi|HealthServer|EveryState)')
      ;;
    *) echo "scripts/sanitize.sh: unknown kind '$kind' (asan, tsan)" >&2; exit 100 ;;
  esac
  local t0=$SECONDS
  # -O1 -g1 (line tables only), as the sanitizers' own docs suggest: reports keep file:line, and the
  # instrumented tree compiles in far less time than at -O2 -g, which matters on CI's two cores.
  # NDEBUG as in the normal build, so both run the same code. -Wno-maybe-uninitialized: GCC's own manual
  # warns that -fsanitize=address makes that analysis give false positives (seen in libstdc++'s <regex>).
  local flags="-O1 -g1 -DNDEBUG -Wno-maybe-uninitialized"
  # A unity build (CMake batches of up to 8 sources of a target compiled as one file) when no compiler
  # launcher is set, as on CI's cold machine: most of a file's compile time is the code generated for the
  # nlohmann::json, gtest and fmt templates it uses, and a batch generates it once instead of once per file
  # (about 30% less here; docs/build-time.md). Not with ccache (CMAKE_CXX_COMPILER_LAUNCHER set): a unity
  # file #includes its sources by absolute path, which would tie every cache hit to one checkout's path.
  # FR_UNITY_BUILD=ON|OFF overrides. A developer's build (ccache) compiles each file on its own, so a
  # missing #include still fails there.
  local unity="${FR_UNITY_BUILD:-$([ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && echo ON || echo OFF)}"
  if [[ $phase != run ]]; then
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DFASTRESTART_SANITIZE="$sanitize" \
      "-DCMAKE_C_FLAGS_SANITIZE=$flags" "-DCMAKE_CXX_FLAGS_SANITIZE=$flags" -DCMAKE_UNITY_BUILD="$unity" \
      -DFASTRESTART_CUDA=OFF -DFASTRESTART_PYTHON=OFF ${CMAKE_ARGS:-} >/dev/null
    # shellcheck disable=SC2086
    cmake --build "$dir" -j"$jobs" --target $targets
  fi
  local built=$SECONDS
  if [[ $phase == build ]]; then
    echo "scripts/sanitize.sh: $kind: build $((built - t0)) s"
    return 0
  fi
  local logs="$PWD/$dir/sanitizer"
  rm -rf "$logs" && mkdir -p "$logs"
  # Children inherit these; log_path keeps their reports out of the engine output the tests parse.
  # handle_segv=0: tests fork a child that writes through a read-only mapping and expect it to die of
  # SIGSEGV (the sanitizers would turn that into their own report and exit code); instrumented code is
  # checked before it could fault anyway.
  export ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=1:abort_on_error=1:strict_string_checks=1:handle_segv=0"
  export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1:halt_on_error=1"
  export TSAN_OPTIONS="log_path=$logs/tsan:halt_on_error=1:second_deadlock_stack=1:handle_segv=0"
  export FR_SOAK_CYCLES="${FR_SOAK_CYCLES_SANITIZE:-20}"
  # bench/kv_kills.py's CPU test kills once instead of three times: under ASan the whole test took 147 s
  # (about 10 s in the normal tree, which still does the three kills).
  export FR_KV_KILLS_TEST_KILLS="${FR_KV_KILLS_TEST_KILLS:-1}"
  local rc=0
  (cd "$dir" && ctest --output-on-failure -j"$jobs" --timeout 600 "${pick[@]}") || rc=$?
  # LeakSanitizer prints "Running thread N was not suspended. False leaks are possible." when a thread
  # is exiting as it stops the world at the process's exit (seen in the container test's PID namespace).
  # That notice is not a finding; a log holding anything else is.
  local benign='^==[0-9]+==Running thread [0-9]+ was not suspended\. False leaks are possible\.$'
  local reported=0 f
  for f in "$logs"/*; do
    [[ -e $f ]] || continue
    if grep -qvE "$benign" "$f"; then
      echo "=== $f"; head -60 "$f"; reported=1
    else
      echo "scripts/sanitize.sh: $kind: $(basename "$f") holds only LeakSanitizer's thread-suspension notice ($(wc -l <"$f") lines); not a finding"
    fi
  done
  if ((reported)); then
    echo "scripts/sanitize.sh: $kind: sanitizer reports above"
    rc=1
  fi
  echo "scripts/sanitize.sh: $kind: build $((built - t0)) s, tests $((SECONDS - built)) s, rc $rc"
  return $rc
}

for k in $kinds; do run_kind "$k"; done

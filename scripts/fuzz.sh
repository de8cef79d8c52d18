#!/usr/bin/env bash
# Builds the libFuzzer targets (clang 14, ASan + UBSan, the libraries instrumented too) into ./build-fuzz,
# replays the regression inputs (fuzz/regressions/<target>/: every crash found so far), then fuzzes each
# target for N seconds from seeds made from the repository (fuzz/make-seeds.sh) plus the corpus kept in
# build-fuzz/corpus-<target> from earlier runs.
#   scripts/fuzz.sh            20 s per target (CI)
#   scripts/fuzz.sh 1800       30 min per target (before a release; docs/reliability.md)
#   FUZZ_TARGETS="fuzz_config" scripts/fuzz.sh 600    one target
#   FUZZ_JOBS=1 scripts/fuzz.sh                       one target at a time (default: one per core)
#   FR_PHASE=build scripts/fuzz.sh / FR_PHASE=run scripts/fuzz.sh   only build / only fuzz (scripts/test.sh
#                                                     builds in the background while the tests run)
#   FUZZ_MIN_RATE=300 scripts/fuzz.sh                 a lower bar on a loaded machine (CI: 1000)
# The targets are every fuzz/fuzz_*.cc (fuzz/CMakeLists.txt: one line each). Each prints its rate; a target
# that runs fewer than FUZZ_MIN_RATE inputs a second fails the run: a slow target explores nothing (one
# that waited on a clock ran 20 a second). Seeds also come from fuzz/corpus/<target>/ (small, kept in the
# repository: what earlier runs found, merged down with -merge=1).
# A crash leaves crash-<sha1> in build-fuzz/; copy it to fuzz/regressions/<target>/ with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
min_rate="${FUZZ_MIN_RATE:-1000}"
targets="${FUZZ_TARGETS:-$(for f in fuzz/fuzz_*.cc; do basename "$f" .cc; done | tr '\n' ' ')}"
san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
# -O1 with line tables, as OSS-Fuzz's builds use: reports keep file:line and the tree (the config, control and
# front parsers with all they use: 841 CPU s at -O2 -g) compiles faster; at -O2 the slowest target ran 4,600
# inputs a second, so the rate stays far above FUZZ_MIN_RATE.
opt="-O1 -gline-tables-only -DNDEBUG"
# A unity build (batches of up to 8 sources of a target compiled as one file: the json and fmt template
# code they share is generated once; docs/build-time.md) when no compiler launcher is set, as on CI's cold
# machine. Not with ccache: a unity file #includes its sources by absolute path, which would tie every cache
# hit to one checkout's path. FR_UNITY_BUILD=ON|OFF overrides.
unity="${FR_UNITY_BUILD:-$([ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && echo ON || echo OFF)}"
phase="${FR_PHASE:-all}"
if [ "$phase" != run ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DFASTRESTART_FUZZ=ON -DFASTRESTART_TESTS=OFF -DCMAKE_UNITY_BUILD="$unity" \
    -DFASTRESTART_CUDA=OFF -DFASTRESTART_TINYENGINE=OFF -DFASTRESTART_PYTHON=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$opt" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$opt" \
    -DCMAKE_C_FLAGS="$san" -DCMAKE_CXX_FLAGS="$san" >/dev/null
  # shellcheck disable=SC2086
  cmake --build build-fuzz -j"$(nproc)" --target $targets
fi
[ "$phase" = build ] && exit 0
fuzz/make-seeds.sh build-fuzz/seeds >/dev/null
summary=build-fuzz/fuzz-summary.txt
: >"$summary"
# One target: replay its regressions, then fuzz it. Its messages go to build-fuzz/fuzz-<target>.out (printed
# in target order once all have finished), its result line to build-fuzz/fuzz-<target>.summary.
fuzz_one() {
  local t=$1
  if compgen -G "fuzz/regressions/$t/*" >/dev/null; then
    "build-fuzz/fuzz/$t" fuzz/regressions/"$t"/* >build-fuzz/regressions-$t.log 2>&1 ||
      { tail -30 build-fuzz/regressions-$t.log; echo "scripts/fuzz.sh: $t fails on a regression input"; return 1; }
  fi
  mkdir -p "build-fuzz/corpus-$t"
  echo "scripts/fuzz.sh: $t for ${secs}s"
  local dict=()
  [ -f "build-fuzz/seeds/$t.dict" ] && dict=(-dict="seeds/$t.dict")
  # -len_control=100: inputs grow towards -max_len step by step, as libFuzzer does by default, which it
  # turns off for a target with a custom mutator (the JSON attacks): then every mutation may go to 64 KiB
  # at once and the typical input costs tens of times more to run, for no coverage that small ones miss.
  local kept=()
  [ -d "fuzz/corpus/$t" ] && kept=("../fuzz/corpus/$t")
  (cd build-fuzz && "./fuzz/$t" -max_total_time="$secs" -max_len=65536 -len_control=100 -timeout=10 -rss_limit_mb=2048 \
    "${dict[@]}" -print_final_stats=1 "corpus-$t" "seeds/$t" "${kept[@]}" >"fuzz-$t.log" 2>&1) ||
    { tail -40 "build-fuzz/fuzz-$t.log"; echo "scripts/fuzz.sh: $t found a crash (input in build-fuzz/)"; return 1; }
  local runs rate cov
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "build-fuzz/fuzz-$t.log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "build-fuzz/fuzz-$t.log")
  cov=$(grep -oE 'cov: [0-9]+' "build-fuzz/fuzz-$t.log" | tail -1)
  echo "$t: $runs inputs in ${secs}s, $rate exec/s, $cov, corpus $(ls "build-fuzz/corpus-$t" | wc -l)" | tee "build-fuzz/fuzz-$t.summary"
  if ((rate < min_rate)); then
    echo "scripts/fuzz.sh: $t ran $rate inputs a second, under $min_rate (FUZZ_MIN_RATE): it explores next to nothing"
    return 1
  fi
}
# The targets run FUZZ_JOBS at a time (default: one per core). A libFuzzer process uses one core, so on CI's
# two cores two targets fuzz side by side, each still for the full N seconds: the phase takes half the wall
# time with the same fuzzing per target.
jobs_max="${FUZZ_JOBS:-$(nproc)}"
failed=0
for t in $targets; do
  rm -f "build-fuzz/fuzz-$t.summary"
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n || failed=1; done
  fuzz_one "$t" >"build-fuzz/fuzz-$t.out" 2>&1 &
done
while (($(jobs -rp | wc -l) > 0)); do wait -n || failed=1; done
for t in $targets; do
  cat "build-fuzz/fuzz-$t.out"
  if [ -f "build-fuzz/fuzz-$t.summary" ]; then cat "build-fuzz/fuzz-$t.summary" >>"$summary"; else failed=1; fi
done
((failed == 0)) || exit 1

#!/usr/bin/env bash
# Builds the libFuzzer targets (clang 14, ASan + UBSan, the libraries instrumented too) into ./build-fuzz,
# replays the regression inputs (fuzz/regressions/<target>/: every crash found so far), then fuzzes each
# target for N seconds from seeds made from the repository (fuzz/make-seeds.sh) plus the corpus kept in
# build-fuzz/corpus-<target> from earlier runs.
#   scripts/fuzz.sh            20 s per target (CI)
#   scripts/fuzz.sh 1800       30 min per target (before a release; docs/reliability.md)
#   FUZZ_TARGETS="fuzz_config" scripts/fuzz.sh 600    one target
# A crash leaves crash-<sha1> in build-fuzz/; copy it to fuzz/regressions/<target>/ with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
targets="${FUZZ_TARGETS:-fuzz_frame fuzz_safetensors fuzz_config fuzz_control fuzz_readiness fuzz_gate}"
san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DFASTRESTART_FUZZ=ON -DFASTRESTART_TESTS=OFF \
  -DFASTRESTART_CUDA=OFF -DFASTRESTART_TINYENGINE=OFF -DFASTRESTART_PYTHON=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="$san" -DCMAKE_CXX_FLAGS="$san" >/dev/null
# shellcheck disable=SC2086
cmake --build build-fuzz -j"$(nproc)" --target $targets
fuzz/make-seeds.sh build-fuzz/seeds >/dev/null
summary=build-fuzz/fuzz-summary.txt
: >"$summary"
for t in $targets; do
  if compgen -G "fuzz/regressions/$t/*" >/dev/null; then
    "build-fuzz/fuzz/$t" fuzz/regressions/"$t"/* >build-fuzz/regressions-$t.log 2>&1 ||
      { tail -30 build-fuzz/regressions-$t.log; echo "scripts/fuzz.sh: $t fails on a regression input"; exit 1; }
  fi
  mkdir -p "build-fuzz/corpus-$t"
  echo "scripts/fuzz.sh: $t for ${secs}s"
  dict=()
  [ -f "build-fuzz/seeds/$t.dict" ] && dict=(-dict="seeds/$t.dict")
  (cd build-fuzz && "./fuzz/$t" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    "${dict[@]}" -print_final_stats=1 "corpus-$t" "seeds/$t" >"fuzz-$t.log" 2>&1) ||
    { tail -40 "build-fuzz/fuzz-$t.log"; echo "scripts/fuzz.sh: $t found a crash (input in build-fuzz/)"; exit 1; }
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "build-fuzz/fuzz-$t.log")
  cov=$(grep -oE 'cov: [0-9]+' "build-fuzz/fuzz-$t.log" | tail -1)
  echo "$t: $runs inputs in ${secs}s, $cov, corpus $(ls "build-fuzz/corpus-$t" | wc -l)" | tee -a "$summary"
done

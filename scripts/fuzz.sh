#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) into ./build-fuzz and runs each for N seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DFASTRESTART_FUZZ=ON -DFASTRESTART_TESTS=OFF \
  -DFASTRESTART_CUDA=OFF -DFASTRESTART_TINYENGINE=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_frame fuzz_safetensors
for t in fuzz_frame fuzz_safetensors; do
  mkdir -p "build-fuzz/corpus-$t"
  echo "scripts/fuzz.sh: $t for ${secs}s"
  "build-fuzz/fuzz/$t" -max_total_time="$secs" -max_len=65536 -print_final_stats=1 "build-fuzz/corpus-$t" 2>&1 | tail -3
done

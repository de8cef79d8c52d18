#!/usr/bin/env bash
# The vLLM loader plugin's tests on the GPU machine: torch tensors on cuda:0, the CUDA weight daemon.
# Runs from the repository root with .bundle/ carried (scripts/gpu-bundle.sh). The binding is the bundle's
# (.bundle/python) when that machine's python3 imports it; otherwise it is built there (cmake -S python:
# python/cmake/Standalone.cmake, pybind11 from `python3 -m pybind11`, the header-only nlohmann/json and
# xxhash the bundle carries under .bundle/include). Then python/tests/test_vllm_plugin.py runs with
# FR_TEST_DEVICE=cuda. Files in $OUT: summary_vllm_plugin.txt, vllm_plugin.log (vllm_plugin_build.log).
#
# usage: python/tests/gpu_vllm_plugin.sh
set -uo pipefail
root=$(pwd)
bundle=$root/.bundle
build=$root/build-py-gpu
OUT=${OUT:-/tmp/fr-gpu-out}
mkdir -p "$OUT"
summary=$OUT/summary_vllm_plugin.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
[ -x "$bundle/bin/fastrestart-weightd" ] || { say "gpu_vllm_plugin: no bundle at $bundle (scripts/gpu-bundle.sh)"; exit 1; }
export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
py=$(command -v python3)

say "== python: $($py -c 'import sys, torch, numpy; print(sys.version.split()[0], "torch", torch.__version__, "numpy", numpy.__version__, "cuda", torch.cuda.is_available())' 2>&1)"
# The binding: the bundle's (built for Python 3.12 by scripts/gpu-bundle.sh) when this python imports it,
# else built here from python/ on its own.
if [ -d "$bundle/python/fastrestart" ] && PYTHONPATH=$bundle/python "$py" -c 'import fastrestart' 2>/dev/null; then
  pypath=$bundle/python
  say "binding: $bundle/python (from the bundle)"
else
  pybind=$($py -m pybind11 --cmakedir 2>/dev/null) || { say "gpu_vllm_plugin: no bundled binding and no pybind11 for $py"; exit 1; }
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  {
    cmake -S "$root/python" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython3_EXECUTABLE="$py" \
          -Dpybind11_DIR="$pybind" -DFR_EXTRA_INCLUDE="$bundle/include" &&
    cmake --build "$build" -j"$(nproc)"
  } >"$OUT/vllm_plugin_build.log" 2>&1
  rc=$?
  say "binding: built (cmake -S python): exit $rc; $(grep -E 'Python binding|CUDA backend' "$OUT/vllm_plugin_build.log" | tr '\n' ' ')"
  [ $rc -eq 0 ] || { tail -30 "$OUT/vllm_plugin_build.log" | tee -a "$summary"; exit 1; }
  pypath=$build
fi

cd "$root/python/tests" || exit 1
PYTHONPATH=$pypath:$root/python FR_WEIGHTD_BIN=$bundle/bin/fastrestart-weightd FR_TEST_DEVICE=cuda FAKE_VLLM_BACKEND=torch \
  PYTHONDONTWRITEBYTECODE=1 "$py" -m unittest -v test_vllm_plugin >"$OUT/vllm_plugin.log" 2>&1
rc=$?
grep -E '^(test_|Ran |OK|FAILED)' "$OUT/vllm_plugin.log" | tee -a "$summary"
say "test_vllm_plugin (cuda, torch): exit $rc"
exit $rc

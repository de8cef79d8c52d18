#!/usr/bin/env bash
# Builds the CUDA configuration here (build-gpu/) and packs what the GPU test machine needs into .bundle/:
# the daemon, the CLI, the front, the CUDA tests and their helper, the attach benchmark, the snapshot helper (stripped of
# debug info), CRIU (scripts/build-criu.sh), and
# the non-system shared libraries ldd names for them (spdlog, fmt, ...). glibc, libstdc++ and libgcc are
# not carried: the GPU machine runs Ubuntu 24.04, whose copies are newer than Debian 12's.
# Then, on the GPU machine, from the repository root with .bundle carried: scripts/gpu-run.sh.
#
# The Python binding is built for the GPU machine's Python 3.12 (its torch lives there) with a local 3.12's
# headers: FR_BUNDLE_PYTHON names that interpreter (default: pyenv's 3.12, else python3.12 on PATH); it
# lands in .bundle/python/fastrestart (PYTHONPATH=.bundle/python).
#
# usage: scripts/gpu-bundle.sh        (exit 1 when the build fails or the bundle exceeds 64 MiB)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-gpu
bundle=$root/.bundle
targets=(fastrestart-weightd fastrestart-weightctl gpu_digest_test vmm_share_test no_driver_test fr_cuda_helper
         fr_attach_bench fastrestartd fastrestartctl fastrestart-tinyengine tinyengine_test fastrestart-snapshot
         fastrestart-front)

py=${FR_BUNDLE_PYTHON:-$(ls -d /root/.pyenv/versions/3.12*/bin/python3 2>/dev/null | tail -1)}
py=${py:-$(command -v python3.12 || true)}
pyargs=()
[ -n "$py" ] && pyargs=(-DPython3_EXECUTABLE="$py")
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
configure=$(cmake -S "$root" -B "$build" -DFASTRESTART_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "${pyargs[@]}" "${launcher[@]}")
grep -q 'CUDA backend ON' <<<"$configure" ||
  { echo "gpu-bundle: the CUDA toolkit was not found (set CUDA_HOME)" >&2; exit 1; }
if grep -q 'Python binding: .*(3\.12' <<<"$configure"; then
  targets+=(fr_python)
else
  echo "gpu-bundle: no Python 3.12 with headers here (FR_BUNDLE_PYTHON): the bundle has no Python binding" >&2
fi
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
for t in "${targets[@]}"; do
  if [ "$t" = fr_python ]; then
    mkdir -p "$bundle/python/fastrestart"
    cp "$build"/python/fastrestart/*.py "$bundle/python/fastrestart/"  # the package's modules (standby.py, ...)
    for so in "$build"/python/fastrestart/_fastrestart*.so; do
      objcopy --strip-debug "$so" "$bundle/python/fastrestart/$(basename "$so")"
    done
    continue
  fi
  f=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  [ -n "$f" ] || { echo "gpu-bundle: $t was not built" >&2; exit 1; }
  objcopy --strip-debug "$f" "$bundle/bin/$t"
done
# CRIU for snapshots (bench/gpu_snapshot.sh): built from source (cached), carried with its libraries below.
criu=$("$root/scripts/build-criu.sh" "$build/criu" | tail -1)
cp "$criu" "$bundle/bin/criu"
# Shared libraries outside the C/C++ runtime, resolved through symlinks to the names the binaries ask for.
for f in "$bundle"/bin/* "$bundle"/python/fastrestart/*.so; do
  [ -e "$f" ] || continue
  ldd "$f" | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r name path; do
  case "$name" in
    libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) ;;
    libcuda.so*) echo "gpu-bundle: $name must not be linked (it is dlopen'ed)" >&2; exit 1 ;;
    *) cp -L "$path" "$bundle/lib/$name" ;;
  esac
done

# Header-only libraries, for building the Python binding there (python/tests/gpu_vllm_plugin.sh).
mkdir -p "$bundle/include"
cp -r /usr/include/nlohmann /usr/include/xxhash.h "$bundle/include/"

exclude=$(git -C "$root" rev-parse --git-path info/exclude)
case "$exclude" in /*) ;; *) exclude=$root/$exclude ;; esac
grep -qxF '/.bundle/' "$exclude" 2>/dev/null || echo '/.bundle/' >>"$exclude"

{
  echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo none)"
  echo "built $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(gcc --version | head -1)"
  echo "nvcc $("${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version | tail -1)"
} >"$bundle/MANIFEST"
size=$(du -sb "$bundle" | cut -f1)
echo "gpu-bundle: $bundle: $(ls "$bundle/bin" | wc -l) binaries, $(ls "$bundle/lib" | wc -l) libraries, $((size / 1024 / 1024)) MiB"
[ "$size" -lt $((64 * 1024 * 1024)) ] || { echo "gpu-bundle: over 64 MiB" >&2; exit 1; }

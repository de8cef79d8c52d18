#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .bundle/ (scripts/gpu-bundle.sh) carried:
# the CUDA tests, then the weight-store benchmark (bench/h200_weights.py), results under $OUT.
#
# usage: scripts/gpu-run.sh [smoke|full|tests|tests-native|tests-torch|tests-vllm|kv-prefix|kv-kills|publish-cost|front|arena-snapshot|e2e-smoke|e2e|snapshot-plugin|snapshot-refengine|snapshot-weightless|standby|vshape|vshape-smoke|vshape-arena|tp|tp-smoke|socket]
#   smoke: machine facts, the CUDA tests, and the benchmark on a 1% checkpoint (about 160 MB)
#   full:  the CUDA tests and the benchmark on the full Llama-3.1-8B-shaped checkpoint (16 GB)
#   e2e-smoke: the Python tests with torch (binding, reference engine), then bench/e2e_restart.py on small
#          checkpoints (E2E_ARGS adds flags)
#   e2e:   the same with the 16 GB checkpoints (issue 6's figures; docs/bench-notes.md "End to end")
#   snapshot-plugin: the CUDA snapshot benchmark (bench/gpu_snapshot.sh, SNAP_SIZE default 8G,
#          SNAP_RESTORES default 3), then the vLLM plugin's tests and the binding's torch tests on cuda:0
#          (python/tests/gpu_vllm_plugin.sh, test_torch); every log and CRIU's own logs (images left out)
#          go into logs.tar.gz, so the files stay under the 8 that come back
#   tests: every GPU test without the weight-store benchmark, the three modes below one after the other
#          (about 16 minutes: longer than one 10-minute device call; the three fit one call each)
#   tests-native: the CUDA gtests (no_driver_test, gpu_digest_test, vmm_share_test, tinyengine_test's
#          TinyEngineCuda.*) and bench/gpu_supervisor.sh; each step gets at most what is left of 560 s
#   tests-torch: the Python tests with torch on cuda:0 (test_binding test_torch test_refengine test_arena
#          test_refengine_batch; 362 s on the H200), under a 540 s limit; TESTS_TORCH_MODULES names others
#          (unittest names, e.g. "test_refengine_batch test_refengine_prefix")
#   tests-vllm: the vLLM plugin's tests on cuda:0 (python/tests/gpu_vllm_plugin.sh; each test starts torch:
#          201 s on the H200 once, past 260 s since), under a 540 s limit
#   snapshot-refengine: the same snapshot benchmark on the PyTorch reference engine, SNAP_SHAPES
#          (default "tiny 8b": a 75 MB Llama, then the 16 GB Llama-3.1-8B shape), SNAP_RESTORES each (2)
#   snapshot-weightless: snapshots without the weights (weights.mode zero_copy): the 8 GiB tiny engine
#          (CUDA forward, --cuda-graph-check) then the 16 GB PyTorch reference engine (SNAP_WL_SHAPE, default
#          8b), SNAP_RESTORES (2) crash restores each: artifact size, create time, kill-to-READY against warm
#          and cold, the oracle (checked by every restore), the graph check; first the VMM release/re-map
#          test and the reference engine's exchange test under torch; at most 580 s (60 + 90 + 170 + 260),
#          every step under a timeout
#   standby: standby engines (bench/gpu_standby.sh; docs/standby.md): the 16 GB reference engine and the 16 GB
#          tiny engine under fastrestartd, kill -9 per start path (standby warmed, warmed + --cuda-graph,
#          pre_gpu, warm, cold): kill to READY (from the kill(2)) median and max, the parked standby's GPU memory, GPU memory
#          over the cycles, the oracle on every path; counts and runs through the variables the script
#          names; at most about 540 s (STANDBY_BUDGET_S 520 plus the summary), every step under a timeout
#   vshape: the reference engine shaped like vLLM (batched, KV cache at the share, CUDA graphs per batch size;
#          docs/refengine.md "Batched serving") under fastrestartd on the 16 GB shape at memory.utilization 0.9,
#          kill -9 per start path (warm, standby pre_gpu, standby warmed, cold): kill to READY, the live
#          engine's phases, GPU memory, KV cache and graphs, tokens/s at 1 and max-num-seqs clients, the oracle
#          (bench/gpu_vllm_shape.sh; VSHAPE_* variables); at most about 540 s. vshape-smoke: the tiny shape.
#          vshape-arena: the same script on VSHAPE_RUNS "warmed_arena cold" (the KV cache in the daemon's arena,
#          a warmed standby parked over its placeholder; cold for the KV cache without a standby);
#          VSHAPE_TIMEOUT_S (540) bounds the script, for a call with a larger VSHAPE_BUDGET_S
#   arena-snapshot: the KV arena's GPU tests (python test_arena's CUDA tests: a killed writer and the next
#          holder's canary, a graph over the arena across unmap and new lease; test_refengine's exchange with
#          --kv-arena), then bench/gpu_vllm_shape.sh on VSHAPE_RUNS "snapshot_arena cold" (the snapshot
#          without weights and KV cache: artifact size, kill -9 to READY by restore); at most about 575 s
#   tp:    the tensor-parallel reference engine on this one GPU under fastrestartd (bench/gpu_tp.sh; docs/refengine.md
#          "Tensor parallel"): the 16 GB Llama-3.1-8B shape at TP=2 (--share-device, gloo; kill -9 of rank 0 twice
#          and of rank 1 twice, each restart attaching both shards) then TP=1 (5 warm kills); at most 405 s
#   tp-smoke: the quick check: test_refengine's TP test under torch (tiny Llama: disk, cold, warm, a rank's shard
#          evicted), then bench/gpu_tp.sh on the tiny shape (TP=2: one kill of each rank; TP=1: 2 kills); at most
#          about 420 s
#   kv-prefix: prefix reuse across a kill in the reference engine: test_refengine_prefix and test_refengine's
#          prefix test, then bench/kv_survival.py --engine ref (8k-token prefix, 8b shape: time to first token
#          cached, after kill -9 with the index, with it dropped, without prefix caching); at most about 560 s
#   kv-kills: the prefix index under fastrestartd (bench/kv_kills.py --engine ref; docs/kv-survival.md,
#          "Under fastrestartd"): a `warmed` standby, the K/V in the CUDA daemon's arena, the index in the host
#          daemon's (weights.host_arenas); an 8k-token prefix's time to first token around a kill, then
#          KV_KILLS (20) kills at random instants under traffic, each followed by 50 prompts compared with the
#          never-killed engine's answers; KV_KILLS_SHAPE (8b); at most KV_KILLS_BUDGET_S (540) s
#   publish-cost: what the prefix index's publishes cost a decode step (bench/prefix_publish_cost.py: a
#          stream tail's position checksums and filled blocks' checksums for 1-256 rows on the 8b KV shape,
#          beside one read of the 16 GB of weights); under a minute
#   front: what clients see across kill -9 with engine.listen "front" and "supervisor" (bench/front_kill_ref.py;
#          docs/front.md, "On a GPU"): the batched reference engine (FRONT_SHAPE 8b, the KV cache in the CUDA
#          daemon's arena, a `warmed` standby), each mode in turn: FRONT_CLIENTS (64,256) clients, half
#          streaming, FRONT_KILLS (2) kills each; then, through the front, FRONT_SINGLE_KILLS (3) single
#          streams killed mid-way (token-equal, extra wait against the service gap); then, with 150 s left, the
#          front's cost without kills on this machine's CPU (bench/front_kill.py --part cost, the tiny engine,
#          FRONT_COST_PAIRS 150); at most FRONT_BUDGET_S (540) s
#   socket: what a client sees across kill -9 with the listening socket owned by the engine and by fastrestartd
#          (bench/socket_restart.py --engine ref; docs/bench-notes.md "No refused connection across a restart"):
#          the 16 GB reference engine (Llama-3.1-8B shape, generated into /var/tmp/frstandby/llama unless there,
#          SOCKET_SHAPE 8b), 4 clients, listen SOCKET_LISTEN (supervisor,engine), kills SOCKET_KILLS
#          (warmed=3,pre_gpu=2,warm=1), path by path; a run or kill that would end past SOCKET_BUDGET_S (500 s
#          from the script's start) is left out and says so; at most about 535 s. Files: summary.txt (with the
#          table), socket_restart.json, socket_restart-PATH.svg per path, socket-out.gz, socket-logs.tar.gz
# Files in $OUT (at most 8 come back): summary.txt, tests.log, bench.log, results.json, weightd*.log.
set -uo pipefail
mode=${1:-full}
root=$(pwd)
bundle=$root/.bundle
[ -x "$bundle/bin/fastrestart-weightd" ] || { echo "gpu-run: no bundle at $bundle (run scripts/gpu-bundle.sh)" >&2; exit 1; }
export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$bundle/bin:$PATH
export FR_BIN_DIR=$bundle/bin  # tests run the bundled binaries, not the build tree's paths
OUT=${OUT:-/tmp/fr-gpu-out}
mkdir -p "$OUT"
summary=$OUT/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
# run_step NAME LIMIT SUMMARY_FILE CMD...: every mode's run of a bench or test script: CMD under
# `timeout LIMIT` with its output in $OUT/NAME.out (kept), then its summary file (in $OUT) appended to
# summary.txt. Returns CMD's exit code (124: it ran past LIMIT); the caller says it.
run_step() {
  local name=$1 limit=$2 sumfile=$3 rc
  shift 3
  timeout "$limit" "$@" >"$OUT/$name.out" 2>&1
  rc=$?
  cat "$OUT/$sumfile" >>"$summary" 2>/dev/null
  return $rc
}
# run_collect NAME LIMIT LABEL SUMMARY_FILE CMD...: the benchmark modes' run-and-collect: run_step, then
# "LABEL: exit RC (at T s)", the output's last 20 kB kept as $OUT/NAME-out.gz, the output and the summary
# file removed (at most 8 files come back). Returns CMD's exit code.
run_collect() {
  local name=$1 limit=$2 label=$3 sumfile=$4 rc
  shift 4
  run_step "$name" "$limit" "$sumfile" "$@"
  rc=$?
  say "$label: exit $rc (at $SECONDS s)"
  tail -c 20000 "$OUT/$name.out" | gzip >"$OUT/$name-out.gz"
  rm -f "$OUT/$name.out" "$OUT/$sumfile"
  return $rc
}
# llama_checkpoint SHAPE: the generated Llama checkpoint of SHAPE in $ck (8b: bench/gpu_standby.sh's
# /var/tmp/frstandby/llama, else /var/tmp/frstandby/llama-SHAPE). One generated earlier in this lease is
# reused (its config.json is written last, so it marks a whole checkpoint); a failed generation ends the run.
llama_checkpoint() {
  local shape=$1 t0=$SECONDS
  ck=/var/tmp/frstandby/llama
  [ "$shape" = 8b ] || ck=/var/tmp/frstandby/llama-$shape
  if [ -f "$ck/config.json" ]; then
    say "checkpoint ($shape): $ck, already there"
    return
  fi
  rm -rf "$ck"
  timeout 180 python3 bench/gen_llama_checkpoint.py "$ck" --shape "$shape" >"$OUT/gen.log" 2>&1 ||
    { say "gen_llama_checkpoint --shape $shape failed: $(tail -2 "$OUT/gen.log")"; exit 1; }
  rm -f "$OUT/gen.log"
  say "checkpoint ($shape): $(du -sh "$ck" | cut -f1) in $((SECONDS - t0)) s"
}
# run_pytests LIMIT LOG LABEL TEST...: python -m unittest in python/tests against the bundle's weight daemon
# under `timeout LIMIT` (0: no limit), its output in $OUT/LOG; "LABEL: exit RC; <its last lines>". Returns
# the exit code.
run_pytests() {
  local limit=$1 log=$2 label=$3 rc
  shift 3
  (cd python/tests && FR_WEIGHTD_BIN=$bundle/bin/fastrestart-weightd timeout "$limit" \
    python3 -m unittest -v "$@") >"$OUT/$log" 2>&1
  rc=$?
  say "$label: exit $rc; $(tail -3 "$OUT/$log" | tr '\n' ' ')"
  return $rc
}
# snapshot_run DIR PREFIX LIMIT LABEL ARGS...: bench/gpu_snapshot.sh ARGS with its files in DIR (OUT=DIR;
# the caller's FR_BENCH_* in the environment) under `timeout LIMIT`, its output in DIR/snapshot.out;
# "LABEL: exit RC", its summary appended to summary.txt, its results as $OUT/PREFIX-results.json and its
# logs (without CRIU's images and the model) as $OUT/PREFIX-logs.tar.gz. Returns the script's exit code.
snapshot_run() {
  local d=$1 prefix=$2 limit=$3 label=$4 rc
  shift 4
  OUT=$d timeout "$limit" bench/gpu_snapshot.sh "$@" >"$d/snapshot.out" 2>&1
  rc=$?
  say "$label: exit $rc"
  cat "$d/snapshot-summary.txt" >>"$summary" 2>/dev/null
  cp "$d/snapshot-results.json" "$OUT/$prefix-results.json" 2>/dev/null
  tar czf "$OUT/$prefix-logs.tar.gz" --exclude='*.img' --exclude='pages-*' --exclude=model \
    -C / "${d#/}" var/tmp/frsnap 2>/dev/null
  return $rc
}
# step_limit CAP: a step's timeout: CAP, or what is left until $deadline s after the start when that is
# less (at least 1), so a mode's steps together stay inside one device call.
deadline=100000
step_limit() { local l=$((deadline - SECONDS)); l=$((l < $1 ? l : $1)); echo $((l > 0 ? l : 1)); }

say "== machine"
say "$(nvidia-smi --query-gpu=name,driver_version,memory.total,persistence_mode --format=csv,noheader 2>&1)"
export PYTHONPATH=$bundle/python${PYTHONPATH:+:$PYTHONPATH}
say "$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM (grows on use), kernel $(uname -r)"
say "$(. /etc/os-release && echo "$PRETTY_NAME"); bundle: $(head -1 "$bundle/MANIFEST")"
say "disk: $(df -h /var/tmp | tail -1)"

# cuda_gtest LABEL TEST [ARGS...]: the bundle's gtest TEST under step_limit 150, its output appended to
# $OUT/tests.log; "LABEL: exit RC; <its PASSED/FAILED/SKIPPED counts>"; sets failed=1 when it fails.
cuda_gtest() {
  local label=$1 t=$2 rc line
  shift 2
  timeout "$(step_limit 150)" "$bundle/bin/$t" "$@" >"$OUT/$t.tmp" 2>&1
  rc=$?
  line=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' "$OUT/$t.tmp" | tr '\n' ' ')
  cat "$OUT/$t.tmp" >>"$OUT/tests.log"
  rm -f "$OUT/$t.tmp"
  say "$label: exit $rc; $line"
  [ $rc -eq 0 ] || failed=1
}
# cuda_tests: the CUDA gtests, each under step_limit 150; sets failed=1 when one fails.
failed=0
cuda_tests() {
  say "== CUDA tests"
  : >"$OUT/tests.log"
  failed=0
  for t in no_driver_test gpu_digest_test vmm_share_test; do
    cuda_gtest "$t" "$t"
  done
  cuda_gtest "tinyengine_test (CUDA)" tinyengine_test --gtest_filter='TinyEngineCuda.*'
  grep -E 'GPU digest of 2 GiB|16 GiB VMM pool|cuMemExportToShareableHandle|cuMemHostAlloc' "$OUT/tests.log" | tee -a "$summary"
  grep -E '^\[  FAILED  \]' "$OUT/tests.log" | tee -a "$summary"
  # The KV arena on the GPU (vmm_share_test): the placeholder aliases, the swap keeps the address.
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\] CudaDevice\.Arena' "$OUT/tests.log" | tee -a "$summary"
}
# native_tests: the CUDA gtests, then fastrestartd on the GPU (bench/gpu_supervisor.sh); fails if either does.
native_tests() {
  deadline=560
  cuda_tests
  say "== supervisor on the GPU (fastrestartd + tinyengine CUDA + weightd cuda; at $SECONDS s)"
  timeout "$(step_limit 120)" bench/gpu_supervisor.sh "$OUT" "${SUP_SIZE:-2G}" 3 2>&1 | tee -a "$summary"
  local src=${PIPESTATUS[0]}
  say "gpu_supervisor: exit $src"
  [ $failed -eq 0 ] && [ "$src" -eq 0 ]
}

case "$mode" in
  snapshot-plugin)
    # Snapshot first (what is most likely to need a second look), each step under its own limit so the
    # whole stays inside one 600 s call.
    say "== CUDA snapshot (bench/gpu_snapshot.sh ${SNAP_SIZE:-8G} ${SNAP_RESTORES:-3})"
    run_step snapshot 300 snapshot-summary.txt bench/gpu_snapshot.sh "${SNAP_SIZE:-8G}" "${SNAP_RESTORES:-3}"
    src=$?
    say "gpu_snapshot: exit $src"
    say "== vLLM plugin (torch, cuda:0)"
    run_step plugin 190 summary_vllm_plugin.txt python/tests/gpu_vllm_plugin.sh
    vrc=$?
    say "gpu_vllm_plugin: exit $vrc"
    say "== the binding's torch tests (test_torch)"
    run_pytests 80 python-tests.log test_torch test_torch
    prc=$?
    # CRIU's logs, the helper's output and the manifests; the images stay behind.
    tar czf "$OUT/logs.tar.gz" --exclude='*.img' --exclude='pages-*' --exclude='model' -C /var/tmp frsnap 2>/dev/null
    (cd "$OUT" && tar czf logs-out.tar.gz --exclude=logs.tar.gz --exclude=logs-out.tar.gz \
      --exclude=summary.txt --exclude=snapshot-results.json --exclude=snapshot-create.json . &&
      find . -maxdepth 1 -type f ! -name summary.txt ! -name 'logs*.tar.gz' ! -name snapshot-results.json \
      ! -name snapshot-create.json -delete)
    [ $vrc -eq 0 ] && [ $prc -eq 0 ] && [ $src -eq 0 ]
    exit
    ;;
  snapshot-refengine)
    # CRIU snapshots of the PyTorch reference engine: a 75 MB Llama (what a restore skips besides the
    # weights: the interpreter, torch and transformers) and the 16 GB Llama-3.1-8B shape (issue 6's engine).
    for shape in ${SNAP_SHAPES:-tiny 8b}; do
      limit=200
      [ "$shape" = 8b ] && limit=330
      say "== CUDA snapshot of the reference engine, $shape (bench/gpu_snapshot.sh $shape ${SNAP_RESTORES:-2})"
      mkdir -p "/tmp/snap-$shape"
      FR_BENCH_ENGINE=refengine snapshot_run "/tmp/snap-$shape" "ref-$shape" $limit "gpu_snapshot ($shape)" \
        "$shape" "${SNAP_RESTORES:-2}"
      cp "/tmp/snap-$shape/snapshot-inspect.json" "$OUT/ref-$shape-inspect.json" 2>/dev/null
    done
    exit 0
    ;;
  snapshot-weightless)
    rc=0
    say "== release keeping the VA range, re-map at the same address (vmm_share_test, cuda:0)"
    timeout 60 "$bundle/bin/vmm_share_test" --gtest_filter='CudaDevice.Release*' >"$OUT/vmm-release.log" 2>&1
    vrc=$?
    say "vmm_share_test (release/remap): exit $vrc; $(grep -E 'PASSED|FAILED|SKIPPED' "$OUT/vmm-release.log" | head -2 | tr '\n' ' ')"
    [ $vrc -eq 0 ] || rc=1
    say "== the reference engine's snapshot exchange under torch (test_refengine, release and re-map on cuda:0)"
    run_pytests 90 python-tests.log "test_refengine (exchange)" \
      test_refengine.RefEngineTest.test_snapshot_exchange_releases_and_remaps_the_pool || rc=1
    for run in "tinyengine ${SNAP_WL_SIZE:-8G} 170" "refengine ${SNAP_WL_SHAPE:-8b} 260"; do
      read -r eng size limit <<<"$run"
      say "== weightless snapshot of the $eng ($size, zero_copy; bench/gpu_snapshot.sh $size ${SNAP_RESTORES:-2})"
      d=/tmp/snapwl-$eng
      rm -rf "$d" && mkdir -p "$d"
      # (its manifest: in the tar)
      FR_BENCH_ENGINE=$eng FR_BENCH_MODE=zero_copy FR_BENCH_GRAPH=1 snapshot_run "$d" "wl-$eng" "$limit" \
        "gpu_snapshot ($eng, zero_copy)" "$size" "${SNAP_RESTORES:-2}" || rc=1
    done
    exit $rc
    ;;
  standby)
    say "== standby engines (bench/gpu_standby.sh)"
    run_collect standby 570 gpu_standby standby-summary.txt bench/gpu_standby.sh
    exit
    ;;
  kv-prefix)
    # Prefix reuse across a kill in the reference engine (docs/refengine.md, "Prefix reuse across a kill"):
    # its tests (the index and the Batcher without torch; the GPU test: reuse, kill -9, recovery, a layout
    # change dropping the index), then bench/kv_survival.py --engine ref: an 8k-token prefix on the 8b shape
    # (KV_PREFIX_SHAPE, KV_PREFIX_TOKENS), time to first token cached / after kill -9 with the index / with
    # the index dropped / without prefix caching; raw JSON in $OUT. At most about 560 s.
    rc=0
    say "$(timeout 60 python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1 | tail -1)"
    run_pytests 200 python-tests.log "prefix tests" test_refengine_prefix \
      test_refengine.RefEngineTest.test_prefix_reuse_survives_kill_nine_with_the_index_in_a_host_arena || rc=1
    llama_checkpoint "${KV_PREFIX_SHAPE:-8b}"
    run_collect kv_survival "$((560 - SECONDS > 60 ? 560 - SECONDS : 60))" "bench/kv_survival.py --engine ref" kv_survival.txt \
      bash -o pipefail -c "python3 bench/kv_survival.py --engine ref --bin-dir '$bundle/bin' --model '$ck' \
        --prefix-tokens ${KV_PREFIX_TOKENS:-8192} --samples ${KV_PREFIX_SAMPLES:-5} --out '$OUT' | tee '$OUT/kv_survival.txt'" || rc=1
    exit $rc
    ;;
  kv-kills)
    shape=${KV_KILLS_SHAPE:-8b}
    llama_checkpoint "$shape"
    budget=$((${KV_KILLS_BUDGET_S:-540} - SECONDS))
    say "== the prefix index under fastrestartd (bench/kv_kills.py --engine ref, $shape, ${KV_KILLS:-20} kills, budget $budget s)"
    run_collect kv_kills $((budget + 30)) "bench/kv_kills.py --engine ref" kv_kills.txt \
      bash -o pipefail -c "python3 bench/kv_kills.py --engine ref --bin '$bundle/bin' --checkpoint '$ck' --phases '${KV_KILLS_PHASES:-ttft,kills}' \
        --kills ${KV_KILLS:-20} --budget-s $budget --out '$OUT' | tee '$OUT/kv_kills.txt'"
    exit
    ;;
  publish-cost)
    say "== what the prefix index's publishes cost a decode step (bench/prefix_publish_cost.py)"
    run_collect publish_cost 120 "bench/prefix_publish_cost.py" publish_cost.txt \
      bash -o pipefail -c "python3 bench/prefix_publish_cost.py --out '$OUT' | tee '$OUT/publish_cost.txt'"
    exit
    ;;
  front)
    shape=${FRONT_SHAPE:-8b}
    llama_checkpoint "$shape"
    budget=$((${FRONT_BUDGET_S:-540} - SECONDS))
    say "== clients across kill -9 through fastrestart-front and straight to fastrestartd's port (bench/front_kill_ref.py, $shape, clients ${FRONT_CLIENTS:-64,256}, ${FRONT_KILLS:-2} kills each, budget $budget s)"
    run_collect front_kill $((budget - 30)) "bench/front_kill_ref.py" front_kill.txt \
      bash -o pipefail -c "python3 bench/front_kill_ref.py --engine ref --bin '$bundle/bin' --checkpoint '$ck' --clients '${FRONT_CLIENTS:-64,256}' \
        --kills ${FRONT_KILLS:-2} --single-kills ${FRONT_SINGLE_KILLS:-3} --modes '${FRONT_MODES:-front,supervisor}' --out '$OUT' 2>&1 | tee '$OUT/front_kill.txt'"
    rc=$?
    # the front's cost without kills on this machine's cores (the tiny engine on the CPU, front and direct
    # interleaved), when at least 150 s of the budget are left
    if [ $((${FRONT_BUDGET_S:-540} - SECONDS)) -ge 150 ]; then
      say "== the front's cost without kills (bench/front_kill.py --part cost, the tiny engine, at $SECONDS s)"
      run_collect front_cost $((${FRONT_BUDGET_S:-540} - SECONDS - 10)) "bench/front_kill.py --part cost" front_cost.txt \
        bash -o pipefail -c "python3 bench/front_kill.py --part cost --cost-pairs ${FRONT_COST_PAIRS:-150} --build '$bundle/bin' \
          --results '$OUT' 2>&1 | tail -3 | tee '$OUT/front_cost.txt'"
    else
      say "the front's cost without kills: left out (under 150 s of the budget left at $SECONDS s)"
    fi
    exit $rc
    ;;
  socket)
    shape=${SOCKET_SHAPE:-8b}
    say "$(timeout 60 python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1 | tail -1)"
    llama_checkpoint "$shape"
    budget=$((${SOCKET_BUDGET_S:-500} - SECONDS))
    say "== a client across kill -9, engine.listen ${SOCKET_LISTEN:-supervisor,engine} (bench/socket_restart.py --engine ref, ${SOCKET_KILLS:-warmed=3,pre_gpu=2,warm=1}, budget $budget s at $SECONDS s)"
    # the runs end within the budget; a stop running past it gets 20 s more, then SIGTERM (the running run
    # stops its fastrestartd and keeps its kills), then SIGKILL
    # (the bench's own lines: skipped runs, cut kills, errors, each READY; the table is in the summary)
    run_collect socket $((budget + 35)) socket_restart socket_restart.md \
      timeout -k 10 $((budget + 20)) env PYTHONUNBUFFERED=1 python3 bench/socket_restart.py --engine ref \
      --checkpoint "$ck" --bin "$bundle/bin" --out "$OUT" --listen "${SOCKET_LISTEN:-supervisor,engine}" \
      --kills-per-path "${SOCKET_KILLS:-warmed=3,pre_gpu=2,warm=1}" --chart-path warmed,pre_gpu,warm \
      --budget-s "$budget"
    src=$?
    zcat "$OUT/socket-out.gz" | grep -E '^\[[0-9:]{8}\] ' | tail -40 | tee -a "$summary"
    tar czf "$OUT/socket-logs.tar.gz" -C "$OUT" logs 2>/dev/null
    rm -rf "$OUT/logs"
    exit $src
    ;;
  arena-snapshot)
    # The KV arena's GPU tests (a killed writer and the next holder's canary; a graph over the arena across
    # a snapshot's unmap and new lease; the reference engine's exchange with --kv-arena), then the
    # vLLM-shaped engine's snapshot without weights and KV cache beside the cold path (VSHAPE_RUNS
    # "snapshot_arena cold"), the whole inside about 570 s.
    rc=0
    say "== the KV arena under torch on cuda:0 (test_arena CudaArenaTorchTest, test_refengine kv-arena exchange)"
    run_pytests 150 python-tests.log "arena GPU tests" test_arena.CudaArenaTorchTest \
      test_refengine.RefEngineTest.test_snapshot_exchange_unmaps_the_kv_arena_and_leases_it_again
    trc=$?
    grep -E '^(killed writer|FAIL|ERROR)|skipped' "$OUT/python-tests.log" | head -10 | tee -a "$summary"
    [ $trc -eq 0 ] || rc=1
    say "== the vLLM-shaped engine: snapshot without weights and KV cache, and cold (bench/gpu_vllm_shape.sh, at $SECONDS s)"
    export VSHAPE_RUNS=${VSHAPE_RUNS:-"snapshot_arena cold"} VSHAPE_PER_KILL_S=${VSHAPE_PER_KILL_S:-25}
    export VSHAPE_BUDGET_S=${VSHAPE_BUDGET_S:-$((555 - SECONDS))}
    deadline=575
    run_collect vshape "$(step_limit 575)" gpu_vllm_shape vshape-summary.txt bench/gpu_vllm_shape.sh || rc=1
    exit $rc
    ;;
  vshape|vshape-smoke|vshape-arena)
    # vshape-smoke: the same script on the tiny shape (a dry run of it, about 3 minutes)
    say "== the vLLM-shaped reference engine on every start path (bench/gpu_vllm_shape.sh)"
    if [ "$mode" = vshape-smoke ]; then
      export VSHAPE_SHAPE=${VSHAPE_SHAPE:-tiny} VSHAPE_FLAGS=${VSHAPE_FLAGS:---max-model-len 2048}
    fi
    [ "$mode" = vshape-arena ] && export VSHAPE_RUNS=${VSHAPE_RUNS:-"warmed_arena cold"}
    run_collect vshape "${VSHAPE_TIMEOUT_S:-540}" gpu_vllm_shape vshape-summary.txt bench/gpu_vllm_shape.sh
    exit
    ;;
  tp|tp-smoke)
    rc=0
    if [ "$mode" = tp-smoke ]; then
      say "== the reference engine's tensor parallel test under torch (test_refengine, TP=2 on cuda:0)"
      run_pytests 150 python-tests.log "test_refengine (tensor parallel)" \
        test_refengine.RefEngineTest.test_tensor_parallel_2_on_one_gpu_attaches_both_shards_or_neither || rc=1
      export TP_SHAPE=tiny TP2_KILLS=${TP2_KILLS:-0,1} TP1_KILLS=${TP1_KILLS:-2} TP_BUDGET_S=${TP_BUDGET_S:-220}
    fi
    say "== tensor parallel reference engine on one GPU (bench/gpu_tp.sh)"
    run_collect tp 405 gpu_tp tp-summary.txt bench/gpu_tp.sh || rc=1
    exit $rc
    ;;
  tests|tests-native|tests-torch|tests-vllm)
    # tests: the three parts in one run (longer than one device call); each part alone fits one.
    rc=0
    if [ "$mode" = tests ] || [ "$mode" = tests-native ]; then
      native_tests || rc=1
    fi
    if [ "$mode" = tests ] || [ "$mode" = tests-torch ]; then
      say "== Python tests with torch (binding, torch, reference engine, KV arena, batched engine; at $SECONDS s)"
      # shellcheck disable=SC2086  # TESTS_TORCH_MODULES: a list of unittest names, split on purpose
      run_pytests "${TESTS_TORCH_TIMEOUT_S:-540}" python-tests.log "python tests" \
        ${TESTS_TORCH_MODULES:-test_binding test_torch test_refengine test_arena test_refengine_batch} || rc=1
      grep -E '(FAIL|ERROR|skipped)' "$OUT/python-tests.log" | head -20 | tee -a "$summary"
    fi
    if [ "$mode" = tests ] || [ "$mode" = tests-vllm ]; then
      say "== vLLM plugin (torch, cuda:0; at $SECONDS s)"
      run_collect plugin "${TESTS_VLLM_TIMEOUT_S:-540}" gpu_vllm_plugin summary_vllm_plugin.txt \
        python/tests/gpu_vllm_plugin.sh || rc=1
    fi
    exit $rc
    ;;
  e2e|e2e-smoke)
    say "== Python tests with torch (binding, torch, reference engine)"
    run_pytests 0 python-tests.log "python tests" test_binding test_torch test_refengine
    prc=$?
    grep -E '(FAIL|ERROR|skipped)' "$OUT/python-tests.log" | head -20 | tee -a "$summary"
    size=full
    [ "$mode" = e2e-smoke ] && size=small
    read -r -a extra <<<"${E2E_ARGS:-}"
    say "== bench/e2e_restart.py --size $size ${extra[*]}"
    PYTHONUNBUFFERED=1 python3 bench/e2e_restart.py --out "$OUT" --size "$size" "${extra[@]}" 2>&1 | tee "$OUT/e2e.log"
    erc=${PIPESTATUS[0]}
    say "e2e exit $erc"
    [ $prc -eq 0 ] && [ $erc -eq 0 ]
    exit
    ;;
esac

cuda_tests
say "== benchmark ($mode)"
case "$mode" in
  smoke) args=(--scale 0.01 --ckpt /var/tmp/fr-llama8b-small) ;;
  *) args=() ;;
esac
# BENCH_ARGS: extra flags for bench/h200_weights.py (e.g. --skip-safetensors when those figures are known).
read -r -a extra <<<"${BENCH_ARGS:-}"
args+=("${extra[@]}")
PYTHONUNBUFFERED=1 python3 bench/h200_weights.py --out "$OUT" "${args[@]}" 2>&1 | tee "$OUT/bench.log"
brc=${PIPESTATUS[0]}
grep -vE '^(Traceback|  )' "$OUT/bench.log" >>"$summary"
say "benchmark exit $brc"
say "== supervisor on the GPU (fastrestartd + tinyengine CUDA + weightd cuda)"
bench/gpu_supervisor.sh "$OUT" "${SUP_SIZE:-4G}" 5 2>&1 | tee -a "$summary"
[ $failed -eq 0 ] && [ $brc -eq 0 ]

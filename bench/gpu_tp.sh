#!/usr/bin/env bash
# Tensor parallel reference engine on ONE GPU (docs/refengine.md "Tensor parallel"; docs/bench-notes.md):
# fastrestartd (gpus = ["0"], CUDA weight daemon, weights.mode zero_copy, no [weights.key]: the first start
# misses, loads every rank's shard from disk and publishes it) supervising python/refengine on the 16 GB
# Llama-3.1-8B-shaped checkpoint (bench/gen_llama_checkpoint.py), two runs:
#   tp2   --tensor-parallel-size 2 --share-device --dist-backend gloo: both ranks on GPU 0 (NCCL refuses two
#         ranks on one GPU); cold, then kill -9 of rank 0 (TP2_KILLS, default "0,0,1,1": rank 0 twice, then
#         rank 1 twice): each restart must attach both shards, the oracle logits bitwise those of the cold
#         start, a killed rank 1 named in the log by rank 0, GPU memory flat over the cycles
#   tp1   --tensor-parallel-size 1 through the same code (sliced loader, /stats tensor_parallel): cold, then
#         TP1_KILLS (default 5) kill -9 of the engine, each a warm attach
#   tp2nccl  (two GPUs; not in the default runs) gpus = ["0", "1"], --tensor-parallel-size 2 over NCCL, one
#         daemon per GPU: TP2NCCL_KILLS (default rank 0 and rank 1 alternately, 10 kills); TP_RUNS=tp2nccl
# bench/tp_cycles.py drives each run; per-entry held bytes come from fastrestart-weightctl status (one entry
# per tp_rank in GPU 0's daemon).
#
# usage (repository root, .bundle/ from scripts/gpu-bundle.sh carried; scripts/gpu-run.sh tp): bench/gpu_tp.sh
# TP_RUNS ("tp2 tp1"), TP_BUDGET_S (330: a run whose limit would end past it is cut to what is left, or skipped
# under 60 s), TP_SHAPE (8b; tiny for a dry run), TP_WORK (/var/tmp/frtp: checkpoint, configs, logs). Every step
# is under a timeout.
# Results: $OUT/tp-summary.txt, $OUT/tp-results.json (every run's raw measurements), $OUT/tp-logs.tar.gz
# (fastrestartd's logs with the engine's output, the configs, the status at the end).
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_setup gpu_tp tp-summary.txt
budget=${TP_BUDGET_S:-330}
runs=${TP_RUNS:-"tp2 tp1"}
TP2_KILLS=${TP2_KILLS:-0,0,1,1}
TP1_KILLS=${TP1_KILLS:-5}

w=${TP_WORK:-/var/tmp/frtp}
rm -rf "$w/sup"
mkdir -p "$w/sup" "$OUT/tp"
res=$OUT/tp

bench_machine "$runs" "$budget"

say "== checkpoint"
ck=$w/llama-${TP_SHAPE:-8b}
if [ "${TP_SHAPE:-8b}" = 8b ] && grep -qs '"num_hidden_layers": 32' /var/tmp/frstandby/llama/config.json; then
  ck=/var/tmp/frstandby/llama  # bench/gpu_standby.sh's, when this machine ran it
elif [ ! -f "$ck/config.json" ]; then
  t0=$(date +%s)
  timeout 200 python3 "$root/bench/gen_llama_checkpoint.py" "$ck" --shape "${TP_SHAPE:-8b}" >/dev/null 2>&1 ||
    { say "gen_llama_checkpoint failed or timed out"; runs=""; }
  say "checkpoint (${TP_SHAPE:-8b}): $(du -sh "$ck" 2>/dev/null | cut -f1) in $(($(date +%s) - t0)) s"
fi

# config RUN PORT: a fastrestartd config on stdout
config() {
  local run=$1 port=$2 d=$w/sup/$1 tpflags gpus='["0"]'
  case "$run" in
    tp2) tpflags='"--tensor-parallel-size", "2", "--share-device", "--dist-backend", "gloo"' ;;
    tp1) tpflags='"--tensor-parallel-size", "1"' ;;
    tp2nccl) tpflags='"--tensor-parallel-size", "2", "--dist-backend", "nccl"'; gpus='["0", "1"]' ;;
  esac
  fastrestartd_toml "$run" "$port" "$d" "$gpus" cuda "$ck" \
    "\"$(command -v python3)\", \"$root/python/refengine/fastrestart_refengine.py\", \"serve\", \"$ck\", \"--max-num-seqs\", \"1\", \"--enforce-eager\"" \
    "\"--load-format\", \"fastrestart\", \"--fastrestart-socket-dir\", \"$d/run\", $tpflags" '["warm", "cold"]'
}

port=8500
for run in $runs; do
  case "$run" in
    tp2) tpn=2; devices=cuda:0; kills=$TP2_KILLS; lim=$((90 + 35 * $(tr ',' '\n' <<<"$kills" | grep -c .))) ;;
    tp1) tpn=1; devices=cuda:0; kills=$(seq -s, 1 "$TP1_KILLS" | sed 's/[0-9]\+/0/g'); lim=$((70 + 25 * TP1_KILLS)) ;;
    tp2nccl) tpn=2; devices=cuda:0,cuda:1; kills=${TP2NCCL_KILLS:-0,1,0,1,0,1,0,1,0,1}
      lim=$((90 + 30 * $(tr ',' '\n' <<<"$kills" | grep -c .))) ;;
    *) say "unknown run $run (tp2, tp1, tp2nccl)"; continue ;;
  esac
  left=$((budget - $(elapsed)))
  if [ "$left" -lt 60 ]; then
    say "== $run: SKIPPED (time budget: $(elapsed) s of $budget s used)"
    continue
  fi
  [ "$lim" -gt "$left" ] && lim=$left
  say "== $run: TP=$tpn, kill -9 of ranks [$kills] (limit $lim s, at $(elapsed) s)"
  port=$((port + 1))
  d=$w/sup/$run
  mkdir -p "$d"
  config "$run" "$port" >"$d/fastrestart.toml"
  fastrestartd_start "$d"
  timeout "$lim" python3 "$root/bench/tp_cycles.py" --socket "$d/ctl/s.ctl" --log "$log" --port "$port" \
    --model "$run" --tp "$tpn" --kills "$kills" --socket-dir "$d/run" --devices "$devices" --out "$res/$run.json" \
    --pid "$sup" >"$d/cycles.out" 2>&1
  rc=$?
  sed 's/^/  /' "$d/cycles.out" | tail -n 12 | tee -a "$summary"
  [ $rc -eq 124 ] && say "  (cut at its limit of $lim s)"
  timeout 20 fastrestartctl --socket "$d/ctl/s.ctl" status >"$d/status.txt" 2>&1
  timeout 20 fastrestartctl --socket "$d/ctl/s.ctl" daemons >"$d/daemons.json" 2>&1
  say "  daemons (gpu, state, held bytes, entries): $(timeout 20 python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
rows = j if isinstance(j, list) else j.get("daemons", [])
print([(x.get("gpu"), x.get("state"), x.get("held_bytes"), x.get("entries")) for x in rows])' "$d/daemons.json" 2>&1 | tail -1)"
  if ! fastrestartd_stop 30; then
    say "  fastrestartd did not stop in 30 s: SIGKILL, and to what it started (their command lines name $d)"
    kill -KILL "$sup"
    pkill -KILL -f -- "$d/" 2>/dev/null
  fi
  wait "$sup" 2>/dev/null
  say "  fastrestartd exit $? ($(grep -c 'READY: path' "$log") READY lines; $(grep -c 'tensor parallel: rank [0-9]* (pid' "$log") worker deaths named)"
  say "  GPU used after stop: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader | tr '\n' ' ')"
done

say "== summary (kill to READY: from the kill(2) this bench sent to fastrestartd's READY stamp; reap: status last_start.since_previous_exit_s; at $(elapsed) s)"
timeout 30 python3 - "$res" "$OUT/tp-results.json" <<'PY' | tee -a "$summary"
import glob, json, os, sys
allres = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    allres[os.path.basename(f)[:-5]] = json.load(open(f))
for name, r in allres.items():
    s = r.get("summary") or {}
    kr, rr = s.get("kill_to_ready_s") or {}, s.get("reap_to_ready_s") or {}
    print(f"{name}: n={s.get('n')} kill to READY median={kr.get('median')} s max={kr.get('max')} s (reap to READY median={rr.get('median')} s) "
          + " ".join(f"{k}={v}" for k, v in s.items() if k.endswith("_kill_median_s"))
          + f" cold={s.get('cold_paths')} all_attached={s.get('all_attached')} oracle_mismatches={s.get('oracle_mismatches')}"
          + f" logits={str(s.get('logits_sha256'))[:16]} gpu_used_mib(first,last,max,min)={s.get('gpu_used_mib_first_last_max_min')}"
          + f" rank_weight_bytes={s.get('rank_weight_bytes')}")
    print(f"{name}: held {json.dumps(s.get('held_last'))}")
    for e in r.get("errors", []):
        print(f"{name}: ERROR {e}")
ok = bool(allres) and all(not r.get("errors") and (r.get("summary") or {}).get("n") for r in allres.values())
print("result:", "ok" if ok else "FAILED")
json.dump(allres, open(sys.argv[2], "w"), indent=1)
sys.exit(0 if ok else 1)
PY
prc=${PIPESTATUS[0]}
tar czf "$OUT/tp-logs.tar.gz" -C "$w" sup 2>/dev/null
rm -rf "$res"
say "== done in $(elapsed) s (results: $OUT/tp-results.json, logs: $OUT/tp-logs.tar.gz)"
exit "$prc"

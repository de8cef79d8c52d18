#!/usr/bin/env bash
# Standby benchmark on the GPU machine (docs/standby.md; docs/bench-notes.md "Standby engines"):
# fastrestartd supervising the 16 GB PyTorch reference engine (Llama-3.1-8B shape, python/refengine) and the
# 16 GB tiny engine (CUDA forward) on GPU 0, CUDA weight daemon, weights.mode zero_copy. For each start path
# it kill -9s the engine N times and times each restart from the kill(2) (bench/standby_cycles.py):
#   standby warmed     restart.start = ["standby", "warm", "cold"], [standby] level = "warmed"
#   standby warmed + --cuda-graph (reference engine only: its decode step captured before the gate)
#   standby pre_gpu    the same with level = "pre_gpu"
#   warm               restart.start = ["warm", "cold"]
#   cold               restart.start = ["cold"]
# plus, on the standby paths, the parked standby's GPU memory (nvidia-smi for its pid; 0 expected for
# pre_gpu) and the GPU's used memory before every kill (flat over the cycles = nothing leaks), and on every
# path the oracle: the first READY of an engine sets the reference completion of the oracle prompt (and,
# for the reference engine, the SHA-256 of its logits); every later READY must match it, and its one-token
# text is the readiness.expect_text of that engine's later runs (fastrestartd checks it on every start).
#
# usage (repository root, .bundle/ from scripts/gpu-bundle.sh carried; scripts/gpu-run.sh standby):
#   bench/gpu_standby.sh
# Counts (kill -9 per path; a standby cycle of the reference engine costs ~15 s, the time its next standby
# needs to import torch and park, so its defaults are lower to fit the 9-minute budget):
#   TINY_STANDBY_KILLS=10 TINY_WARM_KILLS=3 TINY_COLD_KILLS=2
#   REF_STANDBY_KILLS=5 REF_GRAPH_KILLS=3 REF_PREGPU_KILLS=3 REF_WARM_KILLS=1 REF_COLD_KILLS=1
# STANDBY_RUNS: which runs, in order (default below: the most wanted first); STANDBY_BUDGET_S (520): a run
# whose time limit would end past it is skipped and says so; STANDBY_SHAPE (8b) / STANDBY_TINY_SIZE (16G):
# the checkpoints (tiny / 1G for a dry run); STANDBY_DEVICE=cpu: the tiny engine's CPU forward on the host
# backend (a dry run of the script without a GPU; the reference engine needs CUDA).
# Results: $OUT/standby-summary.txt, $OUT/standby-results.json (every run's raw measurements),
# $OUT/standby-logs.tar.gz (fastrestartd's logs with the engines' output, the configs).
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_setup gpu_standby standby-summary.txt
budget=${STANDBY_BUDGET_S:-520}

TINY_STANDBY_KILLS=${TINY_STANDBY_KILLS:-10}
TINY_WARM_KILLS=${TINY_WARM_KILLS:-3}
TINY_COLD_KILLS=${TINY_COLD_KILLS:-2}
REF_STANDBY_KILLS=${REF_STANDBY_KILLS:-5}
REF_GRAPH_KILLS=${REF_GRAPH_KILLS:-3}
REF_PREGPU_KILLS=${REF_PREGPU_KILLS:-3}
REF_WARM_KILLS=${REF_WARM_KILLS:-1}
REF_COLD_KILLS=${REF_COLD_KILLS:-1}
device=${STANDBY_DEVICE:-cuda:0}
if [ "$device" = cpu ]; then gpus='[]'; backend=host; else gpus='["0"]'; backend=cuda; fi
runs=${STANDBY_RUNS:-"ref:warmed tiny:warmed ref:pre_gpu tiny:pre_gpu ref:warmed-graph tiny:warm ref:warm tiny:cold ref:cold"}

w=/var/tmp/frstandby
rm -rf "$w/sup" "$w/ref-oracle.json" "$w/tiny-oracle.json"
mkdir -p "$w/sup" "$OUT/standby"
res=$OUT/standby

bench_machine "$runs" "$budget"

say "== checkpoints"
if [[ " $runs" == *" ref:"* ]] && [ ! -f "$w/llama/config.json" ]; then
  t0=$(date +%s)
  timeout 180 python3 "$root/bench/gen_llama_checkpoint.py" "$w/llama" --shape "${STANDBY_SHAPE:-8b}" >/dev/null 2>&1 ||
    { say "gen_llama_checkpoint failed"; runs=$(tr ' ' '\n' <<<"$runs" | grep -v '^ref:' | tr '\n' ' '); }
  say "reference engine checkpoint (${STANDBY_SHAPE:-8b}): $(du -sh "$w/llama" 2>/dev/null | cut -f1) in $(($(date +%s) - t0)) s"
fi
if [[ " $runs" == *" tiny:"* ]] && [ ! -d "$w/tiny" ]; then
  t0=$(date +%s)
  timeout 180 fastrestart-tinyengine gen --out "$w/tiny" --size "${STANDBY_TINY_SIZE:-16G}" --dtype BF16 >/dev/null 2>&1 ||
    { say "tinyengine gen failed"; runs=$(tr ' ' '\n' <<<"$runs" | grep -v '^tiny:' | tr '\n' ' '); }
  say "tiny engine checkpoint (${STANDBY_TINY_SIZE:-16G}): $(du -sh "$w/tiny" 2>/dev/null | cut -f1) in $(($(date +%s) - t0)) s"
fi

# config ENGINE PATH PORT: a fastrestartd config for one run on stdout
config() {
  local eng=$1 path=$2 port=$3 d=$w/sup/$1-$2 start level="" extra="" key="" expect=""
  case "$path" in
    warmed|warmed-graph) start='["standby", "warm", "cold"]'; level=warmed ;;
    pre_gpu) start='["standby", "warm", "cold"]'; level=pre_gpu ;;
    warm) start='["warm", "cold"]' ;;
    cold) start='["cold"]' ;;
  esac
  [ "$path" = warmed-graph ] && extra=', "--cuda-graph"'
  if [ "$eng" = ref ]; then
    command="\"$(command -v python3)\", \"$root/python/refengine/fastrestart_refengine.py\", \"serve\", \"$w/llama\", \"--max-num-seqs\", \"1\", \"--enforce-eager\""
    flags="\"--load-format\", \"fastrestart\", \"--fastrestart-socket-dir\", \"$d/run\"$extra"
    key='[weights.key]
arch = "LlamaForCausalLM"
dtype = "BF16"
engine = "fastrestart-refengine 0.1.0"
tp_size = "1"
tp_rank = "0"'
    ck=$w/llama
  else
    command="\"$(command -v fastrestart-tinyengine)\", \"serve\", \"$w/tiny\""
    flags="\"--device\", \"$device\", \"--load-format\", \"fastrestart\", \"--fastrestart-socket-dir\", \"$d/run\""
    ck=$w/tiny
  fi
  local standby_section=""
  [ -n "$level" ] && standby_section=$(printf '[standby]\nlevel = "%s"' "$level")
  if [ -f "$w/$eng-oracle.json" ]; then
    expect="expect_text = $(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["text_1"]))' "$w/$eng-oracle.json")"
  fi
  fastrestartd_toml "$eng" "$port" "$d" "$gpus" "$backend" "$ck" "$command" "$flags" "$start" "$key" "$expect" \
    "$standby_section"
}

# limit ENGINE PATH KILLS: the run's time limit in seconds (start, first standby, the kills, the stop)
limit() {
  local per first
  case "$1:$2" in
    tiny:cold) first=60; per=25 ;;
    tiny:warm) first=60; per=10 ;;
    tiny:*) first=70; per=8 ;;
    ref:cold) first=120; per=60 ;;
    ref:warm) first=120; per=35 ;;
    ref:*) first=150; per=30 ;;
  esac
  echo $((first + per * $3))
}

port=8400
for run in $runs; do
  eng=${run%%:*}; path=${run#*:}
  case "$eng:$path" in
    tiny:warmed|tiny:pre_gpu) kills=$TINY_STANDBY_KILLS ;;
    tiny:warm) kills=$TINY_WARM_KILLS ;;
    tiny:cold) kills=$TINY_COLD_KILLS ;;
    ref:warmed) kills=$REF_STANDBY_KILLS ;;
    ref:warmed-graph) kills=$REF_GRAPH_KILLS ;;
    ref:pre_gpu) kills=$REF_PREGPU_KILLS ;;
    ref:warm) kills=$REF_WARM_KILLS ;;
    ref:cold) kills=$REF_COLD_KILLS ;;
    *) say "unknown run $run (ENGINE:PATH, ENGINE ref|tiny, PATH warmed|warmed-graph|pre_gpu|warm|cold)"; continue ;;
  esac
  lim=$(limit "$eng" "$path" "$kills")
  if [ $(($(elapsed) + lim)) -gt "$budget" ]; then
    say "== $eng $path: SKIPPED (time budget: ${lim} s limit, $(elapsed) s of $budget s used)"
    continue
  fi
  say "== $eng $path: $kills x kill -9 (limit $lim s, at $(elapsed) s)"
  port=$((port + 1))
  d=$w/sup/$eng-$path
  mkdir -p "$d"
  config "$eng" "$path" "$port" >"$d/fastrestart.toml"
  fastrestartd_start "$d"
  timeout "$lim" python3 "$root/bench/standby_cycles.py" --socket "$d/ctl/s.ctl" --log "$log" --port "$port" \
    --model "$eng" --path "$path" --kills "$kills" --out "$res/$eng-$path.json" --reference "$w/$eng-oracle.json" \
    --pid "$sup" >"$d/cycles.out" 2>&1
  rc=$?
  tail -n "$((kills + 3))" "$d/cycles.out" | sed 's/^/  /' | tee -a "$summary"
  [ $rc -eq 124 ] && say "  (cut at its limit of $lim s)"
  timeout 20 fastrestartctl --socket "$d/ctl/s.ctl" status >"$d/status.txt" 2>&1
  fastrestartd_stop 60 || { say "  fastrestartd did not stop in 60 s: SIGKILL"; kill -KILL "$sup"; }
  wait "$sup" 2>/dev/null
  say "  fastrestartd exit $? ($(grep -c 'READY: path' "$log") READY lines; log: $(grep -cE 'standby: (parked|released)' "$log") standby lines)"
  # what is left on the GPU once fastrestartd stopped its engine, standby and daemons (0 expected)
  say "  GPU used after stop: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader | head -1)"
done

say "== summary (kill -> READY: from the kill(2) this bench sent to fastrestartd's READY stamp; kill -> answer: to the first answered request sent after the kill; READY-1st byte: READY minus the first byte of an answer to a request sent after the kill; reap -> READY: status last_start.since_previous_exit_s, a breakdown row; at $(elapsed) s)"
python3 - "$res" <<'PY' | tee -a "$summary"
import glob, json, os, sys
rows, allres = [], {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    name = os.path.basename(f)[:-5]
    r = json.load(open(f)); allres[name] = r
    s = r.get("summary") or {}
    rows.append((name, s))
def mm(s, key, sign=""):
    x = s.get(key) or {}
    return f"{x['median']:{sign}.3f}/{x['max']:{sign}.3f}" if x else "-"
print(f"{'run':22} {'n':>3} {'kill->READY med/max s':>22} {'kill->answer med/max s':>23} {'READY-1st byte med/max s':>25} {'reap->READY med/max s':>22} {'paths':18} {'parked MiB':>12} {'GPU used first/last MiB':>24} {'oracle':>8}")
for name, s in rows:
    pk = ",".join(str(x) for x in s.get("parked_mib", [])) or "-"
    gu = "/".join(str(x) for x in s.get("gpu_used_parked_first_last_mib", [])) or "-"
    orc = "-" if not s.get("n") else "ok" if s.get("oracle_mismatches") == 0 else f"{s['oracle_mismatches']} bad"
    print(f"{name:22} {s.get('n', 0):>3} {mm(s, 'kill_to_ready_s'):>22} {mm(s, 'kill_to_first_answer_s'):>23} {mm(s, 'ready_minus_first_byte_s', '+'):>25} {mm(s, 'reap_to_ready_s'):>22} {','.join(s.get('paths', [])):18} {pk:>12} {gu:>24} {orc:>8}")
for name, r in allres.items():
    for e in r.get("errors", []):
        print(f"{name}: ERROR {e}")
    if (r.get("summary") or {}).get("graph_checks", ["None"]) not in (["None"], []):
        print(f"{name}: graph check {r['summary']['graph_checks']}")
json.dump(allres, open(os.path.join(os.path.dirname(sys.argv[1]), "standby-results.json"), "w"), indent=1)
PY
tar czf "$OUT/standby-logs.tar.gz" -C "$w" sup 2>/dev/null
rm -rf "$res"
say "== done in $(elapsed) s (results: $OUT/standby-results.json, logs: $OUT/standby-logs.tar.gz)"

#!/usr/bin/env bash
# The batched reference engine standalone on one GPU, no daemon (disk load): a smoke run of
# docs/refengine.md "Batched serving". For each engine flag set in VSHAPE_SMOKE_RUNS it starts the engine,
# waits for /health, saves /stats, runs bench/vshape_load.py (tokens/s at 1 and N clients, batch-1 token
# agreement) and stops it. Results: $OUT/vshape-smoke.json (one object per run), $OUT/vshape-smoke.log.
#   VSHAPE_SHAPE=tiny|8b (tiny)  VSHAPE_CLIENTS=1,64  VSHAPE_MAX_TOKENS=32
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/vshape-out}
mkdir -p "$OUT"
w=${VSHAPE_DIR:-/var/tmp/vshape}
shape=${VSHAPE_SHAPE:-tiny}
clients=${VSHAPE_CLIENTS:-1,64}
maxtok=${VSHAPE_MAX_TOKENS:-32}
log=$OUT/vshape-smoke.log
res=$OUT/vshape-smoke.json
: >"$res"
mkdir -p "$w"
if [ ! -f "$w/$shape/config.json" ]; then
  timeout 150 python3 "$root/bench/gen_llama_checkpoint.py" "$w/$shape" --shape "$shape" >>"$log" 2>&1 ||
    { echo "gen_llama_checkpoint failed" | tee -a "$log"; exit 1; }
fi
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
port=8600
IFS=';' read -r -a runs <<<"${VSHAPE_SMOKE_RUNS:---max-model-len 2048;--max-num-seqs 1 --enforce-eager}"
for flags in "${runs[@]}"; do
  port=$((port + 1))
  echo "== run: $flags" | tee -a "$log"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086  # the flags are words
  timeout "${VSHAPE_RUN_S:-150}" python3 "$root/python/refengine/fastrestart_refengine.py" serve "$w/$shape" \
    --port "$port" --served-model-name m $flags >>"$log" 2>&1 &
  pid=$!
  ok=0
  for _ in $(seq 1 1200); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then ok=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  ready=$(python3 -c "import sys,time; print(round(time.time()-float(sys.argv[1]),3))" "$t0")
  if [ "$ok" != 1 ]; then
    echo "{\"flags\": \"$flags\", \"ready\": false}" >>"$res"
    echo "not ready: $flags" | tee -a "$log"
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    continue
  fi
  stats=$(curl -sf "http://127.0.0.1:$port/stats")
  load=$(timeout 120 python3 "$root/bench/vshape_load.py" --port "$port" --clients "$clients" --max-tokens "$maxtok" \
    --rounds 2 --reference 8 2>>"$log" || echo null)
  stats2=$(curl -sf "http://127.0.0.1:$port/stats" || echo '{}')
  python3 -c "
import json, sys
s, l, s2 = json.loads(sys.argv[2]), json.loads(sys.argv[3] or 'null'), json.loads(sys.argv[4])
print(json.dumps({'flags': sys.argv[1], 'ready': True, 'wall_to_ready_s': float(sys.argv[5]), 'phases': s['startup']['phases'],
  'ready_s': s['startup']['ready_s'], 'oracle': s['oracle'], 'batch': s2.get('batch'), 'cuda_graph': s.get('cuda_graph'),
  'load': l}))" "$flags" "$stats" "$load" "$stats2" "$ready" >>"$res" 2>>"$log"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader >>"$log" 2>&1
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
done
cat "$res"

#!/usr/bin/env bash
# Every start path on the reference engine shaped like vLLM (docs/refengine.md "Batched serving";
# docs/bench-notes.md): fastrestartd supervising the batched PyTorch reference engine on GPU 0 (the 16 GB
# Llama-3.1-8B shape by default), memory.utilization 0.9 (the engine's --gpu-memory-utilization is that
# minus the daemon's pool, and minus a warmed standby's reserve), weights.mode zero_copy, vLLM's defaults for
# the rest (--max-num-seqs 1024 on an H200, 51 CUDA graphs, the KV cache filling the share). Per path it
# kill -9s the engine N times (bench/standby_cycles.py: kill to READY, the oracle on every start, a parked
# standby's GPU memory), then measures the live engine: its startup phases (/stats), its GPU memory
# (nvidia-smi for its pid), its KV cache and graphs, and tokens/s at 1 and --max-num-seqs concurrent clients
# (bench/vshape_load.py, with how many answers under load differ from the same prompt alone).
#   cold      restart.start = ["cold"]
#   warm      restart.start = ["warm", "cold"]
#   pre_gpu   restart.start = ["standby", "warm", "cold"], [standby] level = "pre_gpu"
#   warmed    the same with level = "warmed": this engine's warmed gate is after the weights and the oracle,
#             before the profile, the KV cache and the graphs (a second KV cache of the share does not fit
#             beside the live engine's), so those run after the release
#   warmed_arena  the same with level = "warmed" and --kv-arena kv (docs/refengine.md, "The KV cache in an
#             arena"): the KV cache is the weight daemon's arena; the standby profiles, captures its graphs over
#             the arena's placeholder and parks after them; at its release it leases the arena (waiting for the
#             dead engine's exit) and maps it at the same address. Recorded besides the rest: the lease wait
#             and swap_in (the release timeline), fallbacks to a KV cache of its own, the KV cache against
#             the cold path's (run cold in the same call for that), the parked standby's GPU memory.
#             memory.check_free is off on it, as when its figures were measured (docs/bench-notes.md): the
#             arena's accounting in fastrestartd's free-memory check (docs/supervisor.md, "KV arenas") came
#             after and has not been run on the GPU yet.
#   snapshot_arena  restart.start = ["snapshot", "cold"] with --kv-arena kv: after the first start a
#             `fastrestartctl snapshot create` (docs/snapshot.md, "Snapshots without the KV cache": the weights
#             and the KV arena are left out of the artifact, the graphs and the engine's own memory are in it),
#             then each kill -9 restores it: death to READY, the artifact's size, each restore's steps (the
#             arena's lease wait for the dead engine's exit among them). CRIU is the bundle's (scripts/gpu-bundle.sh).
#
# usage (repository root, .bundle/ from scripts/gpu-bundle.sh carried; scripts/gpu-run.sh vshape):
#   bench/gpu_vllm_shape.sh
# Every kill is timed from the kill(2) (bench/standby_cycles.py: kill -> READY, kill -> the first answered
# request of VSHAPE_CLIENTS_KILL clients (4) sending requests across it, kill -> the first byte of an answer
# to such a request and READY minus that first byte, per kill, and the breakdown kill -> reap -> release ->
# lease -> swap_in -> READY).
# VSHAPE_RUNS ("warm pre_gpu warmed cold"; warmed_arena on request: scripts/gpu-run.sh vshape-arena runs
# "warmed_arena cold"), VSHAPE_<PATH>_KILLS (1 each: COLD, WARM, PREGPU, WARMED; WARMEDARENA 2),
# VSHAPE_PER_KILL_S (45: each kill's share of a run's limit; a `warmed_arena` cycle, the standby's re-warm
# included, took about 20 s on the H200), VSHAPE_BUDGET_S (470: a run whose limit would end past it is skipped and says so; with the 16 GB
# checkpoint to generate, about three paths at one kill each fit: run the rest, or more kills, in a second
# call, e.g. VSHAPE_RUNS="warm pre_gpu warmed" then VSHAPE_RUNS="cold" VSHAPE_WARM_KILLS=...), VSHAPE_SHAPE (8b; tiny for a dry run), VSHAPE_FLAGS (more engine flags, e.g.
# "--max-model-len 2048" on the tiny shape, whose 1 KiB positions would otherwise give each slot the
# config's 131072), VSHAPE_CLIENTS (default 1,<the engine's max_num_seqs>), VSHAPE_MAX_TOKENS (64),
# VSHAPE_LOAD_REPEAT (5: tokens/s measured that many times per client count on the live engine after each
# path's last restart; the summary gives the median with its spread and says whether each path's median lies
# within cold's spread), VSHAPE_LISTEN (empty: the engine binds the port; supervisor: fastrestartd holds it; private: and checks each
# engine on its private endpoint).
# Results: $OUT/vshape-summary.txt, $OUT/vshape-results.json, $OUT/vshape-logs.tar.gz.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_setup gpu_vllm_shape vshape-summary.txt
budget=${VSHAPE_BUDGET_S:-470}
runs=${VSHAPE_RUNS:-"warm pre_gpu warmed cold"}
shape=${VSHAPE_SHAPE:-8b}
maxtok=${VSHAPE_MAX_TOKENS:-64}
repeat=${VSHAPE_LOAD_REPEAT:-5}
w=/var/tmp/frvshape
rm -rf "$w/sup" "$w/oracle.json"
mkdir -p "$w/sup" "$OUT/vshape"
res=$OUT/vshape

bench_machine "$runs" "$budget"
say "== checkpoint"
if [ ! -f "$w/llama-$shape/config.json" ]; then
  t0=$(date +%s)
  timeout 180 python3 "$root/bench/gen_llama_checkpoint.py" "$w/llama-$shape" --shape "$shape" >/dev/null 2>&1 ||
    { say "gen_llama_checkpoint failed"; exit 1; }
  say "Llama checkpoint ($shape): $(du -sh "$w/llama-$shape" | cut -f1) in $(($(date +%s) - t0)) s"
fi

# config PATH PORT: the fastrestartd config of one run on stdout
config() {
  local path=$1 port=$2 d=$w/sup/$1 start level="" extra="" x
  case "$path" in
    cold) start='["cold"]' ;;
    warm) start='["warm", "cold"]' ;;
    pre_gpu|warmed) start='["standby", "warm", "cold"]'; level=$path ;;
    warmed_arena) start='["standby", "warm", "cold"]'; level=warmed; extra=', "--kv-arena", "kv"' ;;
    snapshot_arena) start='["snapshot", "cold"]'; extra=', "--kv-arena", "kv"' ;;
  esac
  for x in ${VSHAPE_FLAGS:-}; do extra="$extra, \"$x\""; done
  local standby_section=""
  [ -n "$level" ] && standby_section=$(printf '[standby]\nlevel = "%s"' "$level")
  [ "$path" = warmed_arena ] && [ "${VSHAPE_ARENA_CHECK_FREE:-false}" = false ] &&
    standby_section=$(printf '%s\n[memory]\ncheck_free = false' "$standby_section")
  [ "$path" = snapshot_arena ] &&
    standby_section=$(printf '[snapshot]\ncriu = "%s"\noracle_tokens = 4' "$(command -v criu)")
  local expect=""
  [ -f "$w/oracle.json" ] &&
    expect="expect_text = $(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["text_1"]))' "$w/oracle.json")"
  # VSHAPE_LISTEN: "supervisor" (fastrestartd holds the port), "private" (and checks each engine on its own
  # loopback endpoint, docs/listen-socket.md), empty: the engine binds the port itself.
  case "${VSHAPE_LISTEN:-}" in
    supervisor) export FR_BENCH_LISTEN=supervisor ;;
    private) export FR_BENCH_LISTEN=supervisor; expect=$(printf '%s\nendpoint = "private"' "$expect") ;;
    *) unset FR_BENCH_LISTEN ;;
  esac
  fastrestartd_toml ref "$port" "$d" '["0"]' cuda "$w/llama-$shape" \
    "\"$(command -v python3)\", \"$root/python/refengine/fastrestart_refengine.py\", \"serve\", \"$w/llama-$shape\"" \
    "\"--load-format\", \"fastrestart\", \"--fastrestart-socket-dir\", \"$d/run\"$extra" "$start" '[weights.key]
arch = "LlamaForCausalLM"
dtype = "BF16"
engine = "fastrestart-refengine 0.1.0"
tp_size = "1"
tp_rank = "0"' "$expect" "$standby_section"
}

# limit PATH KILLS: the run's time limit: the first start (an attach: the daemon preloads [weights.key]),
# the kills, then 60 s for the live engine's load test and the stop
limit() {
  local per=${VSHAPE_PER_KILL_S:-45}
  [ "$1" = cold ] && per=60
  # snapshot_arena: the create (the driver's checkpoint of the engine's own GPU memory, the dump, the
  # first restore) before the kills
  [ "$1" = snapshot_arena ] && { echo $((60 + 60 + per * $2 + 60)); return; }
  echo $((60 + per * $2 + 60))
}

# live PATH PORT: the live engine after the last restart: /stats, its GPU memory, tokens/s
live() {
  local d=$w/sup/$1 port=$2 pid clients n
  timeout 20 fastrestartctl --socket "$d/ctl/s.ctl" status --json >"$res/$1-status.json" 2>/dev/null
  pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["engine"]["pid"])' "$res/$1-status.json" 2>/dev/null)
  timeout 20 curl -sf "http://127.0.0.1:$port/stats" >"$res/$1-stats.json" || echo '{}' >"$res/$1-stats.json"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits >"$res/$1-apps.csv" 2>/dev/null
  echo "${pid:-}" >"$res/$1-pid.txt"
  n=$(python3 -c 'import json,sys; print((json.load(open(sys.argv[1])).get("batch") or {}).get("max_num_seqs") or 1)' "$res/$1-stats.json" 2>/dev/null || echo 1)
  clients=${VSHAPE_CLIENTS:-1,$n}
  timeout $((30 + 15 * repeat)) python3 "$root/bench/vshape_load.py" --port "$port" --clients "$clients" --max-tokens "$maxtok" \
    --rounds 1 --reference 8 --repeat "$repeat" >"$res/$1-load.json" 2>"$d/load.err" || say "  load test failed: $(tail -1 "$d/load.err")"
}

port=8500
for path in $runs; do
  case "$path" in
    cold) kills=${VSHAPE_COLD_KILLS:-1} ;;
    warm) kills=${VSHAPE_WARM_KILLS:-1} ;;
    pre_gpu) kills=${VSHAPE_PREGPU_KILLS:-1} ;;
    warmed) kills=${VSHAPE_WARMED_KILLS:-1} ;;
    warmed_arena) kills=${VSHAPE_WARMEDARENA_KILLS:-2} ;;
    snapshot_arena) kills=${VSHAPE_SNAPSHOTARENA_KILLS:-3} ;;
    *) say "unknown run $path (cold|warm|pre_gpu|warmed|warmed_arena|snapshot_arena)"; continue ;;
  esac
  lim=$(limit "$path" "$kills")
  if [ $(($(elapsed) + lim)) -gt "$budget" ]; then
    say "== $path: SKIPPED (time budget: ${lim} s limit, $(elapsed) s of $budget s used)"
    continue
  fi
  say "== $path: $kills x kill -9 (limit $lim s, at $(elapsed) s)"
  port=$((port + 1))
  d=$w/sup/$path
  mkdir -p "$d"
  config "$path" "$port" >"$d/fastrestart.toml"
  fastrestartd_start "$d"
  timeout "$((lim - 60))" python3 "$root/bench/standby_cycles.py" --socket "$d/ctl/s.ctl" --log "$log" \
    --port "$port" --model ref --path "$path" --kills "$kills" --out "$res/$path.json" \
    --reference "$w/oracle.json" --pid "$sup" --clients "${VSHAPE_CLIENTS_KILL:-4}" >"$d/cycles.out" 2>&1
  rc=$?
  tail -n "$((kills + 3))" "$d/cycles.out" | sed 's/^/  /' | tee -a "$summary"
  [ $rc -eq 124 ] && say "  (cycles cut at their limit)"
  [ "$path" = snapshot_arena ] && grep -h "snapshot prepare: host RSS" "$log" | tail -1 | sed 's/^/  /' | tee -a "$summary"
  [ $rc -ne 124 ] && live "$path" "$port"
  fastrestartd_stop 60 || { say "  fastrestartd did not stop in 60 s: SIGKILL"; kill -KILL "$sup"; }
  wait "$sup" 2>/dev/null
  say "  fastrestartd exit $? ($(grep -c 'READY: path' "$log") READY lines); GPU used after stop: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader | head -1)"
done

say "== summary (kill->READY: from the kill(2) this bench sent to fastrestartd's READY stamp; kill->answer: to the first answered request sent after the kill; kill->1st byte: to the first byte of an answer to a request sent after the kill (the engine began answering; this engine does not stream, so its status line, sent after the generation); READY-1st byte: READY minus that first byte, per kill (positive: READY after it); reap->READY: status last_start.since_previous_exit_s, a breakdown row; phases: the live engine's start; at $(elapsed) s)"
python3 - "$res" "$root/bench" <<'PY' | tee -a "$summary"
import csv, glob, json, os, sys
res = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from fastrestartd_run import first_byte_line
def load(name, default=None):
    try:
        return json.load(open(os.path.join(res, name)))
    except (OSError, ValueError):
        return default
out = {}
def mm(s, key, sign=""):
    x = s.get(key) or {}
    return f"{x['median']:{sign}.3f}/{x['max']:{sign}.3f}" if x else "-"
print(f"{'path':8} {'n':>2} {'kill->READY med/max s':>21} {'kill->answer med/max s':>22} {'kill->1st byte med/max s':>24} "
      f"{'READY-1st byte med/max s':>24} {'reap->READY med/max s':>21} {'oracle':>7} {'engine GiB':>10} {'parked MiB':>10} {'KV GiB':>7} "
      f"{'seqs x pos':>12} {'graphs':>6} {'tok/s 1':>8} {'tok/s N':>9} {'N':>5} {'differ':>6}")
for f in sorted(glob.glob(os.path.join(res, "*.json"))):
    path = os.path.basename(f)[:-5]
    if "-" in path:
        continue
    r = load(path + ".json", {})
    s = r.get("summary") or {}
    st = load(path + "-stats.json", {}) or {}
    lo = load(path + "-load.json", {}) or {}
    pid = open(os.path.join(res, path + "-pid.txt")).read().strip() if os.path.exists(os.path.join(res, path + "-pid.txt")) else ""
    mib = None
    if os.path.exists(os.path.join(res, path + "-apps.csv")):
        for row in csv.reader(open(os.path.join(res, path + "-apps.csv"))):
            if len(row) == 2 and row[0].strip() == pid:
                mib = int(row[1])
    b = st.get("batch") or {}
    kv = b.get("kv_cache") or {}
    g = st.get("cuda_graph") or {}
    runs = lo.get("runs") or []
    one = next((x for x in runs if x["clients"] == 1), {})
    many = max(runs, key=lambda x: x["clients"]) if runs else {}
    orc = "-" if not s.get("n") else "ok" if s.get("oracle_mismatches") == 0 else f"{s['oracle_mismatches']}bad"
    print(f"{path:8} {s.get('n', 0):>2} {mm(s, 'kill_to_ready_s'):>21} {mm(s, 'kill_to_first_answer_s'):>22} "
          f"{mm(s, 'kill_to_first_byte_s'):>24} {mm(s, 'ready_minus_first_byte_s', '+'):>24} {mm(s, 'reap_to_ready_s'):>21} {orc:>7} "
          f"{(mib or 0) / 1024:>10.1f} {','.join(str(x) for x in s.get('parked_mib', [])) or '-':>10} "
          f"{kv.get('bytes', 0) / 2**30:>7.1f} {str(kv.get('slots', '-')) + 'x' + str(kv.get('positions', '-')):>12} "
          f"{g.get('count', '-'):>6} {one.get('tokens_per_s', '-'):>8} {many.get('tokens_per_s', '-'):>9} "
          f"{many.get('clients', '-'):>5} {str(many.get('differ_from_batch1', '-')) + '/' + str(many.get('compared_with_batch1', '-')):>6}")
    if first_byte_line(s):
        print(f"   {first_byte_line(s)}")
    used = [(k.get("parked") or {}).get("gpu_used_mib") for k in r.get("kills", []) if "error" not in k]
    used = [u for u in used if u is not None]
    if len(used) > 1:
        # GPU memory over the cycles: the GPU's used memory with the standby parked, before each kill
        print(f"   GPU used, standby parked, over {len(used)} cycles: first {used[0]}, last {used[-1]}, "
              f"min {min(used)}, max {max(used)} MiB")
    if s.get("image_gb") is not None:
        print(f"   snapshot: artifact {s['image_gb']} GB; restore steps (median s): "
              + " ".join(f"{k[8:-8]}={s[k]}" for k in sorted(s) if k.startswith("restore_") and k.endswith("_median_s"))
              + (f"; GPU used before each kill {s['gpu_used_before_kill_mib']} MiB" if s.get("gpu_used_before_kill_mib") else ""))
    ph = (st.get("startup") or {}).get("phases") or {}
    print("   phases: " + " ".join(f"{k[:-2]}={v:.2f}" for k, v in ph.items() if isinstance(v, (int, float))))
    ka = b.get("kv_arena")
    arena = None
    if ka:
        # The KV cache's memory is the daemon's (nvidia-smi counts it there, not in "engine GiB" above).
        cold_kv = ((load("cold-stats.json", {}) or {}).get("batch") or {}).get("kv_cache") or {}
        ratio = kv.get("bytes", 0) / cold_kv["bytes"] if cold_kv.get("bytes") else None
        lease = ka.get("lease") or {}
        arena = {"source": ka.get("source"), "arena_bytes": ka.get("bytes"), "kv_bytes": kv.get("bytes"),
                 "kv_vs_cold": round(ratio, 4) if ratio else None, "fallback": ka.get("fallback"),
                 "live_lease": lease, "wait_median_s": s.get("kv_arena_wait_median_s"),
                 "wait_max_s": s.get("kv_arena_wait_max_s"), "swap_in_median_s": s.get("kv_arena_swap_in_median_s"),
                 "fallbacks": s.get("kv_arena_fallbacks", [])}
        bd = " -> ".join(f"{n} {(s.get(k) or {}).get('median', '-')}" for n, k in (
            ("kill->reap", "kill_to_reap_s"), ("reap->release", "reap_to_release_s"), ("lease wait", "kv_arena_wait_s"),
            ("swap_in", "kv_arena_swap_in_s"), ("release->READY", "release_to_ready_s")))
        print(f"   breakdown (median s): {bd}")
        print(f"   kv arena: {(ka.get('bytes') or 0) / 2**30:.1f} GiB ({ka.get('source')}), KV vs cold "
              + (f"{ratio:.1%}" if ratio else "- (no cold run)")
              + f"; release: lease wait median {s.get('kv_arena_wait_median_s', '-')} s (max {s.get('kv_arena_wait_max_s', '-')}),"
              f" swap_in {s.get('kv_arena_swap_in_median_s', '-')} s; live engine's lease generation {lease.get('generation', '-')}"
              + (f"; FELL BACK: {ka['fallback']}" if ka.get("fallback") else "")
              + (f"; fallbacks over the kills: {s['kv_arena_fallbacks']}" if s.get("kv_arena_fallbacks") else ""))
    spreads = [f"{x['clients']} clients {x['tokens_per_s']} ({x['spread']['min']}-{x['spread']['max']}, {len(x['tokens_per_s_each'])} times)"
               for x in runs if x.get("spread")]
    if spreads:
        print("   tok/s median (spread): " + "; ".join(spreads))
    out[path] = {"cycles": r, "stats": st, "engine_mib": mib, "load": lo, "kv_arena": arena}
# Throughput after each path against cold's: a path's median inside cold's spread (min-max) at the same
# client count is "within"; the figure is believed only side by side, so only a cold run of this call counts.
cold_runs = {x["clients"]: x for x in ((out.get("cold") or {}).get("load") or {}).get("runs", []) if x.get("spread")}
for path in sorted(p for p in out if p != "cold"):
    verdicts = []
    for x in (out[path].get("load") or {}).get("runs", []):
        c = cold_runs.get(x["clients"])
        if c and x.get("tokens_per_s") is not None:
            lo_, hi = c["spread"]["min"], c["spread"]["max"]
            verdicts.append(f"{x['clients']} clients {x['tokens_per_s']} vs cold {lo_}-{hi}: "
                            + ("within" if lo_ <= x["tokens_per_s"] <= hi else "OUTSIDE"))
    if verdicts:
        print(f"tok/s after {path} against cold's spread: " + "; ".join(verdicts))
json.dump(out, open(os.path.join(os.path.dirname(res), "vshape-results.json"), "w"), indent=1)
PY
tar czf "$OUT/vshape-logs.tar.gz" -C "$w" sup 2>/dev/null
rm -rf "$res"
say "== done in $(elapsed) s (results: $OUT/vshape-results.json, logs: $OUT/vshape-logs.tar.gz)"

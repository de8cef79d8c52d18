#!/usr/bin/env bash
# Writes the seed corpora of the fuzz targets into DIR/<target>/ from real messages in the repository:
# the shipped configs and the TOML in docs/config.md, the JSON messages in docs/protocol.md and
# docs/supervisor.md, the requests fastrestartctl sends, and recorded tinyengine answers (fuzz/seeds/).
# Regenerated on every run, so the seeds follow the docs. Usage: fuzz/make-seeds.sh DIR
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: fuzz/make-seeds.sh DIR}"
rm -rf "$out"
mkdir -p "$out"/{fuzz_frame,fuzz_safetensors,fuzz_config,fuzz_control,fuzz_readiness,fuzz_gate,fuzz_arena_lease}
seed() {  # seed TARGET < content: named by its hash (pipelines run in subshells: no counters)
  local tmp
  tmp=$(mktemp "$out/.seed-XXXXXX")
  cat >"$tmp"
  mv "$tmp" "$out/$1/repo-$(sha1sum <"$tmp" | cut -c1-16)"
}

# Config: every TOML file in the tree, and each ```toml block of docs/config.md.
while IFS= read -r f; do seed fuzz_config <"$f"; done < <(git ls-files '*.toml')
awk '/^```toml/{on=1; buf=""; next} /^```/{if(on){print buf > (dir "/toml-" NR); on=0}; next} on{buf=buf $0 "\n"}' \
  dir="$out/fuzz_config" docs/config.md

# Frames and control requests: each JSON object quoted in backticks or at the start of a line in the docs.
for doc in docs/protocol.md docs/supervisor.md docs/health.md; do
  { grep -oE '`\{[^`]*\}`' "$doc" || true; } | sed 's/^`//; s/`$//' | while IFS= read -r j; do
    printf '%s' "$j" | seed fuzz_frame
    printf '%s' "$j" | seed fuzz_control
  done
  { grep -E '^\{"' "$doc" || true; } | while IFS= read -r j; do printf '%s' "$j" | seed fuzz_frame; done
done
# What fastrestartctl sends (src/supervisor/fastrestartctl_main.cc).
for j in '{"op":"status"}' '{"op":"daemons"}' '{"op":"restart"}' '{"op":"stop-engine"}' '{"op":"start-engine"}' \
  '{"op":"reload","wait":true}' '{"op":"reload","wait":false,"flags":["--threads","3"],"mode":"add"}' \
  '{"op":"reload","wait":true,"flags":"--max-num-seqs 128 --dtype '"'"'bfloat16'"'"'","mode":"replace"}' \
  '{"op":"reload","wait":true,"flags":["--dtype"],"mode":"remove"}'; do
  printf '%s' "$j" | seed fuzz_control
done

# Arena requests and replies (docs/protocol.md, "arena_lease"): each arena object the doc quotes, and near misses.
{ grep -oE '`\{"op":"arena_[^`]*\}`' docs/protocol.md || true; } | sed 's/^`//; s/`$//' | while IFS= read -r j; do
  printf '%s' "$j" | seed fuzz_arena_lease
done
for j in '{"op":"arena_lease","name":"kv","bytes":1073741824,"wait_s":30}' '{"op":"arena_lease","name":"kv","bytes":1125899906842625}' \
  '{"op":"arena_release","name":"kv.0-_A"}' '{"op":"arena_lease","name":"","bytes":1,"wait_s":86400.5}' \
  '{"ok":true,"name":"kv","bytes":4096,"pool_bytes":4096,"backend":"host","created":true,"resized":false,"zeroed":false,"waited_s":0,"leases":1,"generation":1,"previous_holder_pid":null}'; do
  printf '%s' "$j" | seed fuzz_arena_lease
done

# Safetensors: 8 bytes (the claimed size, little-endian) and a header like tinyengine gen writes.
st() {  # st HEADER_JSON DATA_BYTES
  local h="$1" len
  len=${#h}
  /usr/bin/python3 -c 'import struct,sys; sys.stdout.buffer.write(struct.pack("<Q", int(sys.argv[1])) + sys.argv[2].encode())' \
    "$2" "$h"
}
st '{"__metadata__":{"format":"pt","tinyengine.config":"{\"d_model\":64}"},"tok_emb":{"dtype":"F32","shape":[257,64],"data_offsets":[0,65792]},"final_norm":{"dtype":"F32","shape":[64],"data_offsets":[65792,66048]}}' 66048 | seed fuzz_safetensors
st '{"w":{"dtype":"BF16","shape":[4,4],"data_offsets":[0,32]},"b":{"dtype":"F16","shape":[],"data_offsets":[32,34]}}' 34 | seed fuzz_safetensors
st '{"x":{"dtype":"I64","shape":[0],"data_offsets":[0,0]}}' 0 | seed fuzz_safetensors

# Readiness answers: first byte selects the HTTP status (0: 200, 4: 503, 0x80: with an oracle), then the
# body as tinyengine and vLLM write it.
for f in fuzz/seeds/readiness/*; do seed fuzz_readiness <"$f"; done

# Standby gate lines (docs/standby.md, "The gate protocol"): the parked message and near misses.
printf '%s' '{"op":"parked","v":1,"level":"pre_gpu","pid":4242}' | seed fuzz_gate
printf '%s' '{"op":"parked","v":1,"level":"warmed","pid":1,"extra":[1,2]}' | seed fuzz_gate
printf '%s' '{"op":"parked","v":2,"level":"warmed","pid":7}' | seed fuzz_gate
printf '%s' '{"op":"release"}' | seed fuzz_gate
# At and past the limits of docs/reliability.md, "Limits on what a peer sends" (fuzz/json_attacks.h builds
# larger ones while fuzzing): nesting 32 and 33 deep, brackets inside a string, a run of tiny values.
nest() { printf "%${1}s" '' | tr ' ' "$2"; }
for d in 32 33; do
  j='{"op":"status","id":'"$(nest $d '[')$(nest $d ']')"'}'
  for t in fuzz_frame fuzz_control fuzz_gate; do printf '%s' "$j" | seed $t; done
done
j='{"op":"parked","v":1,"level":"warmed","pid":1,"x":"'"$(nest 40 '[')"'\\"}'
for t in fuzz_frame fuzz_control fuzz_gate; do printf '%s' "$j" | seed $t; done
printf '{"op":"status","id":[%s0]}' "$(printf '0,%.0s' $(seq 5000))" | seed fuzz_frame
for t in "$out"/*; do echo "fuzz/make-seeds.sh: $(ls "$t" | wc -l) seeds for $(basename "$t")"; done
# A dictionary for the config target: every section and key the loader knows (src/supervisor/config.cc).
{
  grep -oE 'FR_KEY\("[a-z_]+"' src/supervisor/config.cc | sed 's/FR_KEY(//'
  grep -oE '\{"[a-z]+", k[A-Z][a-z]+Keys\}' src/supervisor/config.cc | sed -E 's/\{"([a-z]+)".*/"[\1]"/'
  printf '"%s"\n' gpus '= ' '[[' 'inf' 'nan' '1e400' '0x7fffffffffffffff' '1979-05-27T07:32:00Z'
} | sort -u >"$out/fuzz_config.dict"

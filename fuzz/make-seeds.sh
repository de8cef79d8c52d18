#!/usr/bin/env bash
# Writes the seed corpora of the fuzz targets into DIR/<target>/ from real messages in the repository:
# the shipped configs and the TOML in docs/config.md, the JSON messages in docs/protocol.md and
# docs/supervisor.md, the requests fastrestartctl sends, and recorded tinyengine answers (fuzz/seeds/).
# Regenerated on every run, so the seeds follow the docs. Usage: fuzz/make-seeds.sh DIR
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: fuzz/make-seeds.sh DIR}"
rm -rf "$out"
for f in fuzz/fuzz_*.cc; do mkdir -p "$out/$(basename "$f" .cc)"; done
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
# fastrestart-front (fuzz_front_request): first byte even: a client's request (the rest of the byte picks
# the piece size); odd: an engine's text/event-stream body.
printf '\000POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 31\r\n\r\n{"prompt":"hi","stream":true}  ' | seed fuzz_front_request
printf '\006POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"n":\r\n2\r\n2}\r\n0\r\n\r\n' | seed fuzz_front_request
printf '\002GET /health HTTP/1.0\r\nConnection: keep-alive\r\nExpect: 100-continue\r\n\r\n' | seed fuzz_front_request
printf '\001data: {"id":"cmpl-1","choices":[{"text":"a"}]}\n\ndata: b\r\n\r\n\rdata: c\rdata: d\r\rdata: [DONE]\n\n' | seed fuzz_front_request
# fastrestart-front's stream continuation (fuzz_front_splice): the first byte: after which event the engine
# dies; then the client's body, a NUL byte, and a stream as the tiny engine sends it (docs/tinyengine.md).
ch() {  # ch ID TEXT TOKEN PROMPT_IDS FINISH: one chunk event in vLLM's format
  printf 'data: {"id":"%s","object":"text_completion","created":1,"model":"tiny","choices":[{"index":0,"text":"%s","logprobs":null,"finish_reason":%s,"stop_reason":null,"prompt_token_ids":%s,"token_ids":[%s]}],"usage":null}\n\n' "$1" "$2" "$5" "$4" "$3"
}
{ printf '\002{"prompt":"hi","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}\000'
  ch A x 120 '[104,105]' null; ch A y 121 null null; ch B z 122 '[104,105,120,121]' '"length"'
  printf 'data: {"id":"B","object":"text_completion","created":2,"model":"tiny","choices":[],"usage":{"prompt_tokens":4,"total_tokens":5,"completion_tokens":1}}\n\ndata: [DONE]\n\n'
} | seed fuzz_front_splice
{ printf '\001{"prompt":[7,8],"max_tokens":2,"stream":true,"return_token_ids":true}\000'
  ch A a 97 '[7,8]' null; ch A b 98 null '"stop"'; printf 'data: [DONE]\n\n'; } | seed fuzz_front_splice
{ printf '\003{"prompt":"hi","max_tokens":9,"stream":true}\000'
  printf 'data: {"choices":[{"text":"ab"}]}\n\ndata: {"choices":[{"text":"c"}]}\n\ndata: {"choices":[{"text":"d"}]}\n\n'; } | seed fuzz_front_splice
printf '\001{"prompt":"hi","max_tokens":9,"stream":true,"n":2}\000data: {"error":{"message":"x"}}\n\n' | seed fuzz_front_splice
# Chat streams (the first byte's 0x10 bit): the role chunk, content chunks, the continuation's role chunk.
cc() {  # cc ID DELTA FINISH: one chat chunk event in vLLM's format
  printf 'data: {"id":"%s","object":"chat.completion.chunk","created":1,"model":"tiny","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s,"token_ids":null}]}\n\n' "$1" "$2" "$3"
}
{ printf '\023{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":5,"stream":true,"stream_options":{"include_usage":true}}\000'
  cc A '{"role":"assistant","content":""}' null; cc A '{"content":"He"}' null; cc A '{"content":""}' null
  cc B '{"role":"assistant","content":""}' null; cc B '{"content":"llo"}' '"length"'
  printf 'data: {"id":"B","object":"chat.completion.chunk","created":2,"model":"tiny","choices":[],"usage":{"prompt_tokens":9,"total_tokens":12,"completion_tokens":3}}\n\ndata: [DONE]\n\n'
} | seed fuzz_front_splice
{ printf '\022{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"O"}],"max_tokens":4,"stream":true,"add_generation_prompt":false,"continue_final_message":true}\000'
  cc A '{"role":"assistant","content":""}' null; cc A '{"tool_calls":[{"index":0,"function":{"name":"f"}}]}' null; } | seed fuzz_front_splice
# Engine output lines (fuzz_engine_line): every arena, loader and progress line the docs, the data files
# and the engines' sources show, and near misses; lines as loggers prefix them.
{
  git grep -hoE 'fastrestart-(arena|loader|progress):[^`|]*' -- docs data python src/tinyengine | sed 's/[[:space:]]*$//' || true
  printf '%s\n' '[2026-12-03 10:00:00.123] [info] fastrestart-arena: leased name=kv bytes=1073741824 waited_s=0.000001 swap_s=0.5 generation=1' \
    'fastrestart-arena: fallback reason=no_daemon' 'fastrestart-arena: fallback reason="a \"quoted\" \\ reason" extra=1' \
    'fastrestart-arena: leased name=kv bytes=1 waited_s=1e3 swap_s=0 generation=18446744073709551615' \
    'fastrestart-progress: phase=disk_read done=18446744073709551615 total=18446744073709551615 unit=bytes' \
    'fastrestart-progress: phase=load_shards done=2 total=4 unit=shards' \
    $'\e[32mINFO\e[0m 12-03 10:00:00 [gpu_model_runner.py:1] Loading model weights took 14.99 GiB'
} | sort -u | while IFS= read -r l; do printf '%s' "$l" | seed fuzz_engine_line; done

# Snapshot manifests (fuzz_manifest): the one tests/snapshot writes, with weights and arenas, and without.
man='{"format":1,"id":"20261130-081500","fastrestart_version":"0.1.0","created_unix":1796000000.5,"create_s":2.5,"image_bytes":1048576,"stdout_pipe":"pipe:[1234]","listen_socket":"socket:[4242]","host":"127.0.0.1","port":8000,"identity":{"kernel_release":"6.18","criu_version":"4.2.1","cuda":true,"gpu":{"driver_version":"580","uuid":"GPU-0","name":"H200"},"executable":"/bin/engine","executable_hash":"00","files":[{"path":"/m","dev":1,"ino":2,"size":3,"mtime_ns":4,"ctime_ns":-5}],"args":["serve","--port","8000"],"env":{"A":"1"},"arg_hashes":{"--api-key":"ab"}},"oracle":{"prompt":"The capital of France is","model":"t","max_tokens":4,"token_ids":[41,32,80,97],"text":") Pa","logprobs":[-3.38,-1.5,-0.25,-0.125]},"weights":WEIGHTS,"timings":{"criu_dump_s":1.0}}'
printf '%s' "${man/WEIGHTS/null}" | seed fuzz_manifest
printf '%s' "${man/WEIGHTS/'{"excluded":true,"exchange":"/run/fastrestart/x.sock","entries":[{"fingerprint":"f","digest":"d","device":"GPU-0","daemon_socket":"/run/w.sock","key":{},"base":140000000000,"bytes":4096,"mapped":false}],"arenas":[{"name":"kv","device":"GPU-0","daemon_socket":"/run/w.sock","base":1,"bytes":2,"mapped":false}]}'}" | seed fuzz_manifest
printf '%s' "${man/WEIGHTS/'{"excluded":false,"exchange":"/x","entries":[]}'}" | seed fuzz_manifest

# CRIU images (fuzz_listen_image): files.img with fastrestartd's listening socket (socket:[4242], id 7)
# beside a regular file, and fdinfo images referring to it; each file a 16-bit length and its bytes.
/usr/bin/python3 - "$out/fuzz_listen_image" <<'PY'
import hashlib, os, struct, sys
def varint(v):
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7f) | 0x80]); v >>= 7
    return out + bytes([v])
def field(n, v):  # int: varint; bytes: length-delimited
    return varint(n << 3) + varint(v) if isinstance(v, int) else varint(n << 3 | 2) + varint(len(v)) + v
def msg(*fs): return b"".join(field(n, v) for n, v in fs)
def image(*entries): return struct.pack("<II", 0x54564319, 0x56213975) + b"".join(struct.pack("<I", len(e)) + e for e in entries)
def inet(ino, state): return msg((1, 7), (2, ino), (3, 2), (4, 1), (5, 6), (6, state), (9, 2), (13, msg((1, 0), (2, 0))), (14, msg((1, 0))))
files = image(msg((1, 1), (2, 3), (3, msg((1, 3), (2, 0), (3, b"/etc/hosts")))), msg((1, 4), (2, 7), (4, inet(4242, 10))))
fd1 = image(msg((1, 3), (2, 0), (3, 1), (4, 0)), msg((1, 7), (2, 0), (3, 4), (4, 3)))
fd2 = image(msg((1, 7), (2, 1), (3, 4), (4, 9)))
def seed(*files):
    data = b"".join(struct.pack("<H", len(f)) + f for f in files)
    open(os.path.join(sys.argv[1], "repo-" + hashlib.sha1(data).hexdigest()[:16]), "wb").write(data)
seed(files, fd1)
seed(files, fd1, fd2)
seed(image(msg((1, 4), (2, 7), (4, inet(4242, 1)))), fd1)                       # not listening
seed(image(msg((1, 4), (2, 7), (4, inet(4243, 10)))), fd1)                      # another socket
seed(files, image(msg((1, 3), (2, 0), (3, 1), (4, 0))))                        # no descriptor refers to it
seed(files[:-3], fd1)                                                            # truncated
PY

# Arena requests and replies (docs/protocol.md, "arena_lease"): each arena object the doc quotes, and near misses.
{ grep -oE '`\{"op":"arena_[^`]*\}`' docs/protocol.md || true; } | sed 's/^`//; s/`$//' | while IFS= read -r j; do
  printf '%s' "$j" | seed fuzz_arena_lease
done
for j in '{"op":"arena_lease","name":"kv","bytes":1073741824,"wait_s":30}' '{"op":"arena_lease","name":"kv","bytes":1125899906842625}' \
  '{"op":"arena_release","name":"kv.0-_A"}' '{"op":"arena_lease","name":"","bytes":1,"wait_s":86400.5}' \
  '{"ok":true,"name":"kv","bytes":4096,"pool_bytes":4096,"backend":"host","created":true,"resized":false,"zeroed":false,"waited_s":0,"leases":1,"generation":1,"previous_holder_pid":null}'; do
  printf '%s' "$j" | seed fuzz_arena_lease
done

for t in "$out"/*; do echo "fuzz/make-seeds.sh: $(ls "$t" | wc -l) seeds for $(basename "$t")"; done
# A dictionary for the config target: every section and key the loader knows (src/supervisor/config.cc).
{
  grep -oE 'FR_KEY\("[a-z_]+"' src/supervisor/config.cc | sed 's/FR_KEY(//'
  grep -oE '\{"[a-z]+", k[A-Z][a-z]+Keys\}' src/supervisor/config.cc | sed -E 's/\{"([a-z]+)".*/"[\1]"/'
  printf '"%s"\n' gpus '= ' '[[' 'inf' 'nan' '1e400' '0x7fffffffffffffff' '1979-05-27T07:32:00Z'
} | sort -u >"$out/fuzz_config.dict"

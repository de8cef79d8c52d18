#!/usr/bin/env bash
# The weight daemon alone, on an existing ./build (scripts/build.sh): preload, attach timings, a fingerprint miss.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/src
work=$(mktemp -d /tmp/fastrestart-demo-XXXXXX)
trap '[ -n "${dpid:-}" ] && kill $dpid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
ctl() { "$B/tools/fastrestart-weightctl" --socket-dir "$work/run" "$@"; }

echo "== 1. a synthetic 4-shard checkpoint (deterministic, ~256 MiB)"
"$B/tools/fastrestart-weightctl" make-checkpoint "$work" --shards 4 --tensors 16 --tensor-bytes 4194304 --dtype BF16 >/dev/null
ls -l "$work"/*.safetensors | awk '{print "   " $5 " bytes  " $9}'
files=("$work"/*.safetensors)

echo "== 2. fastrestart-weightd --backend host, preloading it (socket dir $work/run, mode 0700)"
"$B/daemon/fastrestart-weightd" --backend host --socket-dir "$work/run" --config arch=demo --config dtype=BF16 \
  $(printf -- '--preload %s ' "${files[@]}") >"$work/weightd.log" 2>&1 &
dpid=$!
for _ in $(seq 100); do ctl status >/dev/null 2>&1 && break; sleep 0.05; done
until ctl status --json | grep -q '"state": "ready"'; do sleep 0.05; done
ctl status | sed 's/^/   /'

echo "== 3. an engine starts: attach through engine_loader (stat calls only, then one mapping)"
ctl attach "${files[@]}" --config arch=demo --config dtype=BF16 --verify | sed 's/^/   /'

echo "== 4. for comparison, reading the same bytes from the (warm) page cache"
start=$(date +%s.%N); cat "${files[@]}" >/dev/null; end=$(date +%s.%N)
echo "   cat of the checkpoint: $(echo "($end - $start) * 1000" | bc -l | xargs printf '%.1f') ms"

echo "== 5. the checkpoint changes (rewritten in place, mtime restored): the key misses, naming why"
python3 - "${files[1]}" <<'PY'
import os, sys
p = sys.argv[1]; st = os.stat(p)
with open(p, "r+b") as f:
    f.seek(st.st_size - 1000); b = f.read(1); f.seek(st.st_size - 1000); f.write(bytes([b[0] ^ 1]))
os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
PY
ctl attach "${files[@]}" --config arch=demo --config dtype=BF16 | sed 's/^/   /' || true

echo "== 6. SIGTERM: the daemon releases its pools, removes socket and lock, exits 0"
kill -TERM $dpid; wait $dpid && echo "   exit code 0"; dpid=
ls -A "$work/run" | sed 's/^/   left in the socket dir: /'
echo "== daemon log"; sed 's/^/   /' "$work/weightd.log"

#!/bin/bash
# deploy/kubernetes without a cluster (tests/container/check-manifests.mjs): the manifests validate against
# the Kubernetes v1.33.0 API schemas (kubernetes-models, pinned by package.json and package-lock.json beside
# this script) and the vendored LeaderWorkerSet CRD schema, and their probes, ports, grace periods, GPUs and
# state volume agree with the fastrestart configs they mount (which `fastrestartd --check` accepts). Then the
# checker must catch broken copies: a short grace period, a probe on the wrong port or path, a field of the
# wrong type, an unknown LeaderWorkerSet field, a loopback listener.
# The npm packages are installed with `npm ci` into ~/.cache/fastrestart/k8s-checks-<lock hash> (reruns
# reuse them). Usage: manifests-test.sh [FASTRESTARTD]. Exit 77 = skipped (no node/npm, or npm ci failed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
frd=${1:-}
for t in node npm; do command -v "$t" >/dev/null || { echo "SKIP: $t is not installed (scripts/deps.sh: nodejs npm)"; exit 77; }; done
lock_hash=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)
cache=${FR_K8S_CHECKS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fastrestart/k8s-checks-$lock_hash}
if [[ ! -f $cache/node_modules/.fastrestart-installed ]]; then
  rm -rf "$cache" && mkdir -p "$cache"
  cp "$here/package.json" "$here/package-lock.json" "$cache/"
  if ! (cd "$cache" && timeout 300 npm ci --no-audit --no-fund --ignore-scripts >"$cache/npm.log" 2>&1); then
    echo "SKIP: npm ci of tests/container/package.json failed (registry unreachable?):"; tail -5 "$cache/npm.log"
    rm -rf "$cache"; exit 77
  fi
  touch "$cache/node_modules/.fastrestart-installed"
fi
cp "$here/check-manifests.mjs" "$cache/"
check() { node "$cache/check-manifests.mjs" "$1" ${frd:+--fastrestartd "$frd"} 2>&1; }

echo "== deploy/kubernetes"
check "$root/deploy/kubernetes" || { echo "FAIL: deploy/kubernetes does not pass"; exit 1; }

# Each broken copy must fail with the message that names its fault.
work=$(mktemp -d /tmp/fr-manifests-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
broken() {  # broken NAME EXPECTED-MESSAGE FILE SED-EXPRESSION
  rm -rf "$work/k" && cp -r "$root/deploy/kubernetes" "$work/k"
  sed -i -e "$4" "$work/k/$3"
  if cmp -s "$root/deploy/kubernetes/$3" "$work/k/$3"; then echo "FAIL: $1: the sed changed nothing in $3"; exit 1; fi
  local out rc=0
  out=$(check "$work/k") || rc=$?
  if [[ $rc -eq 0 ]]; then echo "FAIL: $1: the checker accepted it"; exit 1; fi
  grep -qF -- "$2" <<<"$out" || { echo "FAIL: $1: no '$2' in:"; echo "$out"; exit 1; }
  echo "ok: $1 -> $(grep -F -m1 -- "$2" <<<"$out")"
}
broken "grace below engine + daemons" "terminationGracePeriodSeconds 45 < engine.stop_grace_s 30" \
  single-node/deployment.yaml 's/terminationGracePeriodSeconds: 90/terminationGracePeriodSeconds: 45/'
broken "probe port != http.listen" "readinessProbe.httpGet.port 9401 is not http.listen's port 9400" \
  single-node/deployment.yaml 's|path: /ready, port: 9400|path: /ready, port: 9401|'
broken "listen port moved, probes not" "startupProbe.httpGet.port 9400 is not http.listen's port 9500" \
  single-node/configmap.yaml 's|listen = "0.0.0.0:9400"|listen = "0.0.0.0:9500"|'
broken "readiness on /health" "readinessProbe.httpGet.path /health: want /ready" \
  single-node/deployment.yaml 's|path: /ready, port: 9400|path: /health, port: 9400|'
broken "containerPort a string" "containerPort must be integer" \
  single-node/deployment.yaml 's/containerPort: 8000}/containerPort: "8000"}/'
broken "unknown LeaderWorkerSet field" "must NOT have additional properties ('sise')" \
  multi-node/leaderworkerset.yaml 's/^    size: 2/    sise: 2/'
broken "LeaderWorkerSet restartPolicy" "restartPolicy must be equal to one of the allowed values" \
  multi-node/leaderworkerset.yaml 's/restartPolicy: Default/restartPolicy: Always/'
broken "worker pod template" "(core/v1 PodTemplateSpec)" \
  multi-node/leaderworkerset.yaml 's/failureThreshold: 240/failureThreshold: "many"/'
broken "loopback listener" "is loopback: the kubelet probes the pod's IP" \
  multi-node/configmap.yaml '0,/listen = "0.0.0.0:9400"/s//listen = "127.0.0.1:9400"/'
broken "GPU limit below gpus" "resources.limits[\"nvidia.com/gpu\"] 4 != the 8 GPU(s)" \
  multi-node/leaderworkerset.yaml '0,/limits: {nvidia.com\/gpu: 8/s//limits: {nvidia.com\/gpu: 4/'
if [[ -n $frd ]]; then
  broken "config fastrestartd refuses" "fastrestartd --check" \
    single-node/configmap.yaml 's/stop_grace_s = 30 /stop_grace_s = -1 /'
fi
echo "manifests-test: all checks passed"

#!/bin/bash
# The container image (scripts/build-image.sh, from build/packages/fastrestart_*.deb) run with podman, as
# docs/kubernetes.md describes it: fastrestartd is PID 1 and the demo config (config/demo.toml: the tiny engine
# on the host backend) is mounted at /etc/fastrestart/demo.toml.
#   - it becomes ready, and /ready and /status answer from outside the container (host network);
#   - `kill -9` of the engine inside is restarted warm (status: last_start.path = "warm", restarts.crash;
#     the engine's log: load path=attach);
#   - an orphan entered with `podman exec` is reparented to fastrestartd (PID 1) and reaped;
#   - config pushes as docs/kubernetes.md gives them: `fastrestartctl reload` through `podman exec`, and a
#     changed file in the mounted config directory (renamed into place, as the kubelet updates a ConfigMap)
#     followed by SIGHUP to PID 1; both restart the engine warm with the new flags;
#   - `podman stop` stops the engine before the weight daemon (the order of fastrestartd's log lines) and the
#     container exits 0.
# Podman 4.3 (Debian 12) runs here with `--runtime runc --cgroup-manager cgroupfs` and a containers.conf
# with `default_ulimits = []`. Usage: podman-test.sh [DEB]. Exit 77 = skipped, with the reason.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
deb=${1:-$(ls -t "$root"/build/packages/fastrestart_*.deb 2>/dev/null | head -n1 || true)}
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root (debootstrap, rootful podman)"; exit 77; }
for t in podman runc debootstrap curl python3; do
  command -v "$t" >/dev/null || { echo "SKIP: $t is not installed (scripts/deps.sh installs podman runc debootstrap)"; exit 77; }
done
[[ -n "$deb" && -f "$deb" ]] || { echo "SKIP: no package (cd build && cpack -G DEB, or scripts/package.sh)"; exit 77; }

work=$(mktemp -d /var/tmp/fr-podman-test.XXXXXX)
name=fr-podman-test-$$
export CONTAINERS_CONF=$work/containers.conf
printf '[containers]\ndefault_ulimits = []\n' >"$CONTAINERS_CONF"
pm() { podman --runtime runc --cgroup-manager cgroupfs "$@"; }
cleanup() { pm rm -f -t 0 "$name" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT; trap 'exit 143' TERM
fail() {
  echo "FAIL: $*"
  echo "--- container log:"; pm logs "$name" 2>&1 | tail -60 || true
  exit 1
}
wait_for() {  # wait_for SECONDS COMMAND...: until COMMAND succeeds (a visible sign), or false
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do ((SECONDS < deadline)) || return 1; sleep 0.2; done
}

# Whether podman can run a container here at all (a kernel or sandbox without the needed namespaces, or
# no runc, is a skip with podman's own words).
t0=$SECONDS
image=$("$root/scripts/build-image.sh" --deb "$deb" | tail -n1)
echo "image $image ready in $((SECONDS - t0)) s"
if ! out=$(pm run --rm --network host --entrypoint /usr/bin/fastrestartd "$image" --help 2>&1); then
  echo "SKIP: podman cannot run a container here: $(tail -3 <<<"$out")"; exit 77
fi

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
eport=$(free_port); hport=$(free_port)
[[ $eport != "$hport" ]] || hport=$(free_port)
# config/demo.toml with the image's paths (tests/systemd's make-config.sh: /usr/bin, the checkpoint in
# /models/demo, the default control socket /run/fastrestart/demo.ctl and state dir), on free ports.
"$root/tests/systemd/fastrestartd/make-config.sh" "$root/config/demo.toml" /models/demo |
  sed -E -e "s/\"8100\"/\"$eport\"/; s/^port = 8100/port = $eport/; s/127\.0\.0\.1:9401/127.0.0.1:$hport/" \
         -e 's/^startup_timeout_s = .*/startup_timeout_s = 120/' >"$work/demo.toml"
grep -q "port = $eport" "$work/demo.toml" && grep -q "127.0.0.1:$hport" "$work/demo.toml" &&
  grep -q '^  "--served-model-name", "demo",$' "$work/demo.toml" ||
  fail "config/demo.toml changed shape (ports 8100 / 9401 not found); update the sed"
# Mounted as a directory, as a ConfigMap volume is: a file replaced by rename shows through.
mkdir -p "$work/models" "$work/etc"
cp "$work/demo.toml" "$work/etc/demo.toml"
pm run --rm --network host -v "$work/models:/models" --entrypoint /usr/bin/fastrestart-tinyengine "$image" \
  gen --out /models/demo --size 16M >/dev/null || fail "fastrestart-tinyengine gen in the image"

echo "== run"
pm run -d --name "$name" --network host --log-driver k8s-file \
  -v "$work/etc:/etc/fastrestart:ro" -v "$work/models:/models:ro" \
  "$image" --config /etc/fastrestart/demo.toml >/dev/null || fail "podman run"
url=http://127.0.0.1:$hport
ready() { [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url/ready") == 200 ]]; }
status() { curl -sf --max-time 5 "$url/status"; }
field() { python3 -c 'import json, sys; v = json.load(sys.stdin)
for k in sys.argv[1].split("."): v = v.get(k) if isinstance(v, dict) else None
print("" if v is None else v)' "$1"; }
wait_for 150 ready || fail "/ready did not answer 200 from outside the container"
[[ $(pm inspect --format '{{.State.Pid}}' "$name") -gt 1 ]] || fail "no container pid"
[[ $(pm exec "$name" cat /proc/1/comm) == fastrestartd ]] || fail "PID 1 in the container is $(pm exec "$name" cat /proc/1/comm), want fastrestartd"
first=$(status | field last_start.path)
[[ $first == cold ]] || fail "first start: path '$first', want cold"
echo "ok: ready (cold), PID 1 is fastrestartd, /ready answers from outside"

echo "== kill -9 of the engine inside"
epid=$(status | field engine.pid)
[[ -n $epid ]] || fail "no engine pid in /status"
pm exec "$name" sh -c "kill -9 $epid" || fail "kill -9 $epid inside the container"
restarted() { local s; s=$(status) || return 1; [[ $(field engine.pid <<<"$s") != "$epid" && $(field state <<<"$s") == ready ]]; }
wait_for 120 restarted || fail "the engine was not restarted to ready after kill -9"
s=$(status)
[[ $(field last_start.path <<<"$s") == warm ]] || fail "restart after kill -9: path '$(field last_start.path <<<"$s")', want warm"
[[ $(field restarts.crash <<<"$s") == 1 ]] || fail "restarts.crash = '$(field restarts.crash <<<"$s")', want 1"
logs() { pm logs "$name" >"$work/container.log" 2>&1; cat "$work/container.log"; }  # grep -q must not cut podman's pipe
logs | grep "load path=attach" >/dev/null || fail "the engine's log has no 'load path=attach' line"
echo "ok: restarted warm (engine pid $epid -> $(field engine.pid <<<"$s"))"

echo "== an orphan entered with podman exec"
opid=$(pm exec "$name" sh -c 'tail -f /dev/null >/dev/null 2>&1 </dev/null & echo $!')
ppid_of() { pm exec "$name" sh -c "read -r line </proc/$opid/stat && set -- \${line##*) } && echo \$2"; }
parent_is_1() { [[ $(ppid_of 2>/dev/null) == 1 ]]; }
wait_for 20 parent_is_1 || fail "orphan $opid was not reparented to PID 1 (ppid $(ppid_of 2>&1))"
pm exec "$name" sh -c "kill -9 $opid"
gone() { ! pm exec "$name" test -e "/proc/$opid"; }
wait_for 20 gone || fail "orphan $opid was not reaped by fastrestartd (PID 1): $(pm exec "$name" cat /proc/$opid/status 2>&1 | grep State)"
echo "ok: orphan $opid reparented to fastrestartd and reaped"

echo "== config pushes: fastrestartctl through exec, then a changed file and SIGHUP"
has_flags() { python3 -c 'import json, sys; f = json.load(sys.stdin)["flags"]; w = sys.argv[1:]
sys.exit(0 if any(f[i:i + len(w)] == w for i in range(len(f))) else 1)' "$@"; }
pm exec "$name" fastrestartctl --name demo reload --add-flags "--threads 2" >"$work/reload.out" 2>&1 ||
  { cat "$work/reload.out"; fail "fastrestartctl reload --add-flags inside the container"; }
s=$(status)
has_flags --threads 2 <<<"$s" || fail "flags after the pushed reload: $(field flags <<<"$s")"
[[ $(field state <<<"$s") == ready && $(field last_start.path <<<"$s") == warm ]] ||
  fail "after the pushed reload: state $(field state <<<"$s"), path $(field last_start.path <<<"$s"), want ready, warm"
# What the kubelet does with a changed ConfigMap: the new file renamed into place; then SIGHUP to PID 1.
sed 's|^  "--served-model-name", "demo",$|  "--served-model-name", "demo", "--threads", "3",|' "$work/demo.toml" >"$work/etc/.demo.toml.new"
mv -f "$work/etc/.demo.toml.new" "$work/etc/demo.toml"
pm exec "$name" sh -c 'kill -HUP 1' || fail "kill -HUP 1 inside the container"
reloaded() { local s; s=$(status) || return 1; has_flags --threads 3 <<<"$s" && [[ $(field state <<<"$s") == ready ]]; }
wait_for 60 reloaded || fail "SIGHUP after the config changed: flags $(status | field flags), state $(status | field state)"
[[ $(status | field last_start.path) == warm ]] || fail "the SIGHUP reload was not warm"
logs | grep "SIGHUP: re-reading /etc/fastrestart/demo.toml" >/dev/null || fail "no 'SIGHUP: re-reading' line"
echo "ok: exec push (--threads 2) and file + SIGHUP (--threads 3) applied, warm"

echo "== podman stop"
pm stop -t 60 "$name" >/dev/null || fail "podman stop"
rc=$(pm inspect --format '{{.State.ExitCode}}' "$name")
[[ $rc == 0 ]] || fail "the container exited $rc, want 0"
log=$(logs)
line_of() { awk -v from="${2:-0}" -v re="$1" 'NR > from && $0 ~ re { print NR; exit }' <<<"$log"; }  # first after line $2
stop_line=$(line_of "stopping: engine first")
engine_line=$(line_of "engine pid [0-9]+ exited as requested" "${stop_line:-0}")
daemon_line=$(line_of "weight daemon pid [0-9]+ stopped" "${stop_line:-0}")
exit_line=$(line_of "fastrestartd exiting with code 0" "${stop_line:-0}")
[[ -n $stop_line && -n $engine_line && -n $daemon_line && -n $exit_line ]] ||
  fail "missing stop lines (stop '$stop_line', engine '$engine_line', daemon '$daemon_line', exit '$exit_line')"
((stop_line < engine_line && engine_line < daemon_line && daemon_line < exit_line)) ||
  fail "stop order: engine exited at line $engine_line, daemon stopped at line $daemon_line (engine must come first)"
echo "ok: engine stopped (log line $engine_line) before the weight daemon (line $daemon_line); exit 0"
echo "podman-test: all checks passed in $((SECONDS - t0)) s"

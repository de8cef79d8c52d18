#!/bin/bash
# Runs inside the harness namespace (../package-install-test.sh). FR_UNIT = fastrestart@demo.service.
# The .deb installed with dpkg, then the installed unit, binaries, library, Python module and man pages used
# as an operator would; then removal and purge; then the .rpm's scriptlets. /var/tmp/config-src holds the
# source tree's config/*.toml, /var/tmp/fastrestart-vllm.version python/pyproject.toml's project.version.
set -u
fail=0
ok()   { echo "ok   - $*"; }
bad()  { echo "FAIL - $*"; fail=1; }
expect() { if [[ "$2" == "$3" ]]; then ok "$1 = '$2'"; else bad "$1 = '$2', wanted '$3'"; fi; }
expect_match() { if [[ "$2" =~ $3 ]]; then ok "$1 = '$2'"; else bad "$1 = '$2', wanted /$3/"; fi; }
prop() { systemctl show -p "$1" --value "$FR_UNIT"; }
reloads() { journalctl --no-pager -o cat _PID=1 | grep -c '^Reloading\.\?$\|^Reloading requested' ; }
journal() { journalctl --no-pager -o cat -u "$FR_UNIT"; }
line_of() { # line_of REGEX [AFTER]: the first journal line of the unit matching REGEX after line AFTER
  journal | awk -v re="$1" -v after="${2:-0}" 'NR > after && $0 ~ re { print NR; exit }'; }
engine_pid() { prop StatusText | sed -nE 's/.*engine pid ([0-9]+).*/\1/p'; }
# every process whose executable is (or was, before removal) one of the package's binaries
our_procs() { for e in /proc/[0-9]*/exe; do readlink "$e" 2>/dev/null; done | grep -cE '^/usr/bin/fastrestart' ; }
# what is left of the package's Python files (fastrestart, fastrestart_vllm and its .dist-info)
py_left() { ls -d /usr/lib/python3/dist-packages/fastrestart{,_vllm,_vllm-*.dist-info} 2>/dev/null; }
model=/var/lib/fr-unit-test/model

# ---- install
r0=$(reloads)
if dpkg -i /var/tmp/fastrestart.deb > /var/tmp/dpkg-i.log 2>&1; then ok "dpkg -i"; else bad "dpkg -i failed: $(tail -n 5 /var/tmp/dpkg-i.log)"; fi
expect "dpkg status" "$(dpkg-query -W -f='${Status}' fastrestart 2>/dev/null)" "install ok installed"
(( $(reloads) > r0 )) && ok "postinst ran systemctl daemon-reload" || bad "no daemon-reload after dpkg -i"
for f in /usr/bin/fastrestartd /usr/bin/fastrestartctl /usr/bin/fastrestart-weightd /usr/bin/fastrestart-weightctl \
         /usr/bin/fastrestart-tinyengine /usr/lib/systemd/system/fastrestart@.service \
         /usr/lib/tmpfiles.d/fastrestart.conf /usr/lib/sysusers.d/fastrestart.conf /etc/fastrestart/example.toml \
         /usr/share/man/man8/fastrestartd.8.gz /usr/share/man/man1/fastrestartctl.1.gz \
         /usr/share/man/man5/fastrestart.toml.5.gz /usr/share/doc/fastrestart/copyright; do
  [[ -e $f ]] && ok "installed $f" || bad "missing $f"
done
for m in /usr/share/man/man*/fastrestart*.gz; do
  zcat "$m" | grep -q '^\.TH ' && ok "$(basename "$m") is a man page (.TH)" || bad "$m has no .TH header"
done

# ---- sysusers.d and tmpfiles.d, applied by postinst
getent group fastrestart >/dev/null && ok "postinst created group fastrestart (sysusers.d)" || bad "no group fastrestart"
expect "/run/fastrestart (tmpfiles.d)" "$(stat -c '%a %U:%G' /run/fastrestart 2>&1)" "700 root:root"

# ---- every shipped example validates with the installed fastrestartd, at its installed path
for src in /var/tmp/config-src/*.toml; do
  f=/usr/share/doc/fastrestart/examples/$(basename "$src")
  if [[ ! -f $f ]]; then bad "example $(basename "$src") not installed in /usr/share/doc/fastrestart/examples"; continue; fi
  out=$(/usr/bin/fastrestartd --check --syntax-only --config "$f" 2>&1) && ok "fastrestartd --check --syntax-only $f" || bad "fastrestartd --check $f: $out"
done
out=$(/usr/bin/fastrestartd --check --syntax-only --config /etc/fastrestart/example.toml 2>&1) \
  && ok "fastrestartd --check /etc/fastrestart/example.toml" || bad "fastrestartd --check /etc/fastrestart/example.toml: $out"

# ---- the Python module, where Debian's python3 finds it without PYTHONPATH
pyfile=$(cd / && env -u PYTHONPATH /usr/bin/python3 -c 'import fastrestart; print(fastrestart.__file__)' 2>&1)
expect "python3: fastrestart.__file__" "$pyfile" /usr/lib/python3/dist-packages/fastrestart/__init__.py
# the vLLM plugin, found the way vLLM finds plugins: the vllm.general_plugins entry point (no vLLM here:
# loading it imports fastrestart_vllm and yields register, which imports vLLM only when called)
vllm_ep() { (cd / && env -u PYTHONPATH /usr/bin/python3 -c '
from importlib.metadata import entry_points, version
eps = entry_points(group="vllm.general_plugins")
print(" ".join("%s=%s" % (e.name, e.value) for e in eps), version("fastrestart-vllm"), eps["fastrestart"].load().__module__)' 2>&1); }
expect "python3: vllm.general_plugins entry points, fastrestart-vllm version, register's module" "$(vllm_ep)" \
  "fastrestart=fastrestart_vllm:register $(cat /var/tmp/fastrestart-vllm.version) fastrestart_vllm"

# ---- the instance, from the packaged unit and binaries
/usr/bin/fastrestart-tinyengine gen --out $model --size 8M >/dev/null 2>&1
cp /var/tmp/demo.toml /etc/fastrestart/demo.toml
systemctl start "$FR_UNIT" && ok "systemctl start $FR_UNIT" || bad "systemctl start $FR_UNIT failed"
expect "is-active" "$(systemctl is-active "$FR_UNIT")" active
expect_match "StatusText" "$(prop StatusText)" '^Ready \((cold|warm|attach)[^)]*\) in .*engine pid [0-9]+'
main=$(prop MainPID)
expect "MainPID exe" "$(readlink /proc/"$main"/exe)" /usr/bin/fastrestartd
[[ -d /var/lib/fastrestart ]] && ok "StateDirectory /var/lib/fastrestart exists" || bad "no /var/lib/fastrestart"
[[ -S /run/fastrestart/demo.ctl ]] && ok "control socket /run/fastrestart/demo.ctl" || bad "no /run/fastrestart/demo.ctl"

# ---- journald: the engine's own output, with its prefix, under the unit
n=$(journal | grep -c '\[engine\] ')
(( n > 0 )) && ok "journalctl -u $FR_UNIT: $n lines prefixed [engine], e.g. '$(journal | grep -m1 '\[engine\] ')'" \
  || bad "journalctl -u $FR_UNIT shows no [engine] line"
journal | grep -q '\[weightd\] ' && ok "journalctl -u $FR_UNIT shows [weightd] lines" || bad "no [weightd] line in the journal"

# ---- the installed library through pkg-config, against the running daemon
cflags=$(pkg-config --cflags --libs fastrestart-engine-loader 2>&1) && ok "pkg-config --cflags --libs: $cflags" || bad "pkg-config: $cflags"
if out=$(cc -std=c11 -Wall -Werror -o /var/tmp/probe /var/tmp/pkgconfig-probe.c $cflags 2>&1); then
  ok "cc probe.c \$(pkg-config ...)"
  expect "probe loads the installed library" "$(readlink -f "$(ldd /var/tmp/probe | awk '/libfastrestart_engine_loader/{print $3}')")" \
    "$(readlink -f /usr/lib/*/libfastrestart_engine_loader.so.0)"
  out=$(/var/tmp/probe "$(ls $model/*.safetensors | head -n1)" 2>&1) && ok "probe: $out" || bad "probe: $out"
else
  bad "cc probe.c: $out"
fi

# ---- systemctl reload applies the flags pushed into the config file (ExecReload = fastrestartctl reload --wait)
old_engine=$(engine_pid)
sed -i 's|^  "--served-model-name", "demo",|  "--served-model-name", "demo", "--threads", "3",|' /etc/fastrestart/demo.toml
grep -q '"--threads", "3"' /etc/fastrestart/demo.toml || bad "could not edit the flags in /etc/fastrestart/demo.toml"
systemctl reload "$FR_UNIT" && ok "systemctl reload" || bad "systemctl reload failed"
expect "is-active after reload" "$(systemctl is-active "$FR_UNIT")" active
expect_match "StatusText after reload" "$(prop StatusText)" '^Ready \((warm|attach)'
expect "MainPID unchanged by reload" "$(prop MainPID)" "$main"
new_engine=$(engine_pid)
[[ -n "$new_engine" && "$new_engine" != "$old_engine" ]] && ok "a new engine ($old_engine -> $new_engine)" || bad "engine pid '$old_engine' -> '$new_engine'"
expect_match "new engine's command line" "$(tr '\0' ' ' < /proc/"$new_engine"/cmdline 2>/dev/null)" '--threads 3'
expect_match "fastrestartctl status flags" "$(fastrestartctl --name demo status | grep '^flags')" '--threads 3'
journal | grep -E 'reload' | tail -n 3 | sed 's/^/     | /'

# ---- systemctl stop: engine, then daemons, then fastrestartd exits 0
systemctl stop "$FR_UNIT" && ok "systemctl stop" || bad "systemctl stop failed"
expect "Result" "$(prop Result)" success
expect "ExecMainStatus" "$(prop ExecMainStatus)" 0
a=$(line_of "stopping: engine first"); b=$(line_of "exited as requested" "$a"); c=$(line_of "weight daemon pid [0-9]+ stopped" "$a")
d=$(line_of "fastrestartd exiting with code 0" "$a")
if [[ -n "$a" && -n "$b" && -n "$c" && -n "$d" ]] && (( a < b && b < c && c < d )); then
  ok "stop order: stopping ($a) < engine exited ($b) < daemon stopped ($c) < fastrestartd exit 0 ($d)"
else
  bad "stop order: stopping='$a' engine-exited='$b' daemon-stopped='$c' exit='$d'"
fi

# ---- the demo example works as shipped (no GPU): fastrestartd straight on /usr/share/doc/.../demo.toml
demo=/usr/share/doc/fastrestart/examples/demo.toml
/usr/bin/fastrestart-tinyengine gen --out /tmp/fastrestart-demo/model --size 8M >/dev/null 2>&1
/usr/bin/fastrestartd --config $demo > /var/tmp/demo-run.log 2>&1 &
demo_pid=$!
state=""
for _ in $(seq 1 100); do
  state=$(fastrestartctl --config $demo status --json 2>/dev/null | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["state"])' 2>/dev/null)
  [[ "$state" == ready ]] && break; sleep 0.1
done
expect "shipped demo.toml: state" "$state" ready
kill -TERM $demo_pid; wait $demo_pid
expect "shipped demo.toml: fastrestartd exit code after SIGTERM" "$?" 0
[[ $fail -eq 0 ]] || tail -n 20 /var/tmp/demo-run.log

# ---- removal while running: prerm stops the instance; nothing of ours keeps running, no socket is left
systemctl start "$FR_UNIT" && ok "started again" || bad "systemctl start (again) failed"
r1=$(reloads)
if dpkg -r fastrestart > /var/tmp/dpkg-r.log 2>&1; then ok "dpkg -r"; else bad "dpkg -r failed: $(tail -n 5 /var/tmp/dpkg-r.log)"; fi
expect "is-active after dpkg -r" "$(systemctl is-active "$FR_UNIT")" inactive
expect "Result after dpkg -r" "$(systemctl show -p Result --value "$FR_UNIT")" success
(( $(reloads) > r1 )) && ok "postrm ran systemctl daemon-reload" || bad "no daemon-reload after dpkg -r"
expect "processes of the package left" "$(our_procs)" 0
socks=$(find /run /tmp /var/tmp -type s 2>/dev/null | grep -v '^/run/systemd/' | grep -v '^/run/fr-harness')
expect "sockets left in /run, /tmp, /var/tmp (outside systemd's)" "$socks" ""
[[ ! -e /run/fastrestart ]] && ok "/run/fastrestart removed" || bad "/run/fastrestart left: $(ls -la /run/fastrestart)"
[[ ! -e /usr/bin/fastrestartd ]] && ok "binaries removed" || bad "/usr/bin/fastrestartd still there"
expect "Python packages and the plugin's .dist-info left after dpkg -r" "$(py_left)" ""
[[ -e /etc/fastrestart/example.toml ]] && ok "conffile kept until purge" || bad "conffile removed by dpkg -r"
dpkg -P fastrestart > /var/tmp/dpkg-p.log 2>&1 && ok "dpkg -P" || bad "dpkg -P failed: $(tail -n 5 /var/tmp/dpkg-p.log)"
[[ ! -e /var/lib/fastrestart ]] && ok "purge removed /var/lib/fastrestart" || bad "/var/lib/fastrestart left after purge"
[[ ! -e /etc/fastrestart/example.toml ]] && ok "purge removed the conffile" || bad "conffile left after purge"

# ---- the .rpm's scriptlets, on the same system (rpm --nodeps: Debian's package names are not RPM's)
if [[ -f /var/tmp/fastrestart.rpm ]]; then
  if rpm -i --nodeps --force-debian /var/tmp/fastrestart.rpm > /var/tmp/rpm-i.log 2>&1; then ok "rpm -i"; else bad "rpm -i failed: $(tail -n 5 /var/tmp/rpm-i.log)"; fi
  expect "rpm: /run/fastrestart (%post ran systemd-tmpfiles)" "$(stat -c '%a %U:%G' /run/fastrestart 2>&1)" "700 root:root"
  expect "rpm -V (files as packaged)" "$(rpm -V --nodeps fastrestart 2>&1)" ""
  cp /var/tmp/demo.toml /etc/fastrestart/demo.toml
  systemctl start "$FR_UNIT" && ok "rpm: systemctl start $FR_UNIT" || bad "rpm: systemctl start failed"
  expect_match "rpm: StatusText" "$(prop StatusText)" '^Ready '
  /usr/bin/python3 -c 'import fastrestart' 2>/dev/null && ok "rpm: python3 imports fastrestart" || bad "rpm: import fastrestart failed"
  expect "rpm: vllm.general_plugins entry points, version, register's module" "$(vllm_ep)" \
    "fastrestart=fastrestart_vllm:register $(cat /var/tmp/fastrestart-vllm.version) fastrestart_vllm"
  if rpm -e fastrestart > /var/tmp/rpm-e.log 2>&1; then ok "rpm -e"; else bad "rpm -e failed: $(tail -n 5 /var/tmp/rpm-e.log)"; fi
  expect "rpm: is-active after rpm -e (%preun stopped it)" "$(systemctl is-active "$FR_UNIT")" inactive
  expect "rpm: processes of the package left" "$(our_procs)" 0
  [[ ! -e /run/fastrestart ]] && ok "rpm: /run/fastrestart removed (%postun)" || bad "rpm: /run/fastrestart left"
  expect "rpm: Python packages and the plugin's .dist-info left after rpm -e" "$(py_left)" ""
fi
[[ $fail -eq 0 ]] || { echo "--- journal of $FR_UNIT (last 60 lines)"; journal | tail -n 60; }
exit $fail

#!/bin/bash
# Runs inside the harness namespace (../package-install-test.sh). FR_UNIT = fastrestart@demo.service.
set -u
fail=0
ok()   { echo "ok   - $*"; }
bad()  { echo "FAIL - $*"; fail=1; }
expect() { if [[ "$2" == "$3" ]]; then ok "$1 = '$2'"; else bad "$1 = '$2', wanted '$3'"; fi; }
reloads() { journalctl --no-pager -o cat _PID=1 | grep -c '^Reloading\.\?$\|^Reloading requested' ; }

r0=$(reloads)
if dpkg -i /var/tmp/fastrestart.deb > /var/tmp/dpkg-i.log 2>&1; then ok "dpkg -i"; else bad "dpkg -i failed: $(tail -n 5 /var/tmp/dpkg-i.log)"; fi
expect "dpkg status" "$(dpkg-query -W -f='${Status}' fastrestart 2>/dev/null)" "install ok installed"
(( $(reloads) > r0 )) && ok "postinst ran systemctl daemon-reload" || bad "no daemon-reload after dpkg -i"
for f in /usr/bin/fastrestartd /usr/bin/fastrestartctl /usr/bin/fastrestart-weightd /usr/bin/fastrestart-tinyengine \
         /usr/lib/systemd/system/fastrestart@.service /etc/fastrestart/example.toml; do
  [[ -e $f ]] && ok "installed $f" || bad "missing $f"
done
/usr/bin/fastrestartd --check --config /etc/fastrestart/example.toml >/dev/null 2>&1 \
  && ok "fastrestartd --check accepts /etc/fastrestart/example.toml" || bad "fastrestartd --check rejects /etc/fastrestart/example.toml: $(/usr/bin/fastrestartd --check --config /etc/fastrestart/example.toml 2>&1 | tail -n 3)"

# an instance from the packaged binaries
/usr/bin/fastrestart-tinyengine gen --out /var/lib/fr-unit-test/model --size 8M >/dev/null 2>&1
cp /var/tmp/demo.toml /etc/fastrestart/demo.toml
systemctl start "$FR_UNIT" && ok "systemctl start $FR_UNIT" || bad "systemctl start $FR_UNIT failed"
expect "is-active" "$(systemctl is-active "$FR_UNIT")" active
expect "MainPID exe" "$(readlink /proc/"$(systemctl show -p MainPID --value "$FR_UNIT")"/exe)" /usr/bin/fastrestartd
[[ -d /var/lib/fastrestart ]] && ok "StateDirectory /var/lib/fastrestart exists" || bad "no /var/lib/fastrestart"

# removal stops the instance (prerm) and reloads (postrm); purge removes the state
r1=$(reloads)
if dpkg -r fastrestart > /var/tmp/dpkg-r.log 2>&1; then ok "dpkg -r"; else bad "dpkg -r failed: $(tail -n 5 /var/tmp/dpkg-r.log)"; fi
expect "is-active after dpkg -r" "$(systemctl is-active "$FR_UNIT")" inactive
expect "Result after dpkg -r" "$(systemctl show -p Result --value "$FR_UNIT")" success
(( $(reloads) > r1 )) && ok "postrm ran systemctl daemon-reload" || bad "no daemon-reload after dpkg -r"
[[ ! -e /usr/bin/fastrestartd ]] && ok "binaries removed" || bad "/usr/bin/fastrestartd still there"
[[ -e /etc/fastrestart/example.toml ]] && ok "conffile kept until purge" || bad "conffile removed by dpkg -r"
dpkg -P fastrestart > /var/tmp/dpkg-p.log 2>&1 && ok "dpkg -P" || bad "dpkg -P failed: $(tail -n 5 /var/tmp/dpkg-p.log)"
[[ ! -e /var/lib/fastrestart ]] && ok "purge removed /var/lib/fastrestart" || bad "/var/lib/fastrestart left after purge"
[[ ! -e /etc/fastrestart/example.toml ]] && ok "purge removed the conffile" || bad "conffile left after purge"
exit $fail

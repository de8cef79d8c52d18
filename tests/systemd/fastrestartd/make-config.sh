#!/bin/bash
# make-config.sh DEMO_TOML MODEL_DIR > demo.toml: config/demo.toml with the paths of an installed system
# (binaries in /usr/bin, the checkpoint in MODEL_DIR, the default control and daemon sockets (/run/fastrestart/demo.ctl that
# the unit's ExecReload= names), state in /var/lib/fastrestart/demo, a 20 s readiness timeout).
set -euo pipefail
out=$(sed -E -e 's|^command = \["fastrestart-tinyengine", "serve", "[^"]*"\]|command = ["/usr/bin/fastrestart-tinyengine", "serve", "'"$2"'"]|' \
    -e 's|^checkpoint = "[^"]*"|checkpoint = "'"$2"'"|' \
    -e '/^socket = /d' -e '/^socket_dir = /d' -e '/"--fastrestart-socket-dir"/d' \
    -e 's|^state_dir = "[^"]*"|state_dir = "/var/lib/fastrestart/demo"|' \
    -e 's|^startup_timeout_s = .*|startup_timeout_s = 20|' "$1")
if grep -v '^ *#' <<<"$out" | grep -q '/tmp/'; then
  echo "make-config.sh: $1 changed shape; update the sed:" >&2; grep -n '/tmp/' <<<"$out" >&2; exit 1
fi
printf '%s\n' "$out"

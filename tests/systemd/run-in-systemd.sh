#!/usr/bin/env bash
# Boot a real systemd (252 on Debian 12) as PID 1 of a private PID/mount/UTS/IPC namespace, install a unit,
# start it, run a check script inside the namespace, then SIGKILL that PID 1 and clean up.
#
# Usage: tests/systemd/run-in-systemd.sh [options] UNIT_FILE
#   --check SCRIPT        run SCRIPT (bash) inside the namespace once the unit is started; its exit code is
#                         the harness's. Environment: FR_UNIT (the started unit), FR_SHARE (a directory shared
#                         with the host; what the check writes there survives in --out).
#   --instance NAME       UNIT_FILE is a template (foo@.service): start foo@NAME.service
#   --copy SRC=DST        copy a file or directory into the namespace before boot (DST is absolute; /etc, /usr,
#                         /var are private overlays, /run, /tmp, /var/tmp private tmpfs). Repeatable.
#   --dropin FILE         install FILE as a drop-in of the started unit (UNIT.d/FILE). Repeatable.
#   --no-start            do not start the unit (the check starts it)
#   --private-network     also a private network namespace (only loopback, which systemd brings up)
#   --out DIR             keep logs there (systemd console, journal, check output); default: a temp dir,
#                         removed on success
#   --boot-timeout S      seconds to wait for systemd to be up (default 30)
#   --check-timeout S     seconds the check may run (default 120)
#
# Safety (see docs/systemd.md): the host's /etc, /usr, /var are never written (private overlays on tmpfs),
# /run, /tmp and /var/tmp are private tmpfs mounted before systemd starts, /proc/sys is read-only, the unit
# search path holds only a minimal set of targets plus the unit under test, and systemd-tmpfiles-*,
# systemd-sysusers and the other early units are masked. systemd is placed in its own cgroup
# (<hierarchy>/fr-harness-<pid>), removed afterwards; memory accounting is off so nothing leaves the
# caller's memory cgroup. systemd is stopped with SIGKILL to its PID 1 (SIGTERM makes it re-execute).
#
# Exit codes: 0 check passed; 1 check failed; 2 usage; 3 not root / missing tools; 4 systemd did not boot;
# 5 the unit did not start; 124 check timed out.
set -euo pipefail

die() { echo "run-in-systemd: $*" >&2; exit "${2:-2}"; }
SYSTEMD_BIN=/lib/systemd/systemd
CHECK=""; INSTANCE=""; NO_START=0; NET_NS=(); OUT=""; BOOT_TIMEOUT=30; CHECK_TIMEOUT=120
COPIES=(); DROPINS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --check) CHECK=$2; shift 2 ;;
    --instance) INSTANCE=$2; shift 2 ;;
    --copy) COPIES+=("$2"); shift 2 ;;
    --dropin) DROPINS+=("$2"); shift 2 ;;
    --no-start) NO_START=1; shift ;;
    --private-network) NET_NS=(--net); shift ;;
    --out) OUT=$2; shift 2 ;;
    --boot-timeout) BOOT_TIMEOUT=$2; shift 2 ;;
    --check-timeout) CHECK_TIMEOUT=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) [[ -z "${UNIT_FILE:-}" ]] || die "one unit file only"; UNIT_FILE=$1; shift ;;
  esac
done
[[ -n "${UNIT_FILE:-}" ]] || die "usage: $0 [options] UNIT_FILE (--help)"
[[ -f "$UNIT_FILE" ]] || die "$UNIT_FILE: no such file"
[[ -z "$CHECK" || -f "$CHECK" ]] || die "$CHECK: no such file"
[[ $(id -u) -eq 0 ]] || die "needs root (unshare --pid --mount, cgroups)" 3
for t in unshare nsenter "$SYSTEMD_BIN" systemctl; do command -v "$t" >/dev/null || die "missing $t (apt-get install -y systemd util-linux)" 3; done

UNIT_NAME=$(basename "$UNIT_FILE")
START_UNIT=$UNIT_NAME
if [[ "$UNIT_NAME" == *@.* ]]; then
  [[ -n "$INSTANCE" || $NO_START -eq 1 ]] || die "$UNIT_NAME is a template: give --instance NAME"
  [[ -z "$INSTANCE" ]] || START_UNIT=${UNIT_NAME/@./@$INSTANCE.}
fi

STAGE=$(mktemp -d /var/tmp/fr-harness.XXXXXX)
chmod 0700 "$STAGE"
KEEP_OUT=0
if [[ -n "$OUT" ]]; then mkdir -p "$OUT"; KEEP_OUT=1; fi
mkdir -p "$STAGE/in/units" "$STAGE/in/copies" "$STAGE/share" "$STAGE/log"
cp "$UNIT_FILE" "$STAGE/in/units/$UNIT_NAME"
[[ -z "$CHECK" ]] || cp "$CHECK" "$STAGE/in/check.sh"
: > "$STAGE/in/copies.list"
i=0
for c in "${COPIES[@]}"; do
  src=${c%%=*}; dst=${c#*=}
  [[ "$c" == *=* && "$dst" == /* && -e "$src" ]] || die "--copy $c: want SRC=/ABS/DST with an existing SRC"
  [[ "$dst" =~ ^/(etc|usr|var|run|tmp)/ && "$dst" != *..* ]] || die "--copy $c: DST must be under /etc, /usr, /var, /run or /tmp (the private parts)"
  cp -a "$src" "$STAGE/in/copies/$i"; printf '%s\t%s\n' "$i" "$dst" >> "$STAGE/in/copies.list"; i=$((i + 1))
done
if [[ ${#DROPINS[@]} -gt 0 ]]; then
  mkdir -p "$STAGE/in/dropins"
  for d in "${DROPINS[@]}"; do [[ -f "$d" ]] || die "--dropin $d: no such file"; cp "$d" "$STAGE/in/dropins/"; done
fi
printf '%s\n' "$START_UNIT" > "$STAGE/in/start-unit"

# The script run as PID 1 of the new namespaces, before it becomes systemd.
cat > "$STAGE/in/stage1.sh" <<'STAGE1'
#!/bin/bash
set -euo pipefail
STAGE=$1
mount --make-rprivate /
# 1. private /run first, then bring the staging directory in at /run/fr-harness
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
mkdir -p /run/fr-harness /run/.fr-overlay
mount --bind "$STAGE" /run/fr-harness
# 2. /etc, /usr, /var: overlays with the upper layer on tmpfs (the host's files are never written)
mount -t tmpfs -o mode=0700 tmpfs /run/.fr-overlay
for d in etc usr var; do
  mkdir -p /run/.fr-overlay/$d/upper /run/.fr-overlay/$d/work
  mount -t overlay overlay -o lowerdir=/$d,upperdir=/run/.fr-overlay/$d/upper,workdir=/run/.fr-overlay/$d/work /$d
done
# 3. private /tmp and /var/tmp; read-only /proc/sys (no sysctl reaches the host kernel)
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /var/tmp
mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys
# 4. the unit search path: /etc/systemd/system (private overlay), /run/systemd/system and a minimal base
IN=/run/fr-harness/in
mkdir -p /run/systemd/system /run/fr-harness-base /run/systemd/system.conf.d /run/fr-harness-gen
cp "$IN/units/"* /run/systemd/system/
START_UNIT=$(cat "$IN/start-unit")
if [[ -d "$IN/dropins" ]]; then
  mkdir -p "/run/systemd/system/$START_UNIT.d"; cp "$IN/dropins/"* "/run/systemd/system/$START_UNIT.d/"
fi
for u in basic.target sysinit.target sockets.target timers.target paths.target slices.target local-fs.target \
         local-fs-pre.target swap.target multi-user.target shutdown.target final.target umount.target \
         network.target network-pre.target network-online.target nss-lookup.target nss-user-lookup.target \
         remote-fs.target remote-fs-pre.target time-set.target time-sync.target emergency.target rescue.target \
         system.slice user.slice machine.slice \
         systemd-journald.service systemd-journald.socket systemd-journald-dev-log.socket \
         systemd-journald-audit.socket; do
  [[ -e /lib/systemd/system/$u ]] && cp /lib/systemd/system/$u /run/fr-harness-base/
done
ln -sf multi-user.target /run/fr-harness-base/default.target
mkdir -p /run/fr-harness-base/sockets.target.wants /run/fr-harness-base/sysinit.target.wants
ln -sf ../systemd-journald.socket /run/fr-harness-base/sockets.target.wants/
ln -sf ../systemd-journald-dev-log.socket /run/fr-harness-base/sockets.target.wants/
ln -sf ../systemd-journald.service /run/fr-harness-base/sysinit.target.wants/
# 5. mask the early units that act on /tmp, /etc, the kernel or the console (not in the search path anyway:
#    the masks hold even if the default path is ever added back)
for u in systemd-tmpfiles-setup.service systemd-tmpfiles-setup-dev.service systemd-tmpfiles-setup-dev-early.service \
         systemd-tmpfiles-clean.service systemd-tmpfiles-clean.timer systemd-sysusers.service \
         systemd-firstboot.service systemd-machine-id-commit.service systemd-remount-fs.service \
         systemd-update-utmp.service systemd-update-utmp-runlevel.service systemd-random-seed.service \
         systemd-journal-flush.service systemd-journal-catalog-update.service systemd-update-done.service \
         systemd-hwdb-update.service systemd-udevd.service systemd-udev-trigger.service systemd-udev-settle.service \
         systemd-udevd-control.socket systemd-udevd-kernel.socket systemd-modules-load.service \
         systemd-sysctl.service systemd-binfmt.service kmod-static-nodes.service ldconfig.service \
         systemd-logind.service getty@.service serial-getty@.service console-getty.service \
         container-getty@.service getty.target systemd-networkd.service systemd-resolved.service \
         systemd-timesyncd.service systemd-pstore.service systemd-repart.service systemd-boot-update.service \
         systemd-pcrphase.service systemd-pcrphase-sysinit.service systemd-fsck-root.service \
         systemd-ask-password-console.path systemd-ask-password-wall.path emergency.service rescue.service \
         tmp.mount dev-hugepages.mount dev-mqueue.mount sys-kernel-debug.mount sys-kernel-tracing.mount \
         sys-kernel-config.mount sys-fs-fuse-connections.mount proc-sys-fs-binfmt_misc.automount \
         cron.service dbus.service dbus.socket; do
  ln -sf /dev/null /run/systemd/system/$u
done
# 6. manager settings: no memory accounting (processes stay in the caller's memory cgroup), console logging
cat > /run/systemd/system.conf.d/fr-harness.conf <<CONF
[Manager]
DefaultMemoryAccounting=no
DefaultIOAccounting=no
DefaultIPAccounting=no
DefaultTimeoutStartSec=30s
DefaultTimeoutStopSec=30s
ShowStatus=no
CONF
# ...and for every service, whatever its unit says (MemoryAccounting=yes in a unit would move its processes
# into a memory cgroup under systemd's, out of the caller's).
mkdir -p /run/systemd/system/service.d
printf '[Service]\nMemoryAccounting=no\n' > /run/systemd/system/service.d/fr-harness-no-memory-accounting.conf
# 7. files the caller asked for
while IFS=$'\t' read -r idx dst; do
  mkdir -p "$(dirname "$dst")"; rm -rf "$dst"; cp -a "$IN/copies/$idx" "$dst"
done < "$IN/copies.list"
[[ -s /etc/machine-id ]] || systemd-machine-id-setup --print >/dev/null 2>&1 || true
mkdir -p /run/systemd/journald.conf.d
printf '[Journal]\nReadKMsg=no\nStorage=volatile\n' > /run/systemd/journald.conf.d/fr-harness.conf
# 8. PID 1 logs to /dev/console: make that a FIFO drained into the log, so nothing reaches the real console
mkfifo /run/fr-harness-console
cat 0<>/run/fr-harness-console >> /run/fr-harness/log/systemd-console.log &
[[ -e /dev/console ]] || touch /dev/console
mount --bind /run/fr-harness-console /dev/console
export container=fr-harness
export SYSTEMD_UNIT_PATH=/etc/systemd/system:/run/systemd/system:/run/fr-harness-base
export SYSTEMD_GENERATOR_PATH=/run/fr-harness-gen SYSTEMD_ENVIRONMENT_GENERATOR_PATH=/run/fr-harness-gen
touch /run/fr-harness/log/stage1.ok
export SYSTEMD_COLORS=0
exec /lib/systemd/systemd --system --log-target=journal --log-level=info --show-status=no </dev/null
STAGE1
chmod +x "$STAGE/in/stage1.sh"

NS_PID=""; UNSHARE_PID=""; CG_NAME="fr-harness-$$"
CG_HIER=(systemd unified)
cleanup() {
  local rc=$?
  set +e
  if [[ -n "$NS_PID" ]] && kill -0 "$NS_PID" 2>/dev/null; then
    kill -KILL "$NS_PID" 2>/dev/null
  elif [[ -n "$UNSHARE_PID" ]]; then
    kill -KILL "$UNSHARE_PID" 2>/dev/null   # --kill-child: its child, PID 1 of the namespace, gets SIGKILL
  fi
  [[ -z "$UNSHARE_PID" ]] || wait "$UNSHARE_PID" 2>/dev/null
  # remove the cgroups systemd made under ours, in every hierarchy, deepest first
  for h in /sys/fs/cgroup/*/; do
    local root="$h$CG_NAME"
    [[ -d "$root" ]] || continue
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      find "$root" -depth -type d -exec rmdir {} + 2>/dev/null
      [[ -d "$root" ]] || break
      sleep 0.2
    done
    [[ ! -d "$root" ]] || echo "run-in-systemd: could not remove $root" >&2
  done
  if [[ $KEEP_OUT -eq 1 ]]; then
    cp -a "$STAGE/log/." "$OUT/" 2>/dev/null; cp -a "$STAGE/share" "$OUT/" 2>/dev/null
  elif [[ $rc -ne 0 ]]; then
    echo "run-in-systemd: logs kept in $STAGE/log" >&2; STAGE_KEEP=1
  fi
  [[ -n "${STAGE_KEEP:-}" ]] || rm -rf "$STAGE"
  exit $rc
}
trap cleanup EXIT
trap 'echo "run-in-systemd: interrupted (SIGINT)" >&2; exit 130' INT
trap 'echo "run-in-systemd: terminated (SIGTERM)" >&2; exit 143' TERM

# Our own cgroup in the tracking hierarchies, so systemd builds its tree under it (and we can remove it).
# The v1 controller hierarchies (memory in particular) are left as they are.
( for h in "${CG_HIER[@]}"; do
    d=/sys/fs/cgroup/$h
    [[ -d "$d" ]] || continue
    mkdir -p "$d/$CG_NAME" && echo $BASHPID > "$d/$CG_NAME/cgroup.procs"
  done
  exec unshare --pid --fork --kill-child=SIGKILL --mount --mount-proc --uts --ipc "${NET_NS[@]}" --propagation private \
    /bin/bash "$STAGE/in/stage1.sh" "$STAGE" > "$STAGE/log/systemd-console.log" 2>&1
) &
UNSHARE_PID=$!

T0=$(date +%s.%N)
# PID 1 of the namespace is unshare's child: the process whose innermost PID (NSpid) is 1. (Before the
# subshell execs unshare it forks mkdir, so "the first child" alone is not enough.)
for _ in $(seq 1 200); do
  for c in $(cat /proc/$UNSHARE_PID/task/*/children 2>/dev/null); do
    if [[ "$(awk '/^NSpid:/{print $NF}' /proc/$c/status 2>/dev/null)" == 1 ]]; then NS_PID=$c; break 2; fi
  done
  sleep 0.05
done
[[ -n "$NS_PID" ]] || { cat "$STAGE/log/systemd-console.log" >&2; die "namespace did not start" 4; }

in_ns() { nsenter --target "$NS_PID" --mount --pid --uts --ipc "${NET_NS[@]}" --wd=/ -- "$@"; }

state=""
deadline=$(( $(date +%s) + BOOT_TIMEOUT ))
while (( $(date +%s) < deadline )); do
  kill -0 "$NS_PID" 2>/dev/null || break
  state=$(in_ns systemctl is-system-running 2>/dev/null) || true
  [[ "$state" == running || "$state" == degraded ]] && break
  sleep 0.1
done
if [[ "$state" != running && "$state" != degraded ]]; then
  echo "run-in-systemd: systemd did not come up (state '$state'); console log:" >&2
  tail -n 50 "$STAGE/log/systemd-console.log" >&2
  exit 4
fi
T_BOOT=$(date +%s.%N)
echo "run-in-systemd: systemd $(in_ns systemctl --version | awk 'NR==1{print $2}') is PID 1 (host pid $NS_PID), state $state, boot $(awk -v a="$T0" -v b="$T_BOOT" 'BEGIN{printf "%.2f", b-a}') s"
[[ "$state" == running ]] || in_ns systemctl --failed --no-legend >&2 || true

if [[ $NO_START -eq 0 ]]; then
  if ! in_ns systemctl start "$START_UNIT"; then
    echo "run-in-systemd: systemctl start $START_UNIT failed" >&2
    in_ns systemctl status --no-pager -l "$START_UNIT" >&2 || true
    in_ns journalctl --no-pager -b -u "$START_UNIT" >&2 || true
    exit 5
  fi
  echo "run-in-systemd: started $START_UNIT ($(in_ns systemctl is-active "$START_UNIT" || true))"
fi

rc=0
if [[ -n "$CHECK" ]]; then
  in_ns env FR_UNIT="$START_UNIT" FR_SHARE=/run/fr-harness/share \
    timeout "$CHECK_TIMEOUT" /bin/bash /run/fr-harness/in/check.sh 2>&1 | tee "$STAGE/log/check.log" || rc=${PIPESTATUS[0]}
fi
in_ns journalctl --no-pager -b -o short-monotonic > "$STAGE/log/journal.txt" 2>&1 || true
if [[ $rc -ne 0 ]]; then
  [[ $rc -eq 124 ]] || rc=1
  echo "run-in-systemd: check failed (exit $rc); journal of $START_UNIT:" >&2
  grep -F "$START_UNIT" "$STAGE/log/journal.txt" | tail -n 40 >&2 || true
fi
echo "run-in-systemd: done in $(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}') s, check exit $rc"
exit $rc

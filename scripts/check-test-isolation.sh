#!/usr/bin/env bash
# Test isolation (CONTRIBUTING.md, "Tests"): a test works only under its own temporary directory, never in
# the system's /run/fastrestart, where an installed fastrestart (or another test running at the same time,
# ctest -j) keeps its sockets and locks.
#   scripts/check-test-isolation.sh             fails naming every test source that names /run/fastrestart
#                                               outside the allow-list below: tests that run fastrestart in
#                                               a private mount namespace on purpose, where /run/fastrestart
#                                               is their own (about a second)
#   scripts/check-test-isolation.sh -- CMD...   runs CMD (scripts/test.sh: the ctest phase) and fails if
#                                               /run/fastrestart was made or changed meanwhile: a test that
#                                               falls back to the default socket directory (as root a
#                                               daemon, fastrestartd or weightctl without a socket dir of
#                                               its own uses /run/fastrestart) names no path a grep finds.
#                                               Meant for a machine where nothing else uses that directory
#                                               (CI); it compares the directory's modification time.
set -euo pipefail
cd "$(dirname "$0")/.."
readonly sysdir=/run/fastrestart

if [[ ${1:-} == -- ]]; then
  shift
  stamp() { stat -c '%y' "$sysdir" 2>/dev/null || echo absent; }
  before=$(stamp)
  rc=0
  "$@" || rc=$?
  after=$(stamp)
  if [[ $before != "$after" ]]; then
    echo "scripts/check-test-isolation.sh: $sysdir was $([[ $before == absent ]] && echo made || echo changed)" \
         "while '$*' ran: a test used the system's socket directory instead of its own temporary one" \
         "(now: $(ls -A "$sysdir" 2>/dev/null | tr '\n' ' '))" >&2
    ((rc)) || rc=1
  fi
  exit "$rc"
fi

# path prefix: why it may name /run/fastrestart
allow=(
  "tests/systemd/: a private systemd in its own PID and mount namespaces (run-in-systemd.sh), /run its own"
  "tests/container/: fastrestartd as PID 1 of its own namespaces, or in a podman container"
  "tests/supervisor/control_discovery_test.cc: asserts the documented default directory as a string; opens nothing"
)

allowed() {
  local f=$1 entry
  for entry in "${allow[@]}"; do
    [[ $f == "${entry%%: *}"* ]] && return 0
  done
  return 1
}

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -co --exclude-standard -- tests python/tests)
else
  mapfile -t files < <(find tests python/tests -type f)
fi
bad=0
for f in "${files[@]}"; do
  [[ -f $f ]] || continue
  allowed "$f" && continue
  if hits=$(grep -n -F '/run/fastrestart' "$f"); then
    while IFS= read -r line; do echo "$f:$line"; done <<<"$hits"
    bad=1
  fi
done
if ((bad)); then
  echo "scripts/check-test-isolation.sh: the test sources above name /run/fastrestart, the system's socket" \
       "directory: give the daemon, engine and fastrestartd a socket_dir / --socket-dir under the test's own" \
       "temporary directory (CONTRIBUTING.md, \"Tests\")" >&2
  exit 1
fi
echo "scripts/check-test-isolation.sh: no test source outside the allow-list names /run/fastrestart (${#files[@]} files)"

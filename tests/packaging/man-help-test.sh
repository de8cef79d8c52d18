#!/bin/bash
# The man pages stay true to the programs: every option and subcommand a program's --help lists (and every
# option of each subcommand's --help) appears in the page's sources, and every subcommand the page documents
# as an entry ("**name**" at the start of a line under COMMANDS) still exists. The sources of each page are the ones
# packaging/Packaging.cmake renders ("page|docs/man/page.md,docs/reference.md").
# Usage: man-help-test.sh SOURCE_DIR PROGRAM... (built binaries; the page is found by the program's name).
set -uo pipefail
src=$1; shift
fail=0
ok()  { echo "ok   - $*"; }
bad() { echo "FAIL - $*"; fail=1; }

# --help sections: "Options:" and "Fault injection (tests only):" style groups list options, "Subcommands:"
# lists subcommands, "Positionals:" arguments (not checked).
options_of() { "$@" --help 2>&1 | grep -oE '^  +(-[a-zA-Z],)?--[a-z][a-z0-9-]*' | sed -E 's/.*(--[a-z0-9-]+)$/\1/' | grep -vx -- --help; }
subcommands_of() { "$@" --help 2>&1 | sed -n '/^Subcommands:/,/^$/p' | grep -oE '^  [a-z][a-z-]*'; }

for prog in "$@"; do
  name=$(basename "$prog")
  entry=$(grep -oE "\"$name\.[0-9]\|[^\"]+\"" "$src/packaging/Packaging.cmake" | tr -d '"')
  [[ -n "$entry" ]] || { bad "$name: no man page in packaging/Packaging.cmake"; continue; }
  page_sources=()
  IFS=, read -ra rel <<< "${entry#*|}"
  for r in "${rel[@]}"; do page_sources+=("$src/$r"); done
  text=$(cat "${page_sources[@]}" | sed 's/\\-/-/g')   # pandoc sources escape "--" as "\-\-"
  man=${entry%%|*}
  missing=()
  for o in $(options_of "$prog"); do grep -qF -- "$o" <<< "$text" || missing+=("$o"); done
  subs=$(subcommands_of "$prog")
  for s in $subs; do
    # an entry "**sub**", a usage line starting with it, or "program sub" in the text
    grep -qE "(\*\*$s\*\*|^ +$s( |$)|$name $s\b)" <<< "$text" || missing+=("subcommand $s")
    for o in $(options_of "$prog" "$s"); do grep -qF -- "$o" <<< "$text" || missing+=("$s $o"); done
  done
  [[ ${#missing[@]} -eq 0 ]] && ok "$man documents every option and subcommand of $name --help" \
    || bad "$man (${entry#*|}) lacks what $name --help lists: ${missing[*]}"
  # The reverse for subcommands: an entry "**word**" at the start of a line in the page's COMMANDS section.
  if [[ -n "$subs" ]]; then
    documented=$(sed -n '/^# COMMANDS/,/^# /p' "${page_sources[0]}" | grep -oE '^\*\*[a-z][a-z-]*\*\*' | tr -d '*' | sort -u)
    stale=$(comm -23 <(echo "$documented" | grep .) <(echo "$subs" | sed 's/^ *//' | sort -u) | tr '\n' ' ')
    [[ -z "$stale" ]] && ok "$man documents no subcommand $name lacks" || bad "$man documents subcommands $name lacks: $stale"
  fi
done
exit $fail

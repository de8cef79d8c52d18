#!/usr/bin/env bash
# The README's demo (no GPU needed): installs dependencies, builds, then shows a weight daemon on the host
# backend preloading a generated checkpoint and an engine-side client attaching to it zero-copy.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
exec scripts/demo-run.sh "$@"

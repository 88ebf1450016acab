#!/usr/bin/env bash
# Downloads what every Go module of the repository needs to build and test (the main module,
# test/, test/legacymcp/, docs/example-adapter/), before anything else of `make test` runs, under the stall watchdog of
# scripts/gofetch.sh: a request the module proxy never answers is retried instead of hanging
# `go vet` or `go test` until CI's time runs out.
#
#   scripts/deps.sh        (make deps)
#
# `go list -deps -test` loads every package and test of a module, which needs each module's .mod
# and .zip and nothing else (no .info). A failure prints one line saying what to do.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
# shellcheck source=scripts/cache-dir.sh
source "$SCRIPT_DIR/cache-dir.sh"
# shellcheck source=scripts/gofetch.sh
source "$SCRIPT_DIR/gofetch.sh"

export GOWORK=off
for mod in . test test/legacymcp docs/example-adapter; do
	log=$(galleon_go_log "deps-${mod//\//-}")
	start=$SECONDS
	if ! GOFLAGS="${GOFLAGS:-} -mod=readonly" galleon_go_retry "$log" "$REPO_DIR/$mod" list -deps -test ./... >/dev/null; then
		galleon_go_failure deps.sh "$log" "go list -deps -test ./... in $mod (committed go.sum)" "retry later (make test resumes where the downloads stopped)"
		exit 1
	fi
	rm -f "$log" # kept only when something went wrong
	if ((SECONDS - start > 2)); then
		echo "deps.sh: modules of $mod ready in $((SECONDS - start)) s" >&2
	fi
done

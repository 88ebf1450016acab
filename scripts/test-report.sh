#!/usr/bin/env bash
# Runs `go test -v` in a module and prints what a reader of CI needs: go test's own summary lines
# (ok / FAIL per package) and the result of every per-release sub-test (istiod-<release>,
# adsc-<release>), so the e2e results show per istiod release. On a failure it prints the whole
# verbose log, so nothing of the failure is hidden.
#
#   scripts/test-report.sh DIR [go test args...]     e.g. scripts/test-report.sh test -count=1 ./...
set -uo pipefail

dir=$1
shift
log=$(mktemp "${TMPDIR:-/tmp}/galleon-test.XXXXXX")
trap 'rm -f "$log"' EXIT

(cd "$dir" && "${GO:-go}" test -v "$@") >"$log" 2>&1
rc=$?
if [[ $rc -ne 0 ]]; then
	cat "$log"
	echo "go test in $dir failed (exit $rc): the full verbose log is above" >&2
	exit "$rc"
fi
# Per-release sub-tests, then go test's package lines.
grep -E '^[[:space:]]+--- (PASS|FAIL|SKIP): [^ ]+/(istiod|adsc)-[^ /]+(/[^ ]+)? ' "$log" | sed -E 's/^[[:space:]]+//'
grep -E '^(ok|FAIL|---|PASS$|\?)[[:space:]]' "$log" | grep -Ev '^--- (PASS|SKIP)'
exit 0

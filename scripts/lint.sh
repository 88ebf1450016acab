#!/usr/bin/env bash
# Static analysis beyond go vet, run by `make lint` (part of `make test`):
#   - staticcheck, at the version scripts/tools/lint/go.mod pins, built there with `go build` from
#     its committed go.sum (only .mod and .zip files are fetched) and cached outside the repository
#     as $(scripts/cache-dir.sh bin)/staticcheck-<version>; run on the main module, test/ and
#     test/legacymcp, docs/example-adapter (a partner's module) and scripts/tools/images (the image
#     writer and its test; its modules are fetched first by scripts/images.sh deps).
# Not here: a `go mod tidy -diff` check. Tidy needs the go.mod of the test dependencies of every
# dependency, which the module cache `make deps` fills does not hold; fetching them would add
# minutes and many proxy requests to every CI run. A go.mod that a build needs changed already
# fails: every build and test runs with -mod=readonly.
#
#   scripts/lint.sh            run staticcheck on every module
#   scripts/lint.sh path       print the staticcheck binary's path (building it if needed)
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
TOOLS_DIR="$SCRIPT_DIR/tools/lint"
# shellcheck source=scripts/cache-dir.sh
source "$SCRIPT_DIR/cache-dir.sh"
# shellcheck source=scripts/gofetch.sh
source "$SCRIPT_DIR/gofetch.sh"
export GOWORK=off

MODULES=(. test test/legacymcp)
[[ -f "$REPO_DIR/docs/example-adapter/go.mod" ]] && MODULES+=(docs/example-adapter)
[[ -f "$REPO_DIR/scripts/tools/images/go.mod" ]] && MODULES+=(scripts/tools/images)
MODULES+=(scripts/tools/buildshare)

build_staticcheck() {
	local out=$1 log
	log=$(galleon_go_log staticcheck)
	if galleon_go_build "$log" "$TOOLS_DIR" "$out" honnef.co/go/tools/cmd/staticcheck; then
		return 0
	fi
	galleon_go_failure lint.sh "$log" "go build staticcheck from scripts/tools/lint/go.sum" \
		"retry later, or set GALLEON_STATICCHECK to a staticcheck binary of the same version"
	return 1
}

staticcheck_bin() {
	if galleon_env_binary lint.sh GALLEON_STATICCHECK staticcheck; then
		return
	fi
	local version
	version=$(galleon_gomod_require "$TOOLS_DIR" honnef.co/go/tools)
	galleon_build_cached staticcheck "$version" build_staticcheck | tail -n1
}

case "${1:-}" in
path)
	staticcheck_bin
	exit 0
	;;
"") ;;
*)
	sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac

sc=$(staticcheck_bin)
# make deps does not cover the image writer's module: fetch it under the stall watchdog, not from
# inside staticcheck.
if [[ " ${MODULES[*]} " == *" scripts/tools/images "* ]]; then
	"$SCRIPT_DIR/images.sh" deps
fi
failed=0
for m in "${MODULES[@]}"; do
	echo "lint.sh: staticcheck ./... in $m" >&2
	(cd "$REPO_DIR/$m" && "$sc" ./...) || failed=1
done
exit "$failed"

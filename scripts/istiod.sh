#!/usr/bin/env bash
# Builds and caches Istio's control plane (pilot-discovery = istiod) for Galleon's e2e tests.
#
#   scripts/istiod.sh build   build pilot-discovery 1.29.2 unless cached; prints its path last on stdout
#   scripts/istiod.sh path    print the cached path (exit 1 if it has not been built)
#   scripts/istiod.sh tidy    refresh test/go.mod + test/go.sum (needs GONOSUMDB, see below)
#
# The binary comes from the Go module proxy through the test module (test/go.mod: `tool
# istio.io/istio/pilot/cmd/pilot-discovery`, istio.io/istio pinned to the 1.29.2 pseudo-version plus
# istio.io/api and istio.io/client-go v1.29.2). test/go.sum is committed, so `build` is a normal
# read-only `go build`; GONOSUMDB=github.com/openshift/api is only needed by `tidy` (the checksum
# database answers 404 for that module). Cached at $(scripts/cache-dir.sh bin)/pilot-discovery-1.29.2,
# outside the repository; tests find it there (or through $GALLEON_PILOT_DISCOVERY).
# Cold build (empty Go build cache) on 2 cores: 4.5 min idle, 7 min on a busy machine; cached afterwards.
set -euo pipefail

ISTIO_VERSION=1.29.2
# istio.io/istio has no semver tags usable by the Go proxy; this is what istio.io/istio@1.29.2 resolves to.
ISTIO_MODULE_VERSION=v0.0.0-20260409200358-0c774325b938
ISTIO_GIT_REVISION=0c774325b938

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
TEST_MODULE="$REPO_DIR/test"
# shellcheck source=scripts/cache-dir.sh
source "$SCRIPT_DIR/cache-dir.sh"

# A go.work above the repository must not change which versions get built.
export GOWORK=off

usage() {
	sed -n '2,6p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

# The module proxy answers 403 for istio.io/istio's pseudo-version .info,
# which `go list -m` and `go build` want, while it serves the same commit when
# asked by its tag. Asking by tag once stores the .info in the module cache,
# after which everything works from the cache. On a warm cache this costs a
# lookup in it and nothing else.
prime_module_cache() {
	if ! (cd "$TEST_MODULE" && go mod download "istio.io/istio@$ISTIO_VERSION" >/dev/null); then
		echo "could not download istio.io/istio@$ISTIO_VERSION from the Go module proxy" >&2
		exit 1
	fi
}

check_pin() {
	prime_module_cache
	local got
	got=$(cd "$TEST_MODULE" && go list -m -f '{{.Version}}' istio.io/istio)
	if [[ "$got" != "$ISTIO_MODULE_VERSION" ]]; then
		echo "test/go.mod pins istio.io/istio $got, expected $ISTIO_MODULE_VERSION (Istio $ISTIO_VERSION)" >&2
		exit 1
	fi
}

build_pilot_discovery() {
	local out=$1 v=istio.io/istio/pkg/version
	echo "building pilot-discovery $ISTIO_VERSION (first time, ~5-7 min)..." >&2
	if ! (cd "$TEST_MODULE" && go build -o "$out" \
		-ldflags "-X $v.buildVersion=$ISTIO_VERSION -X $v.buildGitRevision=$ISTIO_GIT_REVISION -X $v.buildTag=$ISTIO_VERSION -X $v.buildStatus=Clean" \
		istio.io/istio/pilot/cmd/pilot-discovery >&2); then
		echo "go build failed; if it reports missing go.sum entries run: scripts/istiod.sh tidy" >&2
		return 1
	fi
}

cmd=${1:-}
case "$cmd" in
build)
	check_pin
	galleon_build_cached pilot-discovery "$ISTIO_VERSION" build_pilot_discovery
	;;
path)
	bin=$(galleon_bin_path pilot-discovery "$ISTIO_VERSION")
	if [[ ! -x "$bin" ]]; then
		echo "$bin does not exist; run scripts/istiod.sh build" >&2
		exit 1
	fi
	printf '%s\n' "$bin"
	;;
tidy)
	cd "$TEST_MODULE"
	GONOSUMDB=github.com/openshift/api GOFLAGS=-mod=mod go mod tidy
	check_pin
	;;
*) usage ;;
esac

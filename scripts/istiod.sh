#!/usr/bin/env bash
# Builds and caches Istio's control plane (pilot-discovery = istiod) for Galleon's e2e tests.
#
#   scripts/istiod.sh build [RELEASE]   build pilot-discovery RELEASE (default 1.29.2) unless cached; prints its path last on stdout
#   scripts/istiod.sh path [RELEASE]    print the cached path (exit 1 if it has not been built)
#   scripts/istiod.sh releases          list the releases this script knows: RELEASE MODULE-DIR ISTIO-VERSION
#   scripts/istiod.sh tidy [RELEASE]    refresh the release's go.mod + go.sum (asks the proxy for more than a build does)
#
# Each release is built from a Go module committed in this repository whose go.mod pins
# istio.io/istio (and istio.io/api, istio.io/client-go) and whose go.sum is committed: `go build`
# then needs only the `.mod` and `.zip` of each module, never `.info`, which the proxy refuses for
# istio.io/istio's pseudo-versions on some days (docs/istiod-releases.md has the history).
# 1.29.2 is built from test/ (test/go.mod: `tool istio.io/istio/pilot/cmd/pilot-discovery`), the
# same module whose pkg/adsc the conformance tests compile. Cached at
# $(scripts/cache-dir.sh bin)/pilot-discovery-<RELEASE>, outside the repository; tests find it there.
# GALLEON_PILOT_DISCOVERY=/path/to/pilot-discovery skips the build of the default release.
# Cold build (empty Go build cache) on 2 cores: about 2 min idle, 7 min on a busy machine.
set -euo pipefail

DEFAULT_RELEASE=1.29.2
# RELEASE|module dir (relative to the repository)|istio.io/istio version pinned there|git revision|other spellings of the same commit, tried in order when the pinned one is refused
RELEASES=(
	"1.29.2|test|v0.0.0-20260409200358-0c774325b938|0c774325b938|1.29.2"
	# The 1.31 development line: it cannot start without a Kubernetes API server, which the e2e
	# harness then starts for it (test/istiod Release.NeedsKubernetes, test/kube).
	"1.31-dev|scripts/tools/kubernetes|v0.0.0-20260827124520-eed52ebb66ad|eed52ebb66ad|"
	# Istio 1.30 as the proxy serves it: commit b01690e6db7d on master, 10 days after release-1.30
	# branched, whose pilot/pkg/serviceregistry/serviceentry, pilot/pkg/xds/discovery.go,
	# pilot/pkg/model/push_context.go and pilot/pkg/bootstrap are the 1.30.0 tag's, byte for byte
	# (the 1.30.x release commits answer 403; docs/istiod-releases.md). Needs a Kubernetes API
	# server, like 1.31-dev. No other spelling: the commit has no tag.
	"1.30-b01690e|scripts/tools/istiod-1.30|v0.0.0-20260423205519-b01690e6db7d|b01690e6db7d|"
)

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
# shellcheck source=scripts/cache-dir.sh
source "$SCRIPT_DIR/cache-dir.sh"
# shellcheck source=scripts/gofetch.sh
source "$SCRIPT_DIR/gofetch.sh"

# A go.work above the repository must not change which versions get built.
export GOWORK=off

usage() {
	sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

# release_fields RELEASE: sets REL, MODDIR, MODVERSION, GITREV, SPELLINGS (array).
release_fields() {
	local want=$1 line
	for line in "${RELEASES[@]}"; do
		IFS='|' read -r REL MODDIR MODVERSION GITREV spellings <<<"$line"
		if [[ "$REL" == "$want" ]]; then
			MODDIR="$REPO_DIR/$MODDIR"
			read -r -a SPELLINGS <<<"${spellings//,/ }"
			return 0
		fi
	done
	echo "istiod.sh: unknown release $want; known: $(printf '%s ' "${RELEASES[@]%%|*}")(add one: docs/istiod-releases.md)" >&2
	exit 2
}

# check_pin: the module pins the istio.io/istio version this script expects (read from go.mod,
# no network).
check_pin() {
	local got
	got=$(galleon_gomod_require "$MODDIR" istio.io/istio)
	if [[ "$got" != "$MODVERSION" ]]; then
		echo "istiod.sh: ${MODDIR#"$REPO_DIR"/}/go.mod pins istio.io/istio ${got:-nothing}, expected $MODVERSION (Istio $REL): fix RELEASES in scripts/istiod.sh or the go.mod" >&2
		exit 1
	fi
}

build_pilot_discovery() {
	local out=$1 v=istio.io/istio/pkg/version log tried s
	local ldflags="$GALLEON_TOOL_LDFLAGS -X $v.buildVersion=$REL -X $v.buildGitRevision=$GITREV -X $v.buildTag=$REL -X $v.buildStatus=Clean"
	log=$(galleon_go_log "pilot-discovery-$REL")
	echo "building pilot-discovery $REL from ${MODDIR#"$REPO_DIR"/}/go.mod (first time, ~2-10 min; log $log)..." >&2
	tried="go build from the committed go.sum (istio.io/istio@$MODVERSION)"
	if galleon_go_build "$log" "$MODDIR" "$out" istio.io/istio/pilot/cmd/pilot-discovery -ldflags "$ldflags"; then
		return 0
	fi
	# Refused by the proxy: another spelling of the same commit may be served today. What it
	# resolves to lands in the module cache under the pinned version, and the build goes on from
	# there (go.sum still verifies the content).
	if [[ -n "$(galleon_go_refused_module "$log")" ]]; then
		for s in "${SPELLINGS[@]}"; do
			[[ -z "$s" ]] && continue
			tried="$tried, then istio.io/istio@$s"
			echo "the proxy refused the pinned version; trying istio.io/istio@$s ..." >&2
			if galleon_go_download "$log" "$MODDIR" "istio.io/istio@$s" &&
				galleon_go_build "$log" "$MODDIR" "$out" istio.io/istio/pilot/cmd/pilot-discovery -ldflags "$ldflags"; then
				return 0
			fi
		done
	fi
	# GALLEON_PILOT_DISCOVERY replaces the default release only; another release's binary is given
	# to the tests in GALLEON_ISTIOD_RELEASES (test/istiod/releases.go).
	local instead="set GALLEON_PILOT_DISCOVERY to a pilot-discovery $REL binary"
	[[ "$REL" != "$DEFAULT_RELEASE" ]] && instead="give the tests a pilot-discovery $REL binary: GALLEON_ISTIOD_RELEASES=$REL=/path/to/pilot-discovery"
	galleon_go_failure istiod.sh "$log" "$tried" "retry later, or $instead"
	return 1
}

cmd=${1:-}
release=${2:-$DEFAULT_RELEASE}
case "$cmd" in
build)
	release_fields "$release"
	if [[ "$REL" == "$DEFAULT_RELEASE" ]] && galleon_env_binary istiod.sh GALLEON_PILOT_DISCOVERY pilot-discovery; then
		exit 0
	fi
	check_pin
	galleon_build_cached pilot-discovery "$REL" build_pilot_discovery
	;;
path)
	release_fields "$release"
	if [[ "$REL" == "$DEFAULT_RELEASE" ]] && galleon_env_binary istiod.sh GALLEON_PILOT_DISCOVERY pilot-discovery; then
		exit 0
	fi
	bin=$(galleon_bin_path pilot-discovery "$REL")
	if [[ ! -x "$bin" ]]; then
		echo "$bin does not exist; run scripts/istiod.sh build $REL" >&2
		exit 1
	fi
	printf '%s\n' "$bin"
	;;
releases)
	for line in "${RELEASES[@]}"; do
		IFS='|' read -r r d m _ <<<"$line"
		printf '%s %s %s\n' "$r" "$d" "$m"
	done
	;;
tidy)
	release_fields "$release"
	cd "$MODDIR"
	# The checksum database answers 404 for github.com/openshift/api, and for the 1.30 line's
	# pins of github.com/agentgateway/agentgateway/api and github.com/envoyproxy/go-control-plane/contrib
	# (2026-11-26); builds need no checksum database, go.sum is committed.
	GONOSUMDB=github.com/openshift/api,github.com/agentgateway/agentgateway/api,github.com/envoyproxy/go-control-plane/contrib GOFLAGS=-mod=mod go mod tidy
	check_pin
	;;
*) usage ;;
esac

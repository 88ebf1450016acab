#!/usr/bin/env bash
# Rehearses a new user's first run: clones the current commit into a temporary directory and runs
# the README's two commands there, `make demo` then `make test`, with an empty Go module cache, an
# empty Go build cache, an empty Galleon tool cache (istiod, Consul, protoc plugins) and an empty
# user cache directory (staticcheck keeps its analysis there), then
# prints the wall time of each stage.
#
#   scripts/fresh-machine.sh            rehearse HEAD (uncommitted changes are not included)
#   make fresh-machine                  the same
#   FRESH_KEEP=1 scripts/fresh-machine.sh   keep the temporary directory (clone, caches, logs)
#   FRESH_STAGES="test" scripts/fresh-machine.sh   run only some of: demo test
#
# What it cannot empty: Debian packages already installed on this machine (protoc, and later
# ZooKeeper) and the Go toolchain itself. Everything else starts from nothing. Output of each
# stage goes to <tmp>/logs/<stage>.log; the last lines of a failing stage are printed.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
STAGES=${FRESH_STAGES:-demo test}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/galleon-fresh.XXXXXX")
cleanup() {
	# The module cache is read-only by design; make it removable first.
	if [[ -z "${FRESH_KEEP:-}" ]]; then
		chmod -R u+w "$tmp" 2>/dev/null || true
		rm -rf "$tmp"
	else
		echo "kept $tmp" >&2
	fi
}
trap cleanup EXIT

commit=$(git -C "$REPO_DIR" rev-parse HEAD)
if [[ -n "$(git -C "$REPO_DIR" status --porcelain --untracked-files=no)" ]]; then
	echo "fresh-machine: note: uncommitted changes are not rehearsed (HEAD is $commit)" >&2
fi
git clone --quiet --no-hardlinks "$REPO_DIR" "$tmp/galleon"
git -C "$tmp/galleon" checkout --quiet "$commit"
mkdir -p "$tmp/logs" "$tmp/gomodcache" "$tmp/gocache" "$tmp/galleon-cache" "$tmp/user-cache/staticcheck"

# A new user's environment: empty caches, none of Galleon's overrides.
run_env=(
	env -u GALLEON_PILOT_DISCOVERY -u GALLEON_CONSUL_BIN -u GALLEON_ISTIOD_RELEASES -u GALLEON_E2E_BIN_DIR
	-u GALLEON_KUBE_APISERVER_BIN -u GALLEON_KUBECTL_BIN -u GALLEON_ETCD_BIN -u GALLEON_HELM_BIN
	GOMODCACHE="$tmp/gomodcache" GOCACHE="$tmp/gocache" GALLEON_CACHE="$tmp/galleon-cache"
	# staticcheck keeps its analysis cache under the user cache directory, not Go's build cache.
	XDG_CACHE_HOME="$tmp/user-cache" STATICCHECK_CACHE="$tmp/user-cache/staticcheck"
	GOWORK=off
)

declare -A took
declare -A result
total_start=$SECONDS
for stage in $STAGES; do
	log="$tmp/logs/$stage.log"
	echo "fresh-machine: make $stage (log $log) ..." >&2
	start=$SECONDS
	if (cd "$tmp/galleon" && "${run_env[@]}" make "$stage" </dev/null >"$log" 2>&1); then
		result[$stage]=ok
	else
		result[$stage]="FAILED (exit $?)"
	fi
	took[$stage]=$((SECONDS - start))
	echo "fresh-machine: make $stage: ${result[$stage]} in $((took[$stage] / 60)) min $((took[$stage] % 60)) s" >&2
	if [[ "${result[$stage]}" != ok ]]; then
		tail -n 40 "$log" >&2
		FRESH_KEEP=1
		break
	fi
	if [[ "$stage" == test ]]; then
		# go test's own summary lines, as CI shows them.
		grep -E '^(ok|FAIL|---|PASS)[[:space:]]' "$log" | grep -v -- '--- PASS' >&2 || true
	fi
done

echo >&2
echo "fresh-machine rehearsal of $commit ($(nproc) cores, $(date -u +%Y-%m-%d)):" >&2
for stage in $STAGES; do
	[[ -n "${took[$stage]:-}" ]] || continue
	printf '  make %-5s %-12s %3d min %2d s\n' "$stage" "${result[$stage]}" $((took[$stage] / 60)) $((took[$stage] % 60)) >&2
done
printf '  total                   %3d min %2d s\n' $(((SECONDS - total_start) / 60)) $(((SECONDS - total_start) % 60)) >&2
for stage in $STAGES; do
	[[ "${result[$stage]:-ok}" == ok ]] || exit 1
done

#!/usr/bin/env bash
# Builds and caches HashiCorp Consul for the Consul adapter's integration tests.
#
#   scripts/consul.sh build   build consul 1.22.6 unless cached; prints its path last on stdout
#   scripts/consul.sh path    print the cached path (exit 1 if it has not been built)
#
# No Debian package ships Consul and `go install github.com/hashicorp/consul@v1.22.6` refuses it
# (its go.mod has replace directives). So the binary is built from the Go module proxy through a
# wrapper module kept in the cache directory, never in the repository:
#   $(scripts/cache-dir.sh dir)/src/consul-1.22.6/go.mod:
#     module galleon-consul-build
#     require github.com/hashicorp/consul v1.22.6
#     + Consul's own `require` and `exclude` blocks, copied from the proxy's
#       github.com/hashicorp/consul/@v/v1.22.6.mod
# Consul's `replace` directives point at its nested modules (./api, ./sdk, ...) which are not part
# of the module zip; they are dropped, so the published versions its `require` block already pins
# (api v1.33.4, sdk v0.17.2, ...) are used. The checksum database does not know some of these
# versions, hence GONOSUMDB=github.com/hashicorp/consul (prefix: covers the nested modules too).
# Cached at $(scripts/cache-dir.sh bin consul 1.22.6); tests find it there (or through
# $GALLEON_CONSUL_BIN). Cold build on 2 cores: about 5 min idle, 9 min on a busy machine (~1.7 GB
# module source, ~1.5 GB build cache, 171 MiB binary); cached afterwards.
set -euo pipefail

CONSUL_VERSION=1.22.6
CONSUL_MODULE=github.com/hashicorp/consul

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/cache-dir.sh
source "$SCRIPT_DIR/cache-dir.sh"

# A go.work above the cache dir or the repository must not change which versions get built.
export GOWORK=off

usage() {
	sed -n '2,5p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

# proxy_base prints the first http(s) entry of GOPROXY (default proxy.golang.org).
proxy_base() {
	local p entry
	p=$(go env GOPROXY)
	IFS=',|' read -r -a entries <<<"$p"
	for entry in "${entries[@]}"; do
		case "$entry" in
		http://* | https://*)
			printf '%s\n' "${entry%/}"
			return 0
			;;
		esac
	done
	printf '%s\n' https://proxy.golang.org
}

# write_wrapper_module DIR: DIR/go.mod = wrapper around Consul's require/exclude blocks.
write_wrapper_module() {
	local dir=$1 url mod goline
	mkdir -p "$dir"
	url="$(proxy_base)/$CONSUL_MODULE/@v/v$CONSUL_VERSION.mod"
	mod="$dir/consul.mod"
	echo "fetching $url" >&2
	if ! curl -fsSL --retry 3 -o "$mod.tmp" "$url"; then
		echo "could not download $url" >&2
		return 1
	fi
	mv -f "$mod.tmp" "$mod"
	goline=$(grep -m1 -E '^go [0-9]' "$mod" || echo "go 1.25")
	{
		echo "module galleon-consul-build"
		echo
		echo "$goline"
		echo
		echo "require $CONSUL_MODULE v$CONSUL_VERSION"
		echo
		# Copy every `require (...)`, `exclude (...)` block (and single-line forms); drop
		# `replace` (local paths into Consul's repository), `module`, `go`, `toolchain`, `tool`.
		awk '
			/^(require|exclude) \($/ { inblk = 1; print; next }
			inblk { print; if ($0 ~ /^\)/) { inblk = 0; print "" } ; next }
			/^(require|exclude) [^(]/ { print; next }
		' "$mod"
	} >"$dir/go.mod"
}

build_consul() {
	local out=$1 dir
	dir="$(galleon_cache_dir)/src/consul-$CONSUL_VERSION"
	write_wrapper_module "$dir" || return 1
	echo "building consul $CONSUL_VERSION in $dir (first time, ~5 min)..." >&2
	# The version itself comes from the embedded version/VERSION file; only the commit is unset.
	local v=$CONSUL_MODULE/version
	if ! (cd "$dir" && GONOSUMDB=$CONSUL_MODULE GOFLAGS=-mod=mod go build -trimpath -o "$out" \
		-ldflags "-X $v.GitCommit=v$CONSUL_VERSION" \
		"$CONSUL_MODULE" >&2); then
		echo "go build of $CONSUL_MODULE@v$CONSUL_VERSION failed (wrapper module: $dir/go.mod)" >&2
		return 1
	fi
	"$out" version >&2 || true
}

cmd=${1:-}
case "$cmd" in
build)
	galleon_build_cached consul "$CONSUL_VERSION" build_consul
	;;
path)
	bin=$(galleon_bin_path consul "$CONSUL_VERSION")
	if [[ ! -x "$bin" ]]; then
		echo "$bin does not exist; run scripts/consul.sh build (or make consul)" >&2
		exit 1
	fi
	printf '%s\n' "$bin"
	;;
*) usage ;;
esac

#!/usr/bin/env bash
# Generates Galleon's Go code from proto/**/*.proto (the legacy MCP services, issue #3).
#
#   scripts/proto.sh generate   regenerate the committed *.pb.go files under proto/ (`make proto`)
#   scripts/proto.sh check      regenerate into a temp dir and fail if the committed files differ
#   scripts/proto.sh tools      install the tools only; prints protoc and the plugin paths
#
# Installs what it needs itself:
#   - protoc + well-known types: `apt-get install protobuf-compiler libprotobuf-dev` (Debian: protoc
#     3.21.12), only if protoc or google/protobuf/*.proto is missing; needs root (or sudo).
#   - protoc-gen-go and protoc-gen-go-grpc at the versions scripts/tools/protoc-gen/go.mod pins,
#     built there with `go build` from its committed go.sum (never `go install pkg@version`, which
#     asks the proxy for .info) and cached outside the repository as
#     $(scripts/cache-dir.sh bin)/<name>-<version>.
#   - imports: istio.io/api (mcp/v1alpha1/resource.proto, and google/rpc/status.proto from its
#     common-protos/) from the Go module cache, at the version go.mod requires.
# The "// protoc vX.Y.Z" header line is ignored by `check`, so a different protoc version on a
# developer machine does not make the check fail; everything else must match byte for byte.
set -euo pipefail

PROTOC_GEN_GO_VERSION= PROTOC_GEN_GO_GRPC_VERSION= # read from scripts/tools/protoc-gen/go.mod

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
PROTO_DIR="$REPO_DIR/proto"
TOOLS_DIR="$SCRIPT_DIR/tools/protoc-gen"
# shellcheck source=scripts/cache-dir.sh
source "$SCRIPT_DIR/cache-dir.sh"
# shellcheck source=scripts/gofetch.sh
source "$SCRIPT_DIR/gofetch.sh"
# shellcheck source=scripts/apt.sh
source "$SCRIPT_DIR/apt.sh"

# A go.work above the repository must not change which versions are used.
export GOWORK=off

usage() {
	sed -n '2,6p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

log() { echo "proto.sh: $*" >&2; }

tmp= # the temporary directory of generate/check, removed on exit

# well_known_include prints the include dir holding google/protobuf/any.proto next to protoc.
well_known_include() {
	local protoc d
	protoc=$(command -v protoc) || return 1
	for d in "$(dirname "$protoc")/../include" /usr/include /usr/local/include; do
		if [[ -f "$d/google/protobuf/any.proto" ]]; then
			(cd "$d" && pwd)
			return 0
		fi
	done
	return 1
}

ensure_protoc() {
	if command -v protoc >/dev/null 2>&1 && well_known_include >/dev/null; then
		return 0
	fi
	galleon_apt_install proto.sh "protoc (with google/protobuf/*.proto)" \
		"install protoc >= 3.21 with its google/protobuf/*.proto include files and put it on PATH, then run make again" \
		protobuf-compiler libprotobuf-dev || exit 1
	well_known_include >/dev/null || { log "protoc installed but google/protobuf/any.proto not found"; exit 1; }
}

# build_plugin OUT PKG: builds one protoc plugin from scripts/tools/protoc-gen (committed go.sum).
build_plugin() {
	local out=$1 pkg=$2 log
	log=$(galleon_go_log "$(basename "$pkg")")
	if galleon_go_build "$log" "$TOOLS_DIR" "$out" "$pkg"; then
		return 0
	fi
	galleon_go_failure proto.sh "$log" "go build $pkg from scripts/tools/protoc-gen/go.sum" \
		"retry later, or put $(basename "$pkg") on PATH and edit the committed code by hand"
	return 1
}

# check_versions: the plugins' module and the main module agree on google.golang.org/protobuf
# (read from the go.mod files: no network).
check_versions() {
	local want tools
	want=$(galleon_gomod_require "$REPO_DIR" google.golang.org/protobuf)
	tools=$(galleon_gomod_require "$TOOLS_DIR" google.golang.org/protobuf)
	if [[ "$want" != "$tools" ]]; then
		log "go.mod requires google.golang.org/protobuf $want but scripts/tools/protoc-gen/go.mod pins $tools: align them, run go mod tidy there, then make proto"
		exit 1
	fi
	PROTOC_GEN_GO_VERSION=$tools
	PROTOC_GEN_GO_GRPC_VERSION=$(galleon_gomod_require "$TOOLS_DIR" google.golang.org/grpc/cmd/protoc-gen-go-grpc)
}

# Sets PROTOC_GEN_GO, PROTOC_GEN_GO_GRPC, WKT_INCLUDE, ISTIO_API_DIR.
ensure_tools() {
	check_versions
	ensure_protoc
	WKT_INCLUDE=$(well_known_include)
	PROTOC_GEN_GO=$(galleon_build_cached protoc-gen-go "$PROTOC_GEN_GO_VERSION" \
		build_plugin google.golang.org/protobuf/cmd/protoc-gen-go | tail -n1)
	PROTOC_GEN_GO_GRPC=$(galleon_build_cached protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION" \
		build_plugin google.golang.org/grpc/cmd/protoc-gen-go-grpc | tail -n1)
	# istio.io/api at the version go.mod requires: listing one of its packages downloads only its
	# .mod and .zip (go mod download would also ask for .info).
	ISTIO_API_DIR=$(cd "$REPO_DIR" && GOFLAGS="${GOFLAGS:-} -mod=readonly" go list -f '{{.Module.Dir}}' istio.io/api/mcp/v1alpha1)
	if [[ -z "$ISTIO_API_DIR" || ! -f "$ISTIO_API_DIR/mcp/v1alpha1/resource.proto" ||
		! -f "$ISTIO_API_DIR/common-protos/google/rpc/status.proto" ]]; then
		log "istio.io/api in the module cache ($ISTIO_API_DIR) lacks mcp/v1alpha1/resource.proto or common-protos/google/rpc/status.proto"
		exit 1
	fi
}

# generate_into OUTDIR: writes the generated files for every proto/**/*.proto under OUTDIR,
# with paths relative to proto/ (proto/mcp/v1alpha1/mcp.proto -> OUTDIR/mcp/v1alpha1/mcp.pb.go).
generate_into() {
	local out=$1 files=()
	mapfile -t files < <(cd "$PROTO_DIR" && find . -name '*.proto' -printf '%P\n' | LC_ALL=C sort)
	if [[ ${#files[@]} -eq 0 ]]; then
		log "no .proto files under $PROTO_DIR"
		exit 1
	fi
	# Include order: our protos, then the well-known types of protoc's own version, then istio/api
	# (mcp/...), then istio/api's common-protos for google/rpc/status.proto only (its
	# google/protobuf copies are shadowed by the well-known include before it).
	(cd "$PROTO_DIR" && protoc \
		-I . -I "$WKT_INCLUDE" -I "$ISTIO_API_DIR" -I "$ISTIO_API_DIR/common-protos" \
		--plugin=protoc-gen-go="$PROTOC_GEN_GO" \
		--plugin=protoc-gen-go-grpc="$PROTOC_GEN_GO_GRPC" \
		--go_out="$out" --go_opt=paths=source_relative \
		--go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
		"${files[@]}")
}

# normalize FILE: the generated file without the line naming protoc's version.
normalize() {
	grep -Ev '^//[[:space:]]+(-[[:space:]]+)?protoc[[:space:]]+(v|\(unknown\))' "$1" || true
}

cmd_generate() {
	ensure_tools
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	generate_into "$tmp"
	# Remove generated files whose .proto is gone, then copy the new ones in.
	find "$PROTO_DIR" -name '*.pb.go' -delete
	(cd "$tmp" && find . -name '*.pb.go' -printf '%P\n') | while read -r f; do
		mkdir -p "$PROTO_DIR/$(dirname "$f")"
		cp "$tmp/$f" "$PROTO_DIR/$f"
	done
	log "generated: $(cd "$PROTO_DIR" && find . -name '*.pb.go' -printf '%P ' )($(protoc --version), protoc-gen-go $PROTOC_GEN_GO_VERSION, protoc-gen-go-grpc $PROTOC_GEN_GO_GRPC_VERSION)"
}

cmd_check() {
	ensure_tools
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	mkdir -p "$tmp/new" "$tmp/a" "$tmp/b"
	generate_into "$tmp/new"
	local f
	while read -r f; do
		mkdir -p "$tmp/a/$(dirname "$f")"
		normalize "$PROTO_DIR/$f" >"$tmp/a/$f"
	done < <(cd "$PROTO_DIR" && find . -name '*.pb.go' -printf '%P\n')
	while read -r f; do
		mkdir -p "$tmp/b/$(dirname "$f")"
		normalize "$tmp/new/$f" >"$tmp/b/$f"
	done < <(cd "$tmp/new" && find . -name '*.pb.go' -printf '%P\n')
	if ! (cd "$tmp" && diff -ruN a b) >"$tmp/diff"; then
		head -n 60 "$tmp/diff" >&2
		echo "generated code is stale: run make proto" >&2
		exit 1
	fi
	log "generated code is up to date"
}

cmd_tools() {
	ensure_tools
	printf '%s\n' "$(command -v protoc)" "$PROTOC_GEN_GO" "$PROTOC_GEN_GO_GRPC"
}

case "${1:-}" in
generate) cmd_generate ;;
check) cmd_check ;;
tools) cmd_tools ;;
*) usage ;;
esac

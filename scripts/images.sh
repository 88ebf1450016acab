#!/usr/bin/env bash
# Writes one container image per adapter without a container engine (make images).
#
#   scripts/images.sh [DIR]   build every adapter's image into DIR (default: $(scripts/cache-dir.sh dir)/images); prints name, digest, size
#   scripts/images.sh test    the same into <cache>/images-test, then the tests of scripts/tools/images on them (make images-test, part of make test)
#   scripts/images.sh tool    build the image writer unless cached; prints its path last on stdout
#   scripts/images.sh deps    download what scripts/tools/images needs to build and test (scripts/lint.sh runs it first)
#
# For each adapter in cmd/ (a main that calls daemon.Main) it builds a static binary
# (CGO_ENABLED=0, -trimpath, -ldflags '-s -w'; the commit is stamped by -buildvcs) and hands it to
# the image writer, scripts/tools/images, a Go program on github.com/google/go-containerregistry
# built from its committed go.sum (only .mod and .zip files are fetched, scripts/gofetch.sh) and
# cached as $(scripts/cache-dir.sh bin)/galleon-images-<hash of its source>. It writes into DIR:
#   NAME/       an OCI image layout, tagged with the version (skopeo copy oci:DIR/NAME ..., crane push DIR/NAME ...)
#   NAME.tar    a docker-archive tarball of the same image, tagged NAME:VERSION (docker load -i, kind load image-archive)
# Each image: an empty base (no shell, no package manager, no libc) and one layer holding
# /usr/local/bin/NAME (the entrypoint), /etc/ssl/certs/ca-certificates.crt (this host's bundle,
# named in a label), /etc/passwd and /etc/group with the nonroot user 65532 it runs as, /tmp and
# the user's home; ports 16010/tcp and 16014/tcp; OCI labels (title, version, revision, source,
# created). Every timestamp is HEAD's commit time, so the same commit, Go toolchain and CA bundle
# give the same digests. The name, NAME:VERSION, is what the Helm chart uses by default.
#
# Environment:
#   GALLEON_IMAGE_VERSION   the tag (default: appVersion of deploy/helm/galleon/Chart.yaml; test ignores it)
#   GALLEON_IMAGE_ARCHS     GOARCHes, default "amd64"; "amd64 arm64" writes a two-platform index (the .tar gets the first)
#   GALLEON_CA_BUNDLE       the PEM bundle to copy (default /etc/ssl/certs/ca-certificates.crt, Debian's ca-certificates)
#   GALLEON_IMAGE_LICENSES  an SPDX expression for org.opencontainers.image.licenses (default: none, the repository has no licence file)
#   SOURCE_DATE_EPOCH       the image's time, Unix seconds (default: HEAD's commit time)
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
TOOLS_DIR="$SCRIPT_DIR/tools/images"
CHART_DIR="$REPO_DIR/deploy/helm/galleon"
# shellcheck source=scripts/cache-dir.sh
source "$SCRIPT_DIR/cache-dir.sh"
# shellcheck source=scripts/gofetch.sh
source "$SCRIPT_DIR/gofetch.sh"
export GOWORK=off

usage() {
	sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

# tool_version: the image writer's cache key, a hash of its source, go.mod and go.sum and of the
# Go toolchain, so an edit or a new Go builds it again.
tool_version() {
	local f
	{
		go env GOVERSION
		cat "$TOOLS_DIR/go.mod" "$TOOLS_DIR/go.sum"
		for f in "$TOOLS_DIR"/*.go; do
			[[ "$f" == *_test.go ]] || cat "$f"
		done
	} | sha256sum | cut -c1-12
}

# go_offline_or_watched LOG DIR GO-ARGS...: `go GO-ARGS...` in DIR with the module cache alone
# first (quick, and nothing to watch when everything is there: the usual case after the first
# run), then, if that failed, as galleon_go_retry does, fetching under the stall watchdog.
go_offline_or_watched() {
	local log=$1 dir=$2
	shift 2
	if (cd "$dir" && GOPROXY=off GOFLAGS="${GOFLAGS:-} -mod=readonly" go "$@") >/dev/null 2>&1; then
		return 0
	fi
	GOFLAGS="${GOFLAGS:-} -mod=readonly" galleon_go_retry "$log" "$dir" "$@"
}

build_tool() {
	local out=$1 log
	log=$(galleon_go_log images-tool)
	echo "building the image writer from scripts/tools/images (first time: downloads go-containerregistry; log $log)..." >&2
	if galleon_go_build "$log" "$TOOLS_DIR" "$out" . -trimpath; then
		rm -f "$log"
		return 0
	fi
	galleon_go_failure images.sh "$log" "go build scripts/tools/images from its committed go.sum" \
		"retry later (what was downloaded stays in the module cache), or check that $(galleon_gomod_require "$TOOLS_DIR" github.com/google/go-containerregistry) of github.com/google/go-containerregistry is still served"
	return 1
}

tool_bin() {
	galleon_build_cached galleon-images "$(tool_version)" build_tool | tail -n1
}

# deps: every module scripts/tools/images needs to build and test, under the stall watchdog.
deps() {
	local log
	log=$(galleon_go_log images-deps)
	if ! go_offline_or_watched "$log" "$TOOLS_DIR" list -deps -test ./...; then
		galleon_go_failure images.sh "$log" "go list -deps -test ./... in scripts/tools/images (committed go.sum)" "retry later (make test resumes where the downloads stopped)"
		return 1
	fi
	rm -f "$log"
}

# chart_version: the chart's appVersion, the tag its image names default to.
chart_version() {
	local v
	v=$(sed -n -E 's/^appVersion:[[:space:]]*"?([^"[:space:]]+)"?[[:space:]]*$/\1/p' "$CHART_DIR/Chart.yaml")
	if [[ -z "$v" ]]; then
		echo "images.sh: no appVersion in deploy/helm/galleon/Chart.yaml; set it, or set GALLEON_IMAGE_VERSION" >&2
		exit 1
	fi
	printf '%s\n' "$v"
}

# adapters: the binaries in cmd/ whose main runs an adapter (daemon.Main), as images_test.go finds them.
adapters() {
	grep -l 'daemon\.Main(' "$REPO_DIR"/cmd/*/main.go | xargs -n1 dirname | xargs -n1 basename
}

# build_images DIR VERSION: binaries, then images, into DIR.
build_images() {
	local out=$1 version=$2 archs ca revision created source ca_source tool names bins stage log arch name start line f
	read -r -a archs <<<"${GALLEON_IMAGE_ARCHS:-amd64}"
	ca=${GALLEON_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
	if [[ ! -s "$ca" ]]; then
		echo "images.sh: no CA bundle at $ca; do: apt-get install ca-certificates, or set GALLEON_CA_BUNDLE to a PEM bundle" >&2
		exit 1
	fi
	ca_source="$ca on the build host"
	if [[ "$ca" == /etc/ssl/certs/ca-certificates.crt ]] && command -v dpkg-query >/dev/null 2>&1; then
		ca_source="$ca from Debian's ca-certificates $(dpkg-query -W -f='${Version}' ca-certificates 2>/dev/null || echo '(version unknown)')"
	fi
	if ! revision=$(git -C "$REPO_DIR" rev-parse HEAD 2>/dev/null); then
		echo "images.sh: $REPO_DIR is not a git checkout: the images' revision label needs its commit; do: run it in a clone" >&2
		exit 1
	fi
	created=${SOURCE_DATE_EPOCH:-$(git -C "$REPO_DIR" log -1 --format=%ct)}
	source="https://$(sed -n -E 's/^module[[:space:]]+([^[:space:]]+).*/\1/p' "$REPO_DIR/go.mod")"
	if [[ -n "$(git -C "$REPO_DIR" status --porcelain -- cmd adapters daemon model registry internal proto go.mod go.sum 2>/dev/null)" ]]; then
		echo "images.sh: uncommitted changes under cmd/, adapters/, daemon/, model/, registry/, internal/ or proto/ go into the binaries; the revision label says $revision" >&2
	fi
	tool=$(tool_bin)
	mapfile -t names < <(adapters)

	mkdir -p "$out" "$(galleon_cache_dir)/locks"
	exec 8>"$(galleon_cache_dir)/locks/images.lock"
	if command -v flock >/dev/null 2>&1 && ! flock -n 8; then
		echo "images.sh: another scripts/images.sh is writing images, waiting for it..." >&2
		flock 8
	fi
	stage=$(mktemp -d "$out/.stage.XXXXXX")
	bins=$(mktemp -d "${TMPDIR:-/tmp}/galleon-images.XXXXXX")
	# shellcheck disable=SC2064 # expand now: the paths are local
	trap "rm -rf '$stage' '$bins'" EXIT

	for arch in "${archs[@]}"; do
		log=$(galleon_go_log "images-binaries-$arch")
		start=$SECONDS
		echo "images.sh: go build ${names[*]} for linux/$arch (CGO_ENABLED=0 -trimpath -ldflags '-s -w')..." >&2
		mkdir -p "$bins/$arch"
		if ! CGO_ENABLED=0 GOOS=linux GOARCH=$arch go_offline_or_watched "$log" "$REPO_DIR" \
			build -trimpath -buildvcs=true -ldflags '-s -w' -o "$bins/$arch/" "${names[@]/#/./cmd/}"; then
			galleon_go_failure images.sh "$log" "go build ./cmd/... for linux/$arch" "fix the build error, or retry later if a module download failed"
			exit 1
		fi
		rm -f "$log"
		echo "images.sh: binaries for linux/$arch built in $((SECONDS - start)) s" >&2
	done

	start=$SECONDS
	printf '%-28s %-72s %s\n' IMAGE DIGEST SIZE
	for name in "${names[@]}"; do
		local args=(build -name "$name" -version "$version" -revision "$revision" -created-unix "$created"
			-source "$source" -ca "$ca" -ca-source "$ca_source" -go-version "$(go env GOVERSION)"
			-description "Galleon adapter $name: serves Istio ServiceEntries to istiod over MCP-over-xDS"
			-port 16010/tcp -port 16014/tcp -out "$stage" -tar "$stage/$name.tar")
		[[ -n "${GALLEON_IMAGE_LICENSES:-}" ]] && args+=(-licenses "$GALLEON_IMAGE_LICENSES")
		for arch in "${archs[@]}"; do
			args+=(-binary "$arch=$bins/$arch/$name")
		done
		if ! line=$("$tool" "${args[@]}"); then
			echo "images.sh: writing the image of $name failed (the line above says why); do: fix that and run it again" >&2
			exit 1
		fi
		IFS=$'\t' read -r -a f <<<"$line"
		printf '%-28s %-72s %s\n' "${f[0]}" "${f[1]}" "${f[2]}"
	done
	# Replace only what this run wrote, never the rest of DIR.
	for name in "${names[@]}"; do
		rm -rf "${out:?}/$name" "$out/$name.tar"
		mv "$stage/$name" "$stage/$name.tar" "$out/"
	done
	echo "images.sh: images written in $((SECONDS - start)) s to $out (NAME/: OCI layout, NAME.tar: docker archive); deploy/README.md says how to push or load them" >&2
}

case "${1:-}" in
tool)
	tool_bin
	;;
deps)
	deps
	;;
test)
	[[ $# -eq 1 ]] || usage
	out="$(galleon_cache_dir)/images-test"
	start=$SECONDS
	build_images "$out" "$(chart_version)"
	deps
	log=$(mktemp "${TMPDIR:-/tmp}/galleon-images-test.XXXXXX")
	if ! (cd "$TOOLS_DIR" && go vet ./... && GALLEON_IMAGES_DIR="$out" go test -count=1 -v ./...) >"$log" 2>&1; then
		cat "$log"
		echo "images.sh: the images' tests failed (go test -v in scripts/tools/images, output above); images in $out" >&2
		rm -f "$log"
		exit 1
	fi
	grep -E '^(--- |ok |FAIL)|^    --- (FAIL|PASS|SKIP): TestBuiltImages(Run)?/' "$log"
	rm -f "$log"
	echo "images.sh: images built and checked in $((SECONDS - start)) s" >&2
	;;
-h | --help | help)
	usage
	;;
*)
	[[ $# -le 1 ]] || usage
	out=${1:-"$(galleon_cache_dir)/images"}
	build_images "$out" "${GALLEON_IMAGE_VERSION:-$(chart_version)}"
	;;
esac

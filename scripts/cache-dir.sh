#!/usr/bin/env bash
# Galleon's cache of third-party server binaries (istiod, consul, ...), kept OUTSIDE the repository.
#
#   ${GALLEON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/galleon}
#       bin/<name>-<version>      one binary per version; never committed
#       locks/                    flock files that serialise concurrent builds
#
# Two ways to use it:
#   source "$(dirname "$0")/cache-dir.sh"     # defines galleon_* functions, changes no shell options
#   scripts/cache-dir.sh [dir|bin|bin NAME VERSION]   # prints the path
#
# The Go side is internal/testing/toolcache (the test harnesses and consultest use it); test/setup checks
# that the two give the same path.

galleon_cache_dir() {
	printf '%s\n' "${GALLEON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/galleon}"
}

galleon_bin_dir() {
	printf '%s/bin\n' "$(galleon_cache_dir)"
}

# galleon_bin_path NAME VERSION -> <cache>/bin/NAME-VERSION
galleon_bin_path() {
	printf '%s/%s-%s\n' "$(galleon_bin_dir)" "$1" "$2"
}

# galleon_build_cached NAME VERSION BUILD_FN [ARGS...]
# Makes <cache>/bin/NAME-VERSION exist, calling `BUILD_FN OUT ARGS...` (which must write the binary
# to OUT) only if it does not exist yet. Concurrent callers are serialised with flock on
# <cache>/locks/NAME-VERSION.lock; the binary is built under a temporary name and renamed into
# place, so a half-written binary is never visible. Progress goes to stderr; the path is printed
# on stdout as the last line.
galleon_build_cached() {
	local name=$1 version=$2 fn=$3
	shift 3
	local bin lockdir lock tmp start
	bin=$(galleon_bin_path "$name" "$version")
	if [[ -x "$bin" ]]; then
		echo "using cached $bin" >&2
		printf '%s\n' "$bin"
		return 0
	fi
	lockdir="$(galleon_cache_dir)/locks"
	mkdir -p "$(galleon_bin_dir)" "$lockdir"
	lock="$lockdir/$name-$version.lock"
	(
		if command -v flock >/dev/null 2>&1; then
			exec 9>"$lock"
			if ! flock -n 9; then
				echo "another build of $name $version is running, waiting for it..." >&2
				flock 9
			fi
		fi
		if [[ -x "$bin" ]]; then
			echo "using cached $bin (built by a concurrent run)" >&2
			exit 0
		fi
		tmp="$bin.tmp.$$"
		trap 'rm -f "$tmp"' EXIT
		start=$SECONDS
		"$fn" "$tmp" "$@" || exit 1
		chmod +x "$tmp" || exit 1
		mv -f "$tmp" "$bin" || exit 1
		echo "built $bin in $((SECONDS - start)) s" >&2
	) || return 1
	printf '%s\n' "$bin"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
	set -euo pipefail
	case "${1:-dir}" in
	dir) galleon_cache_dir ;;
	bin)
		if [[ $# -eq 3 ]]; then
			galleon_bin_path "$2" "$3"
		else
			galleon_bin_dir
		fi
		;;
	*)
		echo "usage: $0 [dir | bin [NAME VERSION]]" >&2
		exit 2
		;;
	esac
fi

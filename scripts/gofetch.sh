#!/usr/bin/env bash
# Builds third-party tools from the Go module proxy with the smallest requests that work, and
# turns a failure into one line that says what was refused, what was tried and what to do.
#
#   source "$(dirname "$0")/gofetch.sh"    # defines galleon_go_* functions, changes no options
#
# Why this exists: the module proxy's answers change from day to day. A version whose `.info` it
# served yesterday may be refused today while its `.mod` and `.zip` are still served (and the other
# way round). `go build` in a module whose go.mod pins exact versions and whose go.sum is committed
# asks only for `.mod` and `.zip`; `go list -m`, `go mod download`, `go install pkg@version`,
# `@latest` and version lists ask for `.info` too. So every tool is built from a committed module
# (test/ for istiod, scripts/tools/<tool>/ for the rest) with -mod=readonly, and nothing here asks
# for `.info`. No registry host is named here: whatever `go env GOPROXY` says is used.

# galleon_go_proxy prints GOPROXY as go sees it (for messages only).
galleon_go_proxy() {
	go env GOPROXY 2>/dev/null || printf '%s\n' "${GOPROXY:-unknown}"
}

# The proxy sometimes accepts a request and never answers it (seen 2026-11-23: a .mod fetch over
# HTTP/2 hung for 9 minutes), and go has no timeout for that: one stalled request hangs the whole
# build. So every go command that may fetch runs under a watchdog: if its process tree uses no
# CPU and nothing new lands in the module cache for GALLEON_FETCH_STALL_SECONDS, it is stopped and
# run again (what it had downloaded stays in the cache), up to GALLEON_FETCH_ATTEMPTS times.
GALLEON_FETCH_STALL_SECONDS=${GALLEON_FETCH_STALL_SECONDS:-120}
GALLEON_FETCH_ATTEMPTS=${GALLEON_FETCH_ATTEMPTS:-3}

# galleon_tree PID prints "pid ticks" for PID and each of its descendants, ticks being the CPU
# time each used so far, its own plus that of the children it has waited for (so a finished
# compile counts in go's).
galleon_tree() {
	local root=$1 f
	for f in /proc/[0-9]*/stat; do
		cat "$f" 2>/dev/null
		echo
	done | awk -v root="$root" '
		NF > 0 {
			pid = $1; sub(/^.*\) /, "")
			parent[pid] = $2; ticks[pid] = $12 + $13 + $14 + $15
		}
		END {
			for (p in ticks) {
				for (q = p; q != "" && q > 1 && q != root; q = parent[q]) {}
				if (q == root) print p, ticks[p]
			}
		}'
}

# galleon_tree_cpu PID prints the CPU ticks PID and its descendants used so far.
galleon_tree_cpu() { galleon_tree "$1" | awk '{ s += $2 } END { print s + 0 }'; }

# galleon_go_watched LOG DIR GO-ARGS... runs `go GO-ARGS...` in DIR, output appended to LOG, and
# stops it when it stalls (see above); returns go's status, or 124 when it stalled. Without /proc
# it just runs go.
galleon_go_watched() {
	local log=$1 dir=$2
	shift 2
	if [[ ! -r /proc/self/stat ]]; then
		(cd "$dir" && go "$@") >>"$log" 2>&1
		return
	fi
	local modcache marker pid cpu last_cpu idle=0 step=5
	((GALLEON_FETCH_STALL_SECONDS < 10)) && step=1
	modcache="$(go env GOMODCACHE)/cache/download"
	mkdir -p "$modcache"
	marker=$(mktemp "${TMPDIR:-/tmp}/galleon-watch.XXXXXX")
	(cd "$dir" && exec go "$@") >>"$log" 2>&1 &
	pid=$!
	last_cpu=$(galleon_tree_cpu "$pid")
	while kill -0 "$pid" 2>/dev/null; do
		sleep "$step" &
		wait $! 2>/dev/null
		kill -0 "$pid" 2>/dev/null || break
		cpu=$(galleon_tree_cpu "$pid")
		# Progress: more than a quarter of a second of CPU, or a new file in the module cache.
		if ((cpu - last_cpu > 25)) || [[ -n "$(find "$modcache" -newer "$marker" -print -quit 2>/dev/null)" ]]; then
			idle=0
		else
			idle=$((idle + step))
		fi
		last_cpu=$cpu
		touch "$marker"
		if ((idle >= GALLEON_FETCH_STALL_SECONDS)); then
			echo "gofetch: go $1 made no progress for ${idle} s (a request to the module proxy that is never answered); stopping it" >>"$log"
			# go stops its own children on an interrupt; whatever is left goes after 2 s.
			local left
			left=$(galleon_tree "$pid" | awk '{ print $1 }')
			kill -INT "$pid" 2>/dev/null
			sleep 2
			# shellcheck disable=SC2086
			kill -KILL $left 2>/dev/null
			wait "$pid" 2>/dev/null
			rm -f "$marker"
			return 124
		fi
	done
	rm -f "$marker"
	wait "$pid"
}

# galleon_go_retry LOG DIR GO-ARGS... is galleon_go_watched, run again after a stall, up to
# GALLEON_FETCH_ATTEMPTS times. Progress goes to stderr.
galleon_go_retry() {
	local log=$1 dir=$2 attempt rc
	shift 2
	for ((attempt = 1; attempt <= GALLEON_FETCH_ATTEMPTS; attempt++)); do
		galleon_go_watched "$log" "$dir" "$@"
		rc=$?
		[[ $rc -ne 124 ]] && return "$rc"
		if ((attempt < GALLEON_FETCH_ATTEMPTS)); then
			echo "go $1 stalled on the module proxy for ${GALLEON_FETCH_STALL_SECONDS} s; trying again ($((attempt + 1)) of $GALLEON_FETCH_ATTEMPTS)" >&2
		fi
	done
	return 124
}

# GALLEON_TOOL_LDFLAGS go in front of the -ldflags of the servers the tests run (Consul,
# polaris-server, istiod, the Kubernetes tools): no symbol table and no DWARF, which took a link
# of kube-apiserver from 10.8 to 8.2 s on two cores. Stack traces still name every function.
# These builds do not use -trimpath either: it changes every package's build cache key, so a
# -trimpath build compiles the standard library again (44 s on two cores for Consul's part of it)
# and shares nothing with the repository's own builds.
# shellcheck disable=SC2034 # used by the scripts that source this one
GALLEON_TOOL_LDFLAGS="-s -w"

# galleon_go_build LOG MODDIR OUT PKG [GO BUILD ARGS...]
# go build -mod=readonly -o OUT [ARGS...] PKG inside MODDIR, all output appended to LOG, under
# the stall watchdog. GOFLAGS from the environment are kept (e.g. -buildvcs=false) but -mod is
# forced to readonly: a build must never edit the committed go.mod/go.sum or resolve a version it
# does not pin.
galleon_go_build() {
	local log=$1 dir=$2 out=$3 pkg=$4
	shift 4
	GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=readonly" galleon_go_retry "$log" "$dir" build -o "$out" "$@" "$pkg"
}

# galleon_go_download LOG MODDIR MODULE@QUERY
# Asks the proxy for one spelling of a module version (a tag, a branch, a pseudo-version) from
# inside MODDIR, so that what it resolves to lands in the module cache. Used only as a fallback
# spelling after a plain build was refused: it does ask for `.info`.
galleon_go_download() {
	local log=$1 dir=$2 q=$3
	(cd "$dir" && GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=mod" go mod download "$q") >>"$log" 2>&1
}

# galleon_go_refused_module LOG prints the module@version the proxy refused or could not find in
# go's output (empty if the failure was something else).
galleon_go_refused_module() {
	grep -Eo '[A-Za-z0-9./_~-]+@v[^:[:space:]]+: (reading|verifying|unrecognized import path)[^[:cntrl:]]*(403|404|410|Forbidden|Not Found|Gone)' "$1" |
		head -n1 | sed -E 's/: .*//'
}

# galleon_go_failure TOOL LOG TRIED FIX
# Prints one line on stderr: what failed (classified from go's output in LOG), what was tried
# (TRIED) and what the user can do (FIX), and where go's full output is.
galleon_go_failure() {
	local tool=$1 log=$2 tried=$3 fix=$4 proxy what mod status
	proxy=$(galleon_go_proxy)
	mod=$(galleon_go_refused_module "$log")
	if grep -q '^gofetch: .* made no progress' "$log" && ! grep -q 'GOPROXY=off' "$log" && [[ -z "$mod" ]]; then
		what="the Go module proxy ($proxy) stalled: a request went unanswered for ${GALLEON_FETCH_STALL_SECONDS} s, $GALLEON_FETCH_ATTEMPTS times"
	elif grep -q 'GOPROXY=off' "$log"; then
		what="module downloads are disabled (GOPROXY=off) and the module cache lacks what the build needs"
	elif [[ -n "$mod" ]]; then
		status=$(grep -F "$mod" "$log" | grep -Eo '(403|404|410)[^[:cntrl:]]*' | head -n1)
		what="the Go module proxy ($proxy) refused $mod (${status:-refused})"
	elif grep -Eq 'dial tcp|connection refused|no such host|i/o timeout|TLS handshake timeout|network is unreachable|connection reset' "$log"; then
		what="the Go module proxy ($proxy) could not be reached ($(grep -Eo '(dial tcp[^:]*:[^:]*: |)(connection refused|no such host|i/o timeout|TLS handshake timeout|network is unreachable|connection reset[^[:cntrl:]]*)' "$log" | head -n1))"
	elif grep -q 'checksum mismatch' "$log"; then
		what="a downloaded module does not match the committed go.sum ($(grep -m1 -Eo '[^[:space:]]+@v[^:]+: checksum mismatch' "$log"))"
	elif grep -q 'missing go.sum entry' "$log"; then
		what="the committed go.sum lacks an entry ($(grep -m1 -o 'missing go.sum entry[^;]*' "$log"))"
	else
		what="go build failed ($(grep -m1 -Ev '^go: downloading|^#|^\s*$' "$log" | cut -c1-200))"
	fi
	echo "$tool: $what; tried: $tried; do: $fix (go's output: $log)" >&2
}

# galleon_go_log NAME prints a fresh log path for one build under the cache dir's logs/.
# Needs cache-dir.sh sourced.
galleon_go_log() {
	local dir
	dir="$(galleon_cache_dir)/logs"
	mkdir -p "$dir"
	printf '%s/%s.%s.log\n' "$dir" "$1" "$(date +%Y%m%dT%H%M%S)"
}

# galleon_gomod_require MODDIR MODULE prints the version MODDIR/go.mod requires of MODULE, read
# from the file itself (no network: `go list -m` would ask the proxy for `.info`).
galleon_gomod_require() {
	(cd "$1" && GOWORK=off go mod edit -json) |
		awk -v m="\"$2\"" '$1 == "\"Path\":" && $2 == m"," { found = 1; next } found && $1 == "\"Version\":" { gsub(/[",]/, "", $2); print $2; exit }'
}

# galleon_gomod_blocks GOMOD prints the require and exclude directives of a go.mod file (blocks
# and single lines), each block followed by a blank line: what a wrapper module copies from the
# upstream module it builds (scripts/consul.sh).
galleon_gomod_blocks() {
	awk '
		/^(require|exclude) \($/ { inblk = 1; print; next }
		inblk { print; if ($0 ~ /^\)/) { inblk = 0; print "" } ; next }
		/^(require|exclude) [^(]/ { print; next }
	' "$1"
}

# galleon_env_binary SCRIPT VAR TOOL prints $VAR if it names an executable file and returns 0;
# returns 1 if VAR is unset; exits with one line saying what to fix if it is set to anything else.
galleon_env_binary() {
	local script=$1 var=$2 tool=$3 val=${!2:-}
	[[ -z "$val" ]] && return 1
	if [[ ! -e "$val" ]]; then
		echo "$script: $var=$val does not exist; point it at a $tool binary, or unset it to build one from the Go module proxy" >&2
		exit 1
	fi
	if [[ -d "$val" || ! -x "$val" ]]; then
		echo "$script: $var=$val is not an executable file; point it at a $tool binary, or unset it to build one from the Go module proxy" >&2
		exit 1
	fi
	printf '%s\n' "$val"
}

#!/usr/bin/env bash
# Installs Debian packages the scripts need when they are missing (protoc, ZooKeeper). Source it;
# it defines one function and changes no shell options.
#
#   galleon_apt_install SCRIPT WHAT HINT PACKAGE...
#
# installs PACKAGE... with apt-get (through sudo when not root), refreshing the package lists only
# if the first try fails (a fresh container has none). On failure it prints one line, prefixed
# "SCRIPT:", saying what is missing (WHAT), what was tried and what to do instead (HINT), and
# returns 1. Package sources are the machine's own apt configuration: no host is named here.

galleon_apt_install() {
	local script=$1 what=$2 hint=$3
	shift 3
	local sudo=()
	if [[ $(id -u) -ne 0 ]]; then
		if command -v sudo >/dev/null 2>&1; then
			sudo=(sudo)
		else
			echo "$script: $what is missing and this is not root (no sudo): $hint" >&2
			return 1
		fi
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "$script: $what is missing and apt-get is not available: $hint" >&2
		return 1
	fi
	local start=$SECONDS
	echo "$script: installing $what: apt-get install -y --no-install-recommends $* ..." >&2
	local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
	if ! "${apt[@]}" install -y -qq --no-install-recommends "$@" >&2; then
		if ! "${apt[@]}" update -qq >&2 || ! "${apt[@]}" install -y -qq --no-install-recommends "$@" >&2; then
			echo "$script: apt-get could not install $* (its output is above); tried: apt-get install, apt-get update, apt-get install; do: $hint" >&2
			return 1
		fi
	fi
	echo "$script: installed $* in $((SECONDS - start)) s" >&2
}

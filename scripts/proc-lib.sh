#!/usr/bin/env bash
# Process, port and clock helpers that the demo (scripts/demo.sh) and the benchmark scripts
# (through scripts/bench-lib.sh) share. Sourced; defines functions only, changes no options.
# free_port remembers what it handed out in USED_PORTS (a space-separated list).

alive() { kill -0 "$1" 2>/dev/null; }

have() { command -v "$1" >/dev/null 2>&1; }

say() { printf '%s\n' "$*"; }

# now: seconds since the epoch with microseconds (bash 5), or whole seconds of this shell.
now() { printf '%s\n' "${EPOCHREALTIME:-$SECONDS}"; }

# Free loopback ports: random ones below Linux's ephemeral range that nothing answers on.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() {
	local p
	while :; do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
		[[ " ${USED_PORTS:-} " == *" $p "* ]] && continue
		port_in_use "$p" && continue
		USED_PORTS="${USED_PORTS:-} $p"
		printf '%s\n' "$p"
		return
	done
}

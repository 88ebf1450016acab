#!/usr/bin/env bash
# Helpers the benchmark scripts share (scripts/bench-eureka.sh, scripts/bench-zookeeper.sh), sourced
# by them: output, time, /proc, and scripts/proc-lib.sh's processes and ports. fail reads the sourcing script's PROG and
# LOG_DIR and sets FAILED; step sets STEP; row appends to ROWS.
# shellcheck disable=SC2034 # FAILED, STEP and ROWS are the sourcing script's

# shellcheck source=scripts/proc-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/proc-lib.sh"

# dur_s DURATION: a Go duration (1m2.5s, 850.3ms, 12µs) in seconds, three decimals.
dur_s() {
	awk -v d="$1" 'BEGIN {
		t = 0
		while (d != "") {
			if (!match(d, /^[0-9.]+/)) { print "?"; exit }
			v = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1)
			if (d ~ /^h/) { t += v * 3600; d = substr(d, 2) }
			else if (d ~ /^ms/) { t += v / 1e3; d = substr(d, 3) }
			else if (d ~ /^m/) { t += v * 60; d = substr(d, 2) }
			else if (d ~ /^s/) { t += v; d = substr(d, 2) }
			else if (d ~ /^ns/) { t += v / 1e9; d = substr(d, 3) }
			else if (d ~ /^us/) { t += v / 1e6; d = substr(d, 3) }
			else if (d ~ /^\xc2\xb5s/) { t += v / 1e6; d = substr(d, 4) }
			else { print "?"; exit }
		}
		printf "%.3f\n", t
	}'
}

fail() {
	FAILED=1
	if [[ -n "$LOG_DIR" ]]; then
		printf '%s: FAILED: %s (logs kept in %s)\n' "$PROG" "$*" "$LOG_DIR" >&2
	else
		printf '%s: FAILED: %s\n' "$PROG" "$*" >&2
	fi
	exit 1
}

loadavg() { awk '{ print $1, $2, $3 }' /proc/loadavg; }

# mib KB: kB as MiB, one decimal.
mib() { awk -v k="$1" 'BEGIN { printf "%.1f MiB\n", k / 1024 }'; }

# proc_kb PID FIELD: a /proc/<pid>/status field (VmRSS, VmHWM) in kB.
proc_kb() { awk -v f="$2:" '$1 == f { print $2; found = 1 } END { if (!found) exit 1 }' "/proc/$1/status"; }

row() { ROWS+=("| $1 | $2 |"); }

# secs A B: B - A in seconds, two decimals.
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f\n", b - a }'; }

step() {
	STEP=$1
	printf '\n== %s\n' "$1"
}

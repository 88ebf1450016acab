#!/usr/bin/env bash
# Helpers the benchmark scripts share (scripts/bench-eureka.sh, scripts/bench-zookeeper.sh,
# scripts/bench-peer.sh, scripts/bench-start.sh, scripts/bench-sync-floor.sh), sourced by them: output, time, /proc, starting
# and stopping processes, arguments, the report of an exit, and scripts/proc-lib.sh's processes
# and ports. fail and exit_report read
# the sourcing script's PROG, STEP and LOG_DIR; fail sets FAILED; step sets STEP; row appends to ROWS.
# shellcheck disable=SC2034 # FAILED, STEP, ROWS and the variables pin_sides and work_dirs set are the sourcing script's

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

# ms DURATION: a Go duration in milliseconds, two decimals. galleon-load prints one unit below a
# minute (30.249ms, 1.5s, 850µs), parsed here: dur_s keeps three decimals of a second, too few for
# the Delta figures, and is used for the rest (1m2.5s).
ms() {
	local f
	if [[ $1 =~ ^([0-9.]+)(ns|us|µs|ms|s)$ ]]; then
		case ${BASH_REMATCH[2]} in
		ns) f=1e-6 ;;
		us | µs) f=1e-3 ;;
		ms) f=1 ;;
		s) f=1e3 ;;
		esac
		awk -v v="${BASH_REMATCH[1]}" -v f="$f" 'BEGIN { printf "%.2f\n", v * f }'
	else
		awk -v s="$(dur_s "$1")" 'BEGIN { printf "%.2f\n", s * 1000 }'
	fi
}

# work_dirs NAME: makes TMP_DIR, a new directory for this run (removed on exit by
# exit_one_server), with LOG_DIR ($TMP_DIR/logs) and BIN_DIR ($TMP_DIR/bin) in it.
work_dirs() {
	TMP_DIR=$(mktemp -d "${TMPDIR:-/tmp}/galleon-$1.XXXXXX")
	LOG_DIR=$TMP_DIR/logs
	BIN_DIR=$TMP_DIR/bin
	mkdir -p "$LOG_DIR" "$BIN_DIR"
}

# pin_sides PIN: sets SERVER_PIN and LOAD_PIN, command prefixes that put the servers on CPU 0 and
# galleon-load (the sinks) on CPU 1 when PIN is not 0 and taskset and 2 or more CPUs are there
# (both empty otherwise), NPROC, and PINNING, which says what was done, for the report.
pin_sides() {
	NPROC=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)
	SERVER_PIN=() LOAD_PIN=()
	if [[ $1 != 0 ]] && have taskset && ((NPROC >= 2)); then
		SERVER_PIN=(taskset -c 0)
		LOAD_PIN=(taskset -c 1)
		PINNING="pinned (taskset): each server on CPU 0, galleon-load and its sinks on CPU 1"
	elif [[ $1 == 0 ]]; then
		PINNING="not pinned (PIN=0): servers and sinks share the $NPROC CPUs"
	else
		PINNING="not pinned (no taskset, or fewer than 2 CPUs): servers and sinks share the $NPROC CPUs"
	fi
}

# commit_of DIR: the short commit of DIR's git checkout, with "+dirty" when it has changes;
# "unknown" outside a checkout.
commit_of() {
	local commit
	commit=$(git -C "$1" rev-parse --short HEAD 2>/dev/null) || {
		echo unknown
		return
	}
	[[ -n "$(git -C "$1" status --porcelain 2>/dev/null)" ]] && commit+=+dirty
	printf '%s\n' "$commit"
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

# stop PID [SECONDS]: SIGCONT (a stopped process must hear SIGTERM), SIGTERM, then SIGKILL after
# SECONDS (default 10).
stop() {
	local pid=$1 grace=${2:-10} i
	[[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
	kill -CONT "$pid" 2>/dev/null || true
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < grace * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
}

# spawn VAR LOG DIR CMD...: start CMD in DIR in the background, in its own session where setsid
# exists (a Ctrl-C is then handled here), and store its pid in VAR (setsid and exec keep CMD's).
spawn() {
	local var=$1 log=$2 dir=$3
	shift 3
	if have setsid; then
		(cd "$dir" && exec setsid "$@") >"$log" 2>&1 </dev/null &
	else
		(cd "$dir" && exec "$@") >"$log" 2>&1 </dev/null &
	fi
	printf -v "$var" '%s' "$!"
}

# exit_report CODE: for the script's exit trap. Prints why the script failed unless fail already
# said so, and returns 0 when the exit was an interruption (INT, TERM or HUP, through
# trap_signals), 1 otherwise.
exit_report() {
	local code=$1 interrupted=0
	((code == 130 || code == 143 || code == 129)) && interrupted=1
	if ((code != 0 && FAILED == 0)); then
		if ((interrupted)); then
			printf '%s: FAILED: interrupted during "%s"\n' "$PROG" "$STEP" >&2
		else
			printf '%s: FAILED: during "%s" (exit %d)%s\n' "$PROG" "$STEP" "$code" \
				"${LOG_DIR:+ (logs kept in $LOG_DIR)}" >&2
		fi
	fi
	((interrupted))
}

# trap_signals: INT, TERM and HUP become exits with the shell's codes, so the EXIT trap runs.
trap_signals() {
	trap 'exit 130' INT
	trap 'exit 143' TERM
	trap 'exit 129' HUP
}

# no_args SCRIPT ARGS...: with --help, prints SCRIPT's header comment (line 2 up to the first line
# that is not a comment) and exits 2; any other argument is refused: the benchmark scripts take
# their settings from the environment. Reads the sourcing script's PROG.
no_args() {
	local script=$1
	shift
	case "${1:-}" in
	'') ;;
	-h | --help)
		awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$script" >&2
		exit 2
		;;
	*)
		printf '%s: no arguments are taken; settings are environment variables (--help)\n' "$PROG" >&2
		exit 2
		;;
	esac
}

# exit_one_server: the EXIT trap of a script that runs one server at a time (SERVER_PID; or a few,
# their pids separated by spaces) and keeps its files in TMP_DIR. It reports the exit
# (exit_report), stops the servers, removes TMP_DIR (after
# a failure only its large bin/ and registry/: the logs stay for the failure line to point at),
# and exits with the script's code. Install it with: trap exit_one_server EXIT; trap_signals
exit_one_server() {
	local code=$? interrupted=0
	trap - EXIT INT TERM HUP
	exit_report "$code" && interrupted=1
	local pid
	# shellcheck disable=SC2153 # SERVER_PID is the sourcing script's (not SERVER_PIN)
	for pid in $SERVER_PID; do
		stop "$pid"
	done
	if [[ -n "$TMP_DIR" ]]; then
		if ((code == 0 || interrupted)); then
			rm -rf "$TMP_DIR"
		else
			rm -rf "${TMP_DIR:?}/bin" "${TMP_DIR:?}/registry"
		fi
	fi
	exit "$code"
}

#!/usr/bin/env bash
# Measures galleon-file's start on the load tool's registry: from its exec to its "ready" log line
# (the registry's first full listing served; /readyz answers 200 from then on), RUNS times, and
# its peak memory (VmHWM) at that point.
#
#   scripts/bench-start.sh          10,000 services x 10 instances (21 files, 12 MB), 5 runs
#   PIN=1 scripts/bench-start.sh    galleon-file on CPU 0 only, as scripts/bench-peer.sh runs it
#
# Settings (environment):
#   SERVICES   services of the generated registry, default 10000
#   INSTANCES  instances per service, default 10
#   RUNS       starts, default 5
#   PIN        0 (default): both cores; 1: taskset -c 0
#
# The time is the log line's own timestamp less the time of the exec, not a /readyz poll: a poll
# loop on a 2-core machine slows what it measures. One markdown row per run, then the median.
#
# Needs: go, awk, sed, GNU date; Linux (/proc); taskset with PIN=1.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/bench-lib.sh
source "$SCRIPT_DIR/bench-lib.sh"
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
export GOWORK=off
export LC_ALL=C

PROG=bench-start

no_args "${BASH_SOURCE[0]}" "$@"

SERVICES=${SERVICES:-10000}
INSTANCES=${INSTANCES:-10}
RUNS=${RUNS:-5}
PIN=${PIN:-0}

STEP=start
FAILED=0
TMP_DIR='' LOG_DIR='' SERVER_PID=''

[[ -n "${EPOCHREALTIME:-}" ]] || fail "bash 5 or later is needed (EPOCHREALTIME)"
[[ "$SERVICES" =~ ^[1-9][0-9]*$ ]] || fail "SERVICES=$SERVICES: want a whole number >= 1"
if [[ ! "$INSTANCES" =~ ^[1-9][0-9]*$ ]] || ((INSTANCES > 250)); then fail "INSTANCES=$INSTANCES: want 1 to 250"; fi
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || fail "RUNS=$RUNS: want a whole number >= 1"
[[ $PIN == 0 || $PIN == 1 ]] || fail "PIN=$PIN: want 0 or 1"
for tool in go awk sed date; do
	have "$tool" || fail "$tool is not on PATH"
done
date -d '2026-01-02T03:04:05.5Z' +%s.%N >/dev/null 2>&1 || fail "date does not read RFC 3339 times (GNU date is needed)"
PIN_CMD=()
if ((PIN)); then
	have taskset || fail "PIN=1 needs taskset"
	PIN_CMD=(taskset -c 0)
fi
[[ -r /proc/self/status ]] || fail "no /proc: this script reads memory from /proc/<pid>/status (Linux)"

trap exit_one_server EXIT
trap_signals

TMP_DIR=$(mktemp -d "${TMPDIR:-/tmp}/galleon-bench-start.XXXXXX")
LOG_DIR=$TMP_DIR/logs
BIN_DIR=$TMP_DIR/bin
REG_DIR=$TMP_DIR/registry
mkdir -p "$LOG_DIR" "$BIN_DIR" "$REG_DIR"

step "build and generate"
(cd "$REPO_DIR" && go build -o "$BIN_DIR/" ./cmd/galleon-file ./cmd/galleon-load) >"$LOG_DIR/build.log" 2>&1 ||
	fail "go build ./cmd/galleon-file ./cmd/galleon-load (see $LOG_DIR/build.log)"
"$BIN_DIR/galleon-load" generate --dir "$REG_DIR" --services "$SERVICES" --instances "$INSTANCES" >"$LOG_DIR/generate.log" 2>&1 ||
	fail "galleon-load generate (see $LOG_DIR/generate.log)"
say "$(cat "$LOG_DIR/generate.log"): $(find "$REG_DIR" -name '*.yaml' | wc -l) files, $(du -sh "$REG_DIR" | cut -f1)"
say "$(go env GOVERSION), $(nproc) CPUs, load average $(loadavg)${PIN_CMD[*]:+, galleon-file under ${PIN_CMD[*]}}"

step "starts"
say "| run | start → ready | VmHWM at ready |"
say "|---|---|---|"
TIMES=()
for ((run = 1; run <= RUNS; run++)); do
	log=$LOG_DIR/galleon-file-$run.log
	t0=$(now)
	spawn SERVER_PID "$log" . "${PIN_CMD[@]}" "$BIN_DIR/galleon-file" --dir "$REG_DIR" \
		--listen "127.0.0.1:$(free_port)" --http "127.0.0.1:$(free_port)" --log-format json
	ready=''
	for ((i = 0; i < 1200; i++)); do
		ready=$(sed -n 's/^{"time":"\([^"]*\)".*"msg":"ready: .*/\1/p' "$log" | head -n 1)
		[[ -n "$ready" ]] && break
		alive "$SERVER_PID" || fail "galleon-file exited before it was ready: $(tail -n 1 "$log")"
		sleep 0.1
	done
	[[ -n "$ready" ]] || fail "galleon-file not ready within 120 s (see $log)"
	hwm=$(proc_kb "$SERVER_PID" VmHWM) || fail "cannot read VmHWM of pid $SERVER_PID"
	stop "$SERVER_PID"
	SERVER_PID=''
	ms=$(awk -v a="$t0" -v b="$(date -d "$ready" +%s.%N)" 'BEGIN { printf "%.0f", (b - a) * 1000 }')
	TIMES+=("$ms")
	say "| $run | $ms ms | $(mib "$hwm") |"
done
median=$(printf '%s\n' "${TIMES[@]}" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
say "median of $RUNS: $median ms"

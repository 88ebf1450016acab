#!/usr/bin/env bash
# Measures galleon-file's start on the load tool's registry: from its exec to its "ready" log line
# (the registry's first full listing served; /readyz answers 200 from then on), RUNS times, and
# its peak memory (VmHWM) at that point.
#
#   scripts/bench-start.sh          10,000 services x 10 instances (21 files, 12 MB), 5 runs
#   PIN=1 scripts/bench-start.sh    galleon-file on CPU 0 only, as scripts/bench-peer.sh runs it
#   BASE=HEAD~1 scripts/bench-start.sh
#                                   the same starts of the build of a git revision too, alternated
#                                   with this tree's: this machine's speed drifts by up to 40%
#                                   within an hour, so only starts made side by side compare
#
# Settings (environment):
#   SERVICES   services of the generated registry, default 10000
#   INSTANCES  instances per service, default 10
#   RUNS       starts, default 5
#   PIN        0 (default): both cores; 1: taskset -c 0
#   BASE       a git revision to compare with (empty: none)
#
# The time is the log line's own timestamp less the time of the exec, not a /readyz poll: a poll
# loop on a 2-core machine slows what it measures. One markdown row per run, then the median.
#
# Needs: go, awk, sed, GNU date; Linux (/proc); taskset with PIN=1; git and tar with BASE.
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
BASE=${BASE:-}

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
if [[ -n "$BASE" ]]; then
	for tool in git tar; do
		have "$tool" || fail "BASE needs $tool"
	done
	git -C "$REPO_DIR" rev-parse --verify --quiet "$BASE^{commit}" >/dev/null || fail "BASE=$BASE: not a revision of $REPO_DIR"
fi
[[ -r /proc/self/status ]] || fail "no /proc: this script reads memory from /proc/<pid>/status (Linux)"

trap exit_one_server EXIT
trap_signals

work_dirs bench-start
REG_DIR=$TMP_DIR/registry
mkdir -p "$REG_DIR"

step "build and generate"
(cd "$REPO_DIR" && go build -o "$BIN_DIR/" ./cmd/galleon-file ./cmd/galleon-load) >"$LOG_DIR/build.log" 2>&1 ||
	fail "go build ./cmd/galleon-file ./cmd/galleon-load (see $LOG_DIR/build.log)"
BUILDS=(new)
if [[ -n "$BASE" ]]; then
	BUILDS=(base new)
	mkdir -p "$TMP_DIR/base-src" "$BIN_DIR/base"
	git -C "$REPO_DIR" archive "$BASE" | tar -x -C "$TMP_DIR/base-src" ||
		fail "git archive $BASE"
	(cd "$TMP_DIR/base-src" && go build -o "$BIN_DIR/base/" ./cmd/galleon-file) >>"$LOG_DIR/build.log" 2>&1 ||
		fail "go build ./cmd/galleon-file of $BASE (see $LOG_DIR/build.log)"
	say "base: $(git -C "$REPO_DIR" rev-parse --short "$BASE") ($BASE); new: this tree"
fi
"$BIN_DIR/galleon-load" generate --dir "$REG_DIR" --services "$SERVICES" --instances "$INSTANCES" >"$LOG_DIR/generate.log" 2>&1 ||
	fail "galleon-load generate (see $LOG_DIR/generate.log)"
say "$(cat "$LOG_DIR/generate.log"): $(find "$REG_DIR" -name '*.yaml' | wc -l) files, $(du -sh "$REG_DIR" | cut -f1)"
say "$(go env GOVERSION), $(nproc) CPUs, load average $(loadavg)${PIN_CMD[*]:+, galleon-file under ${PIN_CMD[*]}}"

step "starts"
if [[ -n "$BASE" ]]; then
	say "| run | base: start → ready | base: VmHWM | new: start → ready | new: VmHWM |"
	say "|---|---|---|---|---|"
else
	say "| run | start → ready | VmHWM at ready |"
	say "|---|---|---|"
fi
declare -A TIMES=()
for ((run = 1; run <= RUNS; run++)); do
	row="| $run |"
	for build in "${BUILDS[@]}"; do
		bin=$BIN_DIR/galleon-file
		# --dir is --file-dir's name before issue 28: the one a base build of any age knows.
		dir_flag=--file-dir
		[[ $build == base ]] && bin=$BIN_DIR/base/galleon-file dir_flag=--dir
		log=$LOG_DIR/galleon-file-$build-$run.log
		t0=$(now)
		spawn SERVER_PID "$log" . "${PIN_CMD[@]}" "$bin" "$dir_flag" "$REG_DIR" \
			--listen "127.0.0.1:$(free_port)" --http "127.0.0.1:$(free_port)" --log-format json
		ready=''
		for ((i = 0; i < 1200; i++)); do
			ready=$(sed -n 's/^{"time":"\([^"]*\)".*"msg":"ready: .*/\1/p' "$log" | head -n 1)
			[[ -n "$ready" ]] && break
			alive "$SERVER_PID" || fail "galleon-file ($build) exited before it was ready: $(tail -n 1 "$log")"
			sleep 0.1
		done
		[[ -n "$ready" ]] || fail "galleon-file ($build) not ready within 120 s (see $log)"
		hwm=$(proc_kb "$SERVER_PID" VmHWM) || fail "cannot read VmHWM of pid $SERVER_PID"
		stop "$SERVER_PID"
		SERVER_PID=''
		ms=$(awk -v a="$t0" -v b="$(date -d "$ready" +%s.%N)" 'BEGIN { printf "%.0f", (b - a) * 1000 }')
		TIMES[$build]+="$ms "
		row+=" $ms ms | $(mib "$hwm") |"
	done
	say "$row"
done
for build in "${BUILDS[@]}"; do
	# shellcheck disable=SC2086 # one time per word
	median=$(printf '%s\n' ${TIMES[$build]} | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
	if [[ -n "$BASE" ]]; then
		say "$build: median of $RUNS: $median ms"
	else
		say "median of $RUNS: $median ms"
	fi
done

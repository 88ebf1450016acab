#!/usr/bin/env bash
# Measures the initial sync of N sinks across processes beside its floor. galleon-file serves the
# load tool's registry; galleon-load floor, a null source in a process of its own, copies
# galleon-file's first SotW and Delta responses once and then answers every subscription with
# those bytes and nothing else (no snapshot, no per-stream state, no ACK tracking; the same gRPC
# server options). The same galleon-load sinks then sync from each in turn, RUNS times per
# protocol, alternating. What the floor takes is the transport's and the sinks' share of an
# initial sync; what galleon-file takes over it is its own.
#
#   scripts/bench-sync-floor.sh         10,000 services x 10 instances, 10 sinks, 5 runs each
#
# Settings (environment):
#   SERVICES   services of the generated registry, default 10000
#   INSTANCES  instances per service, default 10
#   SINKS      sinks of each sync, default 10
#   RUNS       syncs per source and protocol, default 5
#   PROTOCOLS  default "delta sotw"
#   PIN        auto (default): with taskset and 2 or more CPUs, galleon-file and the floor run on
#              CPU 0 and the sinks on CPU 1 (as scripts/bench-peer.sh); 0: no pinning
#
# Needs: go, awk, sed; Linux; taskset for pinning (optional).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/bench-lib.sh
source "$SCRIPT_DIR/bench-lib.sh"
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
export GOWORK=off
export LC_ALL=C

PROG=bench-sync-floor

no_args "${BASH_SOURCE[0]}" "$@"

SERVICES=${SERVICES:-10000}
INSTANCES=${INSTANCES:-10}
SINKS=${SINKS:-10}
RUNS=${RUNS:-5}
PROTOCOLS=${PROTOCOLS:-delta sotw}
PIN=${PIN:-auto}

STEP=start
FAILED=0
TMP_DIR='' LOG_DIR='' SERVER_PID='' FILE_PID='' FLOOR_PID=''

for v in SERVICES INSTANCES SINKS RUNS; do
	[[ "${!v}" =~ ^[1-9][0-9]*$ ]] || fail "$v=${!v}: want a whole number >= 1"
done
read -r -a PROTOS <<<"$PROTOCOLS"
for p in "${PROTOS[@]}"; do
	[[ $p == delta || $p == sotw ]] || fail "PROTOCOLS: $p is not delta or sotw"
done
[[ $PIN == auto || $PIN == 0 ]] || fail "PIN=$PIN: want auto or 0"
for tool in go awk sed; do
	have "$tool" || fail "$tool is not on PATH"
done

trap exit_one_server EXIT # SERVER_PID: galleon-file's and the floor's
trap_signals

pin_sides "$PIN" # galleon-file and the floor are the servers
COMMIT=$(commit_of "$REPO_DIR")

work_dirs bench-sync-floor
REG_DIR=$TMP_DIR/registry

step "build and generate"
(cd "$REPO_DIR" && go build -o "$BIN_DIR/" ./cmd/galleon-file ./cmd/galleon-load) >"$LOG_DIR/build.log" 2>&1 ||
	fail "go build ./cmd/galleon-file ./cmd/galleon-load (see $LOG_DIR/build.log)"
"$BIN_DIR/galleon-load" generate --dir "$REG_DIR" --services "$SERVICES" --instances "$INSTANCES" >"$LOG_DIR/generate.log" 2>&1 ||
	fail "galleon-load generate (see $LOG_DIR/generate.log)"
say "$PROG: $SERVICES services x $INSTANCES instances, $SINKS sinks, $RUNS syncs per source and protocol"
say "commit $COMMIT, $(go env GOVERSION), $NPROC CPUs, load average $(loadavg), $(date -u '+%Y-%m-%d %H:%M UTC'); $PINNING"

# wait_line PID LOG PATTERN WHAT: waits up to 120 s for a line of LOG matching PATTERN.
wait_line() {
	local pid=$1 log=$2 pattern=$3 what=$4 i
	for ((i = 0; i < 1200; i++)); do
		grep -q "$pattern" "$log" && return 0
		alive "$pid" || fail "$what exited: $(tail -n 1 "$log")"
		sleep 0.1
	done
	fail "$what: no \"$pattern\" within 120 s (see $log)"
}

step "start galleon-file and the floor"
FILE_XDS=127.0.0.1:$(free_port)
spawn FILE_PID "$LOG_DIR/galleon-file.log" . "${SERVER_PIN[@]}" "$BIN_DIR/galleon-file" --file-dir "$REG_DIR" \
	--listen "$FILE_XDS" --http "127.0.0.1:$(free_port)" --log-format json
SERVER_PID=$FILE_PID
wait_line "$FILE_PID" "$LOG_DIR/galleon-file.log" '"msg":"ready: ' galleon-file
FLOOR_XDS=127.0.0.1:$(free_port)
spawn FLOOR_PID "$LOG_DIR/floor.log" . "${SERVER_PIN[@]}" "$BIN_DIR/galleon-load" floor --from "$FILE_XDS" --listen "$FLOOR_XDS"
SERVER_PID+=" $FLOOR_PID"
wait_line "$FLOOR_PID" "$LOG_DIR/floor.log" '^serving the floor' "galleon-load floor"
say "galleon-file on $FILE_XDS; $(cat "$LOG_DIR/floor.log")"

# sync ADDR PROTOCOL N: one initial sync of SINKS sinks, in ms.
sync_ms() {
	local out=$LOG_DIR/run-$2-$3.log d
	"${LOAD_PIN[@]}" "$BIN_DIR/galleon-load" run --addr "$1" --sinks "$SINKS" --protocol "$2" >"$out" 2>&1 ||
		fail "galleon-load run --addr $1 --protocol $2: $(tail -n 1 "$out")"
	d=$(sed -n 's/^initial sync of all sinks: \([^ ]*\) .*/\1/p' "$out")
	[[ -n "$d" ]] || fail "no initial sync in $out"
	ms "$d"
}

# median V...: the median of the values.
median() {
	printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# stats V...: "median ms (min-max)" of the values.
stats() {
	printf '%.1f ms (%s)\n' "$(median "$@")" "$(printf '%s\n' "$@" | sort -n | awk 'NR == 1 { a = $1 } { b = $1 } END { printf "%.1f-%.1f", a, b }')"
}

step "syncs"
ROWS=()
for proto in "${PROTOS[@]}"; do
	FILE=() FLOOR=()
	for ((run = 1; run <= RUNS; run++)); do
		FILE+=("$(sync_ms "$FILE_XDS" "$proto" "file-$run")")
		FLOOR+=("$(sync_ms "$FLOOR_XDS" "$proto" "floor-$run")")
		say "$proto run $run: galleon-file ${FILE[-1]} ms, floor ${FLOOR[-1]} ms"
	done
	ratio=$(awk -v a="$(median "${FILE[@]}")" -v b="$(median "${FLOOR[@]}")" 'BEGIN { printf "%.2f", a / b }')
	ROWS+=("| $proto: initial sync, $SINKS sinks, median of $RUNS (range) | $(stats "${FILE[@]}") | $(stats "${FLOOR[@]}") | $ratio |")
done

step "results"
say "| measure | galleon-file | floor (null source, own process) | galleon-file / floor |"
say "|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"

#!/usr/bin/env bash
# Measures galleon-file against a peer in one run: test/peer (galleon-peer), which serves the same
# registry, converted by Galleon's own file adapter and pipeline to the same resources, from
# go-control-plane v0.14.0's LinearCache (the full set re-put with SetResources on every change)
# and its SotW and Delta ADS servers. The same galleon-load sinks drive both, one server at a
# time, and one markdown table gives galleon-file's figures, the peer's and their ratio, ready to
# paste into docs/benchmarks.md.
#
#   scripts/bench-peer.sh                                  10,000 services x 10 instances, 10 sinks, 50 changes
#   SERVICES=200 SINKS=2 CHANGES=5 scripts/bench-peer.sh   a smoke run
#
# Settings (environment):
#   SERVICES   services of the generated file registry, default 10000
#   INSTANCES  instances per service, default 10
#   SINKS      sinks of each galleon-load run, default 10
#   CHANGES    changes of each galleon-load run (one service's file replaced), default 50
#   INTERVAL   pause after each change reached every sink, default 20ms
#   PROTOCOLS  the sinks' protocols, in order, default "delta sotw"
#   DEBOUNCE   the core's debounce flags, the same for both servers, default
#              "--debounce-quiet 1ms --debounce-max 10ms" (issue 14's side-by-side run)
#   PIN        auto (default): with taskset and 2 or more CPUs, each server runs on CPU 0 and
#              galleon-load (the sinks) on CPU 1; 0: no pinning
#   SERVER_ENV NAME=VALUE words added to the servers' environment only (not galleon-load's),
#              e.g. SERVER_ENV=GOMEMLIMIT=140MiB; default none
#
# For each protocol, then for galleon-file and the peer in turn: the registry is generated again
# (so every run starts from the same files), the server starts on free loopback ports, is timed
# to /readyz 200, galleon-load run measures it (its raw output is printed), the server's VmRSS
# and VmHWM are read from /proc, and it is stopped. The sinks ask galleon-file for
# networking.istio.io/v1/ServiceEntry and the peer for type.googleapis.com/istio.mcp.v1alpha1.Resource:
# go-control-plane stamps the requested type URL on every resource it sends, and under that one
# its resources are the same Any bytes as galleon-file's (test/peer's test checks it). galleon-load
# checks the last change's result only for a */ServiceEntry type URL, so against the peer it does
# not; the peer's test does.
#
# Everything started is stopped on exit, failure or Ctrl-C; the temporary directory is removed
# (its logs are kept when something failed, and the failure line says where; not on Ctrl-C).
#
# Needs: go, curl, awk, sed; Linux (/proc); taskset for pinning (optional).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/bench-lib.sh
source "$SCRIPT_DIR/bench-lib.sh"
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
export GOWORK=off
export LC_ALL=C # a decimal point in EPOCHREALTIME and awk; byte-wise sed

PROG=bench-peer

no_args "${BASH_SOURCE[0]}" "$@"

SERVICES=${SERVICES:-10000}
INSTANCES=${INSTANCES:-10}
SINKS=${SINKS:-10}
CHANGES=${CHANGES:-50}
INTERVAL=${INTERVAL:-20ms}
PROTOCOLS=${PROTOCOLS:-delta sotw}
DEBOUNCE=${DEBOUNCE:---debounce-quiet 1ms --debounce-max 10ms}
PIN=${PIN:-auto}

STEP=start
FAILED=0
TMP_DIR='' LOG_DIR='' SERVER_PID=''

[[ -n "${EPOCHREALTIME:-}" ]] || fail "bash 5 or later is needed (EPOCHREALTIME)"
[[ "$SERVICES" =~ ^[1-9][0-9]*$ ]] || fail "SERVICES=$SERVICES: want a whole number >= 1"
if [[ ! "$INSTANCES" =~ ^[1-9][0-9]*$ ]] || ((INSTANCES > 250)); then fail "INSTANCES=$INSTANCES: want 1 to 250"; fi
[[ "$SINKS" =~ ^[1-9][0-9]*$ ]] || fail "SINKS=$SINKS: want a whole number >= 1"
[[ "$CHANGES" =~ ^[1-9][0-9]*$ ]] || fail "CHANGES=$CHANGES: want a whole number >= 1"
read -r -a PROTOS <<<"$PROTOCOLS"
((${#PROTOS[@]} > 0)) || fail "PROTOCOLS is empty: want delta, sotw or both"
for p in "${PROTOS[@]}"; do
	[[ $p == delta || $p == sotw ]] || fail "PROTOCOLS: $p: want delta or sotw"
done
read -r -a DEBOUNCE_ARGS <<<"$DEBOUNCE"
read -r -a SERVER_ENV_ARGS <<<"${SERVER_ENV:-}"
for kv in "${SERVER_ENV_ARGS[@]}"; do
	[[ $kv =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || fail "SERVER_ENV: $kv: want NAME=VALUE words"
done
for tool in go curl awk sed; do
	have "$tool" || fail "$tool is not on PATH"
done
[[ -r /proc/self/status ]] || fail "no /proc: this script reads memory from /proc/<pid>/status (Linux)"

trap exit_one_server EXIT
trap_signals

USED_PORTS=' '

http_ok() { curl -fsS -o /dev/null --max-time 2 "http://$1$2" 2>/dev/null; }

# ---------------------------------------------------------------------------------------------

SCRIPT_START=$(now)
LOAD_START=$(loadavg)
COMMIT=$(commit_of "$REPO_DIR")
pin_sides "$PIN"
say "$PROG: $SERVICES services x $INSTANCES instances, $SINKS sinks, $CHANGES changes (interval $INTERVAL), protocols ${PROTOS[*]}, both servers $DEBOUNCE"
say "commit $COMMIT, $NPROC CPUs, load average $LOAD_START, $(date -u '+%Y-%m-%d %H:%M UTC'); $PINNING"

work_dirs bench-peer
REG_DIR=$TMP_DIR/registry

step "build galleon-file, galleon-load and galleon-peer (test/peer, go-control-plane v0.14.0)"
t0=$(now)
(cd "$REPO_DIR" && go build -o "$BIN_DIR/" ./cmd/galleon-file ./cmd/galleon-load) >"$LOG_DIR/build.log" 2>&1 ||
	fail "go build ./cmd/galleon-file ./cmd/galleon-load (see $LOG_DIR/build.log)"
(cd "$REPO_DIR/test/peer" && go build -o "$BIN_DIR/galleon-peer" .) >>"$LOG_DIR/build.log" 2>&1 ||
	fail "go build in test/peer (see $LOG_DIR/build.log)"
GO_VERSION=$(go env GOVERSION 2>/dev/null || echo go)
GCP_VERSION=$(cd "$REPO_DIR/test/peer" && go list -m -f '{{.Version}}' github.com/envoyproxy/go-control-plane 2>/dev/null || echo '?')
say "built in $(secs "$t0" "$(now)") s with $GO_VERSION; go-control-plane $GCP_VERSION"

# Results: R[<server>,<protocol>,<measure>].
declare -A R=()
SERVERS=(galleon-file peer)
MCP_TYPE=type.googleapis.com/istio.mcp.v1alpha1.Resource
SE_TYPE=networking.istio.io/v1/ServiceEntry

# start_server NAME: generate the registry afresh, start NAME on free ports (three tries when a
# port was taken meanwhile) and wait for /readyz 200; sets SERVER_PID, SERVER_XDS, SERVER_HTTP,
# READY_S.
start_server() {
	local name=$1 attempt t0 ready deadline dead log=$LOG_DIR/$1-$2.log args bin
	"$BIN_DIR/galleon-load" generate --dir "$REG_DIR" --services "$SERVICES" --instances "$INSTANCES" >>"$LOG_DIR/generate.log" 2>&1 ||
		fail "galleon-load generate (see $LOG_DIR/generate.log)"
	for attempt in 1 2 3; do
		SERVER_XDS=127.0.0.1:$(free_port)
		SERVER_HTTP=127.0.0.1:$(free_port)
		args=(--listen "$SERVER_XDS" --http "$SERVER_HTTP" "${DEBOUNCE_ARGS[@]}")
		if [[ $name == peer ]]; then
			bin=$BIN_DIR/galleon-peer
			args+=(--dir "$REG_DIR" --type "$MCP_TYPE")
		else
			bin=$BIN_DIR/galleon-file
			args+=(--file-dir "$REG_DIR")
		fi
		say "${SERVER_PIN[*]}${SERVER_PIN[*]:+ }$(basename "$bin") ${args[*]}"
		t0=$(now)
		spawn SERVER_PID "$log" . env "${SERVER_ENV_ARGS[@]}" "${SERVER_PIN[@]}" "$bin" "${args[@]}"
		ready=''
		deadline=$(awk -v n="$t0" 'BEGIN { printf "%.3f", n + 600 }')
		while alive "$SERVER_PID"; do
			if http_ok "$SERVER_HTTP" /readyz; then
				ready=$(now)
				break
			fi
			awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }' && fail "$name not ready (/readyz 200) within 600 s"
			sleep 0.05
		done
		[[ -n "$ready" ]] && break
		dead=$SERVER_PID
		SERVER_PID=''
		if ((attempt == 3)) || ! grep -q 'address already in use' "$log"; then
			fail "$name (pid $dead) exited before it was ready: $(grep -m 1 -i 'level=ERROR\|galleon-peer:' "$log" || tail -n 1 "$log")"
		fi
	done
	READY_S=$(secs "$t0" "$ready")
	say "ready (/readyz 200) $READY_S s after its start (pid $SERVER_PID, xDS $SERVER_XDS, http $SERVER_HTTP)"
}

# reput_totals: the peer's galleon_peer_reput_seconds sum and count, "0 0" when it has none.
reput_totals() {
	curl -fsS --max-time 5 "http://$SERVER_HTTP/metrics" 2>/dev/null | awk '
		$1 == "galleon_peer_reput_seconds_sum" { s = $2 } $1 == "galleon_peer_reput_seconds_count" { n = $2 }
		END { printf "%s %s\n", s + 0, n + 0 }'
}

# measure NAME PROTOCOL: one server's run.
measure() {
	local name=$1 proto=$2 out=$LOG_DIR/run-$1-$2.out type=$SE_TYPE key=$1,$2 run line
	local reput_sum0=0 reput_n0=0 reput_sum reput_n
	[[ $name == peer ]] && type=$MCP_TYPE
	step "$name, $proto"
	start_server "$name" "$proto"
	R[$key,ready]=$READY_S
	R[$key,rss_ready]=$(proc_kb "$SERVER_PID" VmRSS) || fail "cannot read /proc/$SERVER_PID/status"
	[[ $name == peer ]] && read -r reput_sum0 reput_n0 <<<"$(reput_totals)"
	run=(--addr "$SERVER_XDS" --dir "$REG_DIR" --instances "$INSTANCES" --type "$type" --sinks "$SINKS" --protocol "$proto"
		--changes "$CHANGES" --interval "$INTERVAL" --metrics "http://$SERVER_HTTP/metrics")
	say "${LOAD_PIN[*]}${LOAD_PIN[*]:+ }galleon-load run ${run[*]}"
	"${LOAD_PIN[@]}" "$BIN_DIR/galleon-load" run "${run[@]}" >"$out" 2>&1 ||
		fail "galleon-load run against $name ($proto): $(grep -m 1 '^galleon-load:' "$out" || tail -n 1 "$out")"
	sed 's/^/    /' "$out"
	R[$key,hwm]=$(proc_kb "$SERVER_PID" VmHWM) || fail "cannot read /proc/$SERVER_PID/status"
	line=$(grep '^initial sync of all sinks: ' "$out") || fail "galleon-load run ($name, $proto) printed no initial sync line"
	R[$key,sync]=$(ms "$(sed -n 's/^initial sync of all sinks: \([^ ]*\) .*/\1/p' <<<"$line")")
	R[$key,sync_bytes]=$(sed -n 's/.*(\([0-9]*\) bytes per sink)$/\1/p' <<<"$line")
	line=$(grep '^registry change -> every sink' "$out") || fail "galleon-load run ($name, $proto) printed no \"registry change -> every sink\" line"
	R[$key,p50]=$(ms "$(sed -n 's/.* p50 \([^ ]*\) .*/\1/p' <<<"$line")")
	R[$key,p99]=$(ms "$(sed -n 's/.* p99 \([^ ]*\) .*/\1/p' <<<"$line")")
	R[$key,max]=$(ms "$(sed -n 's/.* max \([^ ]*\) .*/\1/p' <<<"$line")")
	R[$key,change_bytes]=$(sed -n 's/.*(\([0-9]*\) bytes per sink per change)$/\1/p' <<<"$line")
	R[$key,updates]=$(sed -n 's/^updates per sink: \([0-9]*\) for .*/\1/p' "$out")
	R[$key,rss_metric]=$(sed -n 's/^source resident memory: \([0-9.]*\) MiB$/\1/p' "$out")
	if [[ $name == peer ]]; then
		# The peer's own figure: its full re-puts (SetResources on the LinearCache) during the
		# run, mean; the first listing's, before the run, is left out.
		read -r reput_sum reput_n <<<"$(reput_totals)"
		R[$key,reput]=$(awk -v s0="$reput_sum0" -v n0="$reput_n0" -v s="$reput_sum" -v n="$reput_n" \
			'BEGIN { if (n > n0) printf "%.2f ms (%d re-puts)\n", (s - s0) / (n - n0) * 1000, n - n0 }')
	fi
	stop "$SERVER_PID"
	SERVER_PID=''
}

for proto in "${PROTOS[@]}"; do
	for name in "${SERVERS[@]}"; do
		measure "$name" "$proto"
	done
done

# ---------------------------------------------------------------------------------------------
# The table.

# cell VALUE UNIT: VALUE UNIT, or ? when empty.
cell() { if [[ -n "$1" ]]; then printf '%s%s' "$1" "${2:+ $2}"; else printf '?'; fi; }
# ratio A B: B / A, two decimals; ? when either is empty or A is 0.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || a + 0 == 0) print "?"; else printf "%.2f\n", b / a }'; }
# trow LABEL MEASURE PROTOCOL UNIT [SCALE]: a row of both servers' MEASURE and the ratio; SCALE
# converts both (kB to MiB: 1/1024).
trow() {
	local label=$1 m=$2 p=$3 unit=$4 scale=${5:-1} a b
	a=${R[galleon-file,$p,$m]:-} b=${R[peer,$p,$m]:-}
	if [[ $scale != 1 ]]; then
		[[ -n "$a" ]] && a=$(awk -v v="$a" -v s="$scale" 'BEGIN { printf "%.1f\n", v * s }')
		[[ -n "$b" ]] && b=$(awk -v v="$b" -v s="$scale" 'BEGIN { printf "%.1f\n", v * s }')
	fi
	printf '| %s | %s | %s | %s |\n' "$label" "$(cell "$a" "$unit")" "$(cell "$b" "$unit")" "$(ratio "$a" "$b")"
}

LOAD_END=$(loadavg)
WALL=$(secs "$SCRIPT_START" "$(now)")
printf '\n== results: galleon-file and a go-control-plane %s peer, %s services x %s instances, %s sinks, %s changes\n\n' \
	"$GCP_VERSION" "$SERVICES" "$INSTANCES" "$SINKS" "$CHANGES"
printf 'commit %s, %s, %s CPUs, %s; load average at start %s, at end %s; %s s\n\n' \
	"$COMMIT" "$GO_VERSION" "$NPROC" "$(date -u '+%Y-%m-%d %H:%M UTC')" "$LOAD_START" "$LOAD_END" "$WALL"
printf '| measure | galleon-file | peer: go-control-plane %s LinearCache | peer / galleon-file |\n|---|---|---|---|\n' "$GCP_VERSION"
for p in "${PROTOS[@]}"; do
	P=Delta
	[[ $p == sotw ]] && P=SotW
	trow "$P: start → /readyz 200" ready "$p" s
	trow "$P: initial sync, $SINKS sinks" sync "$p" ms
	trow "$P: initial sync, bytes per sink" sync_bytes "$p" B
	trow "$P: file saved → every sink, p50 ($CHANGES changes)" p50 "$p" ms
	trow "$P: file saved → every sink, p99" p99 "$p" ms
	trow "$P: file saved → every sink, max" max "$p" ms
	trow "$P: bytes per sink per change" change_bytes "$p" B
	trow "$P: updates per sink" updates "$p" ''
	trow "$P: resident memory once ready (VmRSS)" rss_ready "$p" MiB 0.0009765625
	trow "$P: resident memory after the run (process_resident_memory_bytes)" rss_metric "$p" MiB
	trow "$P: peak resident memory (VmHWM after the run)" hwm "$p" MiB 0.0009765625
	printf '| %s: the peer'"'"'s full re-put per change (SetResources), mean | | %s | |\n' "$P" "${R[peer,$p,reput]:-?}"
done
printf '\nBoth servers: %s. galleon-file serves %s; the peer %s (go-control-plane stamps the\n' "$DEBOUNCE" "$SE_TYPE" "$MCP_TYPE"
printf 'requested type URL on each resource; under this one they are galleon-file'"'"'s bytes). %s.\n' "$PINNING"

#!/usr/bin/env bash
# Measures galleon-eureka's polling against a real Eureka API server (PolarisMesh's polaris-server,
# scripts/eureka.sh) and prints the results as markdown table rows (| measure | value |), ready to
# paste into docs/benchmarks.md: bytes per delta poll against a full one, a registry change ->
# every sink against the poll interval, the server's CPU per poll while galleon-eureka polls deltas
# against while a plain full poller polls, and galleon-eureka's memory.
#
#   scripts/bench-eureka.sh                        2,000 applications x 10 instances, 1% churn per 5 s poll
#   POLL=10s scripts/bench-eureka.sh               the same at the adapter's default interval
#   scripts/bench-eureka.sh --apps 500 --polls 12 --changes 20
#
# Settings (a flag wins over the environment variable):
#   APPS      (--apps)           applications, default 2000
#   INSTANCES (--instances)      instances per application, 1-250, default 10
#   POLL      (--poll)           galleon-eureka's --eureka-poll-interval, the churn's period and the full
#                                poller's interval, default 5s (whole seconds)
#   CHURN     (--churn)          percent of the instances changed per POLL, default 1
#   POLLS     (--polls)          polls in each CPU window, default 24
#   SINKS     (--sinks)          sinks of the timed run, default 10
#   CHANGES   (--changes)        timed changes, default 40
#   PROTOCOL  (--protocol)       the timed run's sinks: delta or sotw, default delta
#   LEASE     (--lease)          the instances' lease (galleon-load eureka-generate --lease-duration),
#                                default 180s; they are renewed every 30 s whatever it is (below)
#   GALLEON_ARGS                 extra flags for galleon-eureka
#
# Steps (the figures mean something only on a quiet machine: the load average and how busy the
# whole machine was are printed for each window):
#   1. polaris-server 1.18.1 (scripts/eureka.sh build, config) on free loopback ports in a
#      temporary directory: caches rebuilt every second, delta window (deltaExpireInterval) 60 s;
#   2. galleon-load eureka-generate registers APPS x INSTANCES (+ LOAD-TARGET; one instance of each
#      application first, then the others) and keeps running: every instance renewed 2 s after its
#      registration (Polaris marks an instance with no renewal on record unhealthy at its first
#      check, within 30 s), then every 30 s; CHURN% of them registered again with a new metadata
#      value per POLL, spread evenly (one MODIFIED entry of /apps/delta each); it reports every POLL;
#   3. window B1, once the churn has filled a delta window: POLLS x POLL with no poller;
#   4. galleon-eureka starts (--eureka-poll-interval POLL, --eureka-delta-window 60s, --log-level debug):
#      start -> /readyz 200, its first full fetch;
#   5. window A: POLLS polls of galleon-eureka, from its metrics (wire and decoded bytes, requests,
#      fetch time) and /proc (its VmRSS and VmHWM);
#   6. galleon-load run --eureka-url: CHANGES changes of LOAD-TARGET (one registration each) timed
#      to every sink, each after a random pause of up to POLL so that changes fall at every point
#      of the poll cycle, and to the server listing them (GET /apps/LOAD-TARGET every 50 ms);
#   7. galleon-eureka stopped; window C, a full poller: curl GET /apps with Accept:
#      application/json and Accept-Encoding: gzip every POLL; window B2, no poller again.
# In every window: the server's, the generator's and galleon-eureka's utime+stime (/proc/<pid>/stat),
# how busy the machine was (/proc/stat), the churn the generator made and how late its renewals
# were. The server's CPU per poll is its CPU time over a window divided by the polls; "less the
# no-poller rate" takes off what it spent at B1's and B2's rate over the same time: what the polls
# themselves cost it.
#
# Leases: Polaris marks an instance unhealthy 3 x TTL after the last renewal it processed, TTL
# being min(durationInSecs/3, renewalIntervalInSecs) (a TTL over 60 s becomes 5 s), and its
# standalone (bolt) store then reads every instance for each such change, which slows it further.
# A lease of 180 s (TTL 60 s, the most Polaris takes) gives it the most slack against its own
# stalls (on this 2-core machine, shared, its 1 s listing rebuild took up to 7 s while 20,000
# instances registered); renewals still go every 30 s, as a Spring Cloud client's.
#
# Everything started is stopped on exit, failure or Ctrl-C; the temporary directory is removed (its
# logs are kept when something failed, and the failure line says where; not on Ctrl-C).
#
# Needs: go, curl, awk, sed, getconf; Linux (/proc); scripts/eureka.sh builds polaris-server from
# the Go module proxy the first time (~2.5 min).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/bench-lib.sh
source "$SCRIPT_DIR/bench-lib.sh"
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
export GOWORK=off
export LC_ALL=C # a decimal point in EPOCHREALTIME and awk; byte-wise sed

PROG=bench-eureka

usage() {
	sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

APPS=${APPS:-2000}
INSTANCES=${INSTANCES:-10}
POLL=${POLL:-5s}
CHURN=${CHURN:-1}
POLLS=${POLLS:-24}
SINKS=${SINKS:-10}
CHANGES=${CHANGES:-40}
PROTOCOL=${PROTOCOL:-delta}
LEASE=${LEASE:-180s}
while (($# > 0)); do
	case "$1" in
	--apps | --instances | --poll | --churn | --polls | --sinks | --changes | --protocol | --lease)
		(($# >= 2)) || usage
		name=${1#--}
		printf -v "${name^^}" '%s' "$2"
		shift 2
		;;
	--apps=* | --instances=* | --poll=* | --churn=* | --polls=* | --sinks=* | --changes=* | --protocol=* | --lease=*)
		name=${1%%=*}
		name=${name#--}
		printf -v "${name^^}" '%s' "${1#*=}"
		shift
		;;
	-h | --help) usage ;;
	*)
		printf '%s: unknown argument %s\n' "$PROG" "$1" >&2
		usage
		;;
	esac
done

# ---------------------------------------------------------------------------------------------
# Output, time, clean-up.

STEP=start
FAILED=0
TMP_DIR='' LOG_DIR='' POLARIS_PID='' GEN_PID='' GE_PID='' POLLER_PID=''

[[ -n "${EPOCHREALTIME:-}" ]] || fail "bash 5 or later is needed (EPOCHREALTIME)"
[[ "$APPS" =~ ^[1-9][0-9]*$ ]] || fail "APPS=$APPS: want a whole number >= 1"
if [[ ! "$INSTANCES" =~ ^[1-9][0-9]*$ ]] || ((INSTANCES > 250)); then fail "INSTANCES=$INSTANCES: want 1 to 250"; fi
[[ "$POLL" =~ ^([1-9][0-9]*)s$ ]] || fail "POLL=$POLL: want whole seconds, e.g. 5s"
POLL_S=${BASH_REMATCH[1]}
[[ "$CHURN" =~ ^[0-9]+(\.[0-9]+)?$ ]] || fail "CHURN=$CHURN: want a percentage, e.g. 1"
[[ "$POLLS" =~ ^[1-9][0-9]*$ ]] || fail "POLLS=$POLLS: want a whole number >= 1"
[[ "$SINKS" =~ ^[1-9][0-9]*$ ]] || fail "SINKS=$SINKS: want a whole number >= 1"
[[ "$CHANGES" =~ ^[1-9][0-9]*$ ]] || fail "CHANGES=$CHANGES: want a whole number >= 1"
[[ "$PROTOCOL" == delta || "$PROTOCOL" == sotw ]] || fail "PROTOCOL=$PROTOCOL: want delta or sotw"
[[ "$LEASE" =~ ^[1-9][0-9]*s$ ]] || fail "LEASE=$LEASE: want whole seconds, e.g. 180s"
read -r -a EXTRA_ARGS <<<"${GALLEON_ARGS:-}"
for tool in go curl awk sed getconf; do
	have "$tool" || fail "$tool is not on PATH"
done
[[ -r /proc/self/stat && -r /proc/stat ]] || fail "no /proc: this script reads CPU time and memory from /proc (Linux)"
CLK_TCK=$(getconf CLK_TCK)

on_exit() {
	local code=$? interrupted=0
	trap - EXIT INT TERM HUP
	exit_report "$code" && interrupted=1
	stop "$POLLER_PID"
	stop "$GE_PID"
	stop "$GEN_PID"
	stop "$POLARIS_PID" 30 # polaris-server takes 5-15 s to stop
	if [[ -n "$TMP_DIR" ]]; then
		if ((code == 0 || interrupted)); then
			rm -rf "$TMP_DIR"
		else
			# Keep the logs; the store and the binaries are large.
			rm -rf "${TMP_DIR:?}/bin" "${TMP_DIR:?}/polaris/polaris.bolt"
		fi
	fi
	exit "$code"
}
trap on_exit EXIT
trap_signals

# wait_for SECONDS WHAT CMD...: poll CMD every 0.2 s until it succeeds; fail after SECONDS or when
# a process this script started exits.
wait_for() {
	local timeout=$1 what=$2 deadline
	shift 2
	deadline=$(awk -v n="$(now)" -v t="$timeout" 'BEGIN { printf "%.3f", n + t }')
	until "$@"; do
		[[ -z "$POLARIS_PID" ]] || alive "$POLARIS_PID" || fail "polaris-server exited while waiting for: $what (see $LOG_DIR/polaris-server.out)"
		[[ -z "$GEN_PID" ]] || alive "$GEN_PID" || fail "galleon-load eureka-generate exited while waiting for: $what: $(tail -n 1 "$LOG_DIR/eureka-generate.log")"
		[[ -z "$GE_PID" ]] || alive "$GE_PID" || fail "galleon-eureka exited while waiting for: $what: $(grep -m 1 'level=ERROR' "$LOG_DIR/galleon-eureka.log" || tail -n 1 "$LOG_DIR/galleon-eureka.log")"
		if awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }'; then
			fail "timed out after ${timeout}s waiting for: $what"
		fi
		sleep 0.2
	done
}

# check_alive: fail when a process this script started has exited.
check_alive() {
	alive "$POLARIS_PID" || fail "polaris-server exited (see $LOG_DIR/polaris-server.out)"
	alive "$GEN_PID" || fail "galleon-load eureka-generate exited: $(tail -n 1 "$LOG_DIR/eureka-generate.log")"
	[[ -z "$GE_PID" ]] || alive "$GE_PID" || fail "galleon-eureka exited: $(tail -n 1 "$LOG_DIR/galleon-eureka.log")"
}

USED_PORTS=' '

http_ok() { curl -fsS -o /dev/null --max-time 5 "$1" 2>/dev/null; }

# cpu_ticks PID: utime + stime of PID, in clock ticks (fields 14 and 15 of /proc/<pid>/stat,
# counted after the command name, which may hold spaces).
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }
# machine_ticks: "busy total" clock ticks of the whole machine (/proc/stat cpu line).
machine_ticks() { awk '$1 == "cpu" { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat; }
# fmt_bytes N: N with thousands separators.
fmt_bytes() { awk -v n="$1" 'BEGIN { s = sprintf("%.0f", n); r = ""; while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) } print s r }'; }

# ---------------------------------------------------------------------------------------------
# galleon-eureka's metrics.

METRICS=''
scrape() { METRICS=$(curl -fsS --max-time 10 "http://$GE_HTTP/metrics") || fail "galleon-eureka's /metrics does not answer"; }
# metric NAME [LABEL]: the sum of NAME's samples in METRICS whose labels hold LABEL (e.g.
# 'kind="delta"'); 0 when there are none.
metric() {
	awk -v n="$1" -v f="${2:-}" '
		index($1, n "{") == 1 || $1 == n { if (f == "" || index($1, f) > 0) s += $2 }
		END { printf "%.6f\n", s }' <<<"$METRICS"
}

# ---------------------------------------------------------------------------------------------
# Windows: the server's, the generator's and the adapter's (when it runs) CPU time and the
# machine's over a number of seconds, with the churn the generator made meanwhile.

# gen_window FROM: from eureka-generate's reports after line FROM of its log (one every POLL):
# "changes-per-POLL most-behind worst-late-seconds".
gen_window() {
	tail -n +"$(($1 + 1))" "$GEN_LOG" | awk -v p="$POLL_S" '
		function dur(d,   t, v) {
			t = 0
			while (d != "") {
				if (!match(d, /^[0-9.]+/)) return -1
				v = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1)
				if (d ~ /^ms/) { t += v / 1e3; d = substr(d, 3) }
				else if (d ~ /^m/) { t += v * 60; d = substr(d, 2) }
				else if (d ~ /^s/) { t += v; d = substr(d, 2) }
				else if (d ~ /^(us|\xc2\xb5s)/) { t += v / 1e6; d = substr(d, d ~ /^us/ ? 3 : 4) }
				else if (d ~ /^ns/) { t += v / 1e9; d = substr(d, 3) }
				else return -1
			}
			return t
		}
		/^eureka-generate: .* renewals \(/ {
			el = $2; sub(/:$/, "", el); t = dur(el)
			c = $0; sub(/ changes \(.*/, "", c); sub(/.* /, "", c)
			b = $0; sub(/.*at most /, "", b); sub(/ behind.*/, "", b)
			l = $0; sub(/.*at worst /, "", l); sub(/ late.*/, "", l)
			if (n == 0) { t0 = t; c0 = c }
			t1 = t; c1 = c; n++
			if (b + 0 > mb) mb = b + 0
			if (dur(l) > ml) ml = dur(l)
		}
		END {
			if (n < 2 || t1 <= t0) { print "? ? ?"; exit }
			printf "%.0f %d %.2f\n", (c1 - c0) / (t1 - t0) * p, mb, ml
		}'
}

declare -A W_SECS W_POLARIS W_GEN W_ADAPTER W_BUSY W_LOAD W_CHURN W_BEHIND W_LATE
# measure_window NAME SECONDS: measure for SECONDS into the W_* arrays under NAME.
measure_window() {
	local w=$1 t0 p0 g0 a0=0 m0 mt0 l0 mark t1 p1 g1 a1=0 m1 mt1
	say "window $w: $2 s"
	mark=$(wc -l <"$GEN_LOG")
	t0=$(now)
	p0=$(cpu_ticks "$POLARIS_PID") || fail "cannot read /proc/$POLARIS_PID/stat"
	g0=$(cpu_ticks "$GEN_PID") || fail "cannot read /proc/$GEN_PID/stat"
	[[ -z "$GE_PID" ]] || a0=$(cpu_ticks "$GE_PID")
	read -r m0 mt0 < <(machine_ticks)
	l0=$(loadavg)
	sleep "$2"
	t1=$(now)
	p1=$(cpu_ticks "$POLARIS_PID") || fail "polaris-server exited during window $w"
	g1=$(cpu_ticks "$GEN_PID") || fail "eureka-generate exited during window $w"
	[[ -z "$GE_PID" ]] || a1=$(cpu_ticks "$GE_PID")
	read -r m1 mt1 < <(machine_ticks)
	W_SECS[$w]=$(secs "$t0" "$t1")
	W_POLARIS[$w]=$(awk -v a="$p0" -v b="$p1" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", (b - a) / hz }')
	W_GEN[$w]=$(awk -v a="$g0" -v b="$g1" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", (b - a) / hz }')
	W_ADAPTER[$w]=$(awk -v a="$a0" -v b="$a1" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", (b - a) / hz }')
	W_BUSY[$w]=$(awk -v a="$m0" -v b="$m1" -v ta="$mt0" -v tb="$mt1" 'BEGIN { printf "%.0f", 100 * (b - a) / (tb - ta) }')
	W_LOAD[$w]="$l0 -> $(loadavg)"
	read -r "W_CHURN[$w]" "W_BEHIND[$w]" "W_LATE[$w]" < <(gen_window "$mark")
	say "polaris-server ${W_POLARIS[$w]} s CPU, eureka-generate ${W_GEN[$w]} s${GE_PID:+, galleon-eureka ${W_ADAPTER[$w]} s} in ${W_SECS[$w]} s; churn ${W_CHURN[$w]} changes per $POLL (at most ${W_BEHIND[$w]} behind), renewals at worst ${W_LATE[$w]} s late; machine ${W_BUSY[$w]}% busy, load ${W_LOAD[$w]}"
}

# ---------------------------------------------------------------------------------------------
# Results.

ROWS=()

# ---------------------------------------------------------------------------------------------

SCRIPT_START=$(now)
LOAD_START=$(loadavg)
NPROC=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)
COMMIT=$(commit_of "$REPO_DIR")
say "$PROG: $APPS applications x $INSTANCES instances, $CHURN% churn per $POLL poll, $POLLS polls a window, $SINKS $PROTOCOL sinks, $CHANGES changes, leases $LEASE${GALLEON_ARGS:+, galleon-eureka $GALLEON_ARGS}"
say "commit $COMMIT, $NPROC CPUs, load average $LOAD_START, $(date -u '+%Y-%m-%d %H:%M UTC')"

work_dirs bench-eureka
POLARIS_DIR=$TMP_DIR/polaris
mkdir -p "$POLARIS_DIR"

step "build galleon-eureka and galleon-load"
t0=$(now)
(cd "$REPO_DIR" && go build -o "$BIN_DIR/" ./cmd/galleon-eureka ./cmd/galleon-load) >"$LOG_DIR/build.log" 2>&1 ||
	fail "go build ./cmd/galleon-eureka ./cmd/galleon-load (see $LOG_DIR/build.log)"
GO_VERSION=$(go env GOVERSION 2>/dev/null || echo go)
say "built in $(secs "$t0" "$(now)") s with $GO_VERSION"

# 1. polaris-server -------------------------------------------------------------------------------
step "1. polaris-server"
POLARIS_BIN=$("$SCRIPT_DIR/eureka.sh" build 2>>"$LOG_DIR/eureka-sh.log" | tail -n 1) ||
	fail "scripts/eureka.sh build (see $LOG_DIR/eureka-sh.log)"
[[ -x "$POLARIS_BIN" ]] || fail "scripts/eureka.sh build printed '$POLARIS_BIN', not an executable"
for attempt in 1 2 3; do
	EUREKA_PORT=$(free_port)
	"$SCRIPT_DIR/eureka.sh" config "$POLARIS_DIR" "$EUREKA_PORT" "$(free_port)" "$(free_port)" >/dev/null 2>>"$LOG_DIR/eureka-sh.log" ||
		fail "scripts/eureka.sh config (see $LOG_DIR/eureka-sh.log)"
	EUREKA_URL=http://127.0.0.1:$EUREKA_PORT/eureka
	t0=$(now)
	# TZ=UTC: Polaris writes local times into instance records and reads them back as UTC.
	spawn POLARIS_PID "$LOG_DIR/polaris-server.out" "$POLARIS_DIR" env TZ=UTC "$POLARIS_BIN" start -c polaris-server.yaml
	ready=''
	for ((i = 0; i < 600; i++)); do
		alive "$POLARIS_PID" || break
		if http_ok "$EUREKA_URL/apps"; then
			ready=$(now)
			break
		fi
		sleep 0.1
	done
	[[ -n "$ready" ]] && break
	stop "$POLARIS_PID" 30
	POLARIS_PID=''
	if ((attempt == 3)) || ! grep -qs 'address already in use' "$POLARIS_DIR"/log/runtime/*.log "$LOG_DIR/polaris-server.out"; then
		fail "polaris-server did not answer GET $EUREKA_URL/apps within 60 s (see $LOG_DIR/polaris-server.out and $POLARIS_DIR/log)"
	fi
	rm -rf "${POLARIS_DIR:?}/log" "${POLARIS_DIR:?}/polaris.bolt"
done
POLARIS_VERSION=$("$POLARIS_BIN" version 2>/dev/null | grep -o 'v[0-9][0-9.]*' | head -n 1 || true)
say "polaris-server ${POLARIS_VERSION:-?} (pid $POLARIS_PID) serves the Eureka API at $EUREKA_URL, ready in $(secs "$t0" "$ready") s"

# 2. eureka-generate ---------------------------------------------------------------------------------
step "2. galleon-load eureka-generate"
GEN_LOG=$LOG_DIR/eureka-generate.log
gen_args=(eureka-generate --eureka-url "$EUREKA_URL" --apps "$APPS" --instances "$INSTANCES"
	--churn-percent "$CHURN" --churn-interval "$POLL" --lease-duration "$LEASE" --report-interval "$POLL")
say "galleon-load ${gen_args[*]}"
t0=$(now)
spawn GEN_PID "$GEN_LOG" "$TMP_DIR" "$BIN_DIR/galleon-load" "${gen_args[@]}"
registered() { grep -qs '^registered ' "$GEN_LOG"; }
wait_for 1800 "eureka-generate registering every instance and the server listing them" registered
CHURN_START=$(now)
GEN_LINE=$(grep -m 1 '^registered ' "$GEN_LOG")
say "$GEN_LINE"
REG_TOOK=$(sed -n 's/.* instances in \([^,]*\), all listed .*/\1/p' <<<"$GEN_LINE")
LISTED=$(sed -n 's/.* all listed \([^ ]*\) after the start.*/\1/p' <<<"$GEN_LINE")
LISTING_BYTES=$(sed -n 's/.*(\/apps \([0-9]*\) bytes).*/\1/p' <<<"$GEN_LINE")
PER_POLL=$(sed -n 's/.* churning \([0-9]*\) instances every .*/\1/p' <<<"$GEN_LINE")
TOTAL=$(((APPS + 1) * INSTANCES))
row "registry" "$APPS applications x $INSTANCES instances + LOAD-TARGET ($TOTAL instances), leases $LEASE, renewed every 30 s; /apps (JSON) ${LISTING_BYTES:+$(fmt_bytes "$LISTING_BYTES") bytes}"
row "galleon-load eureka-generate: registered / all listed" "${REG_TOOK:-?} / ${LISTED:-?} after the start ($(awk -v n="$TOTAL" -v d="$(dur_s "${REG_TOOK:-?}")" 'BEGIN { if (d + 0 > 0) printf "%.0f", n / d; else printf "?" }') registrations a second, 64 in flight)"
row "churn" "${PER_POLL:-?} instances per $POLL ($CHURN%), each registered again with a new metadata value: one MODIFIED entry of /apps/delta"

# 3. window B1: no poller -----------------------------------------------------------------------------
step "3. window B1: no poller"
# The delta is at its steady size once the churn has run for a whole delta window (60 s).
warm=$(awk -v s="$CHURN_START" -v n="$(now)" 'BEGIN { w = s + 65 - n; printf "%.0f", (w > 0 ? w : 0) }')
if ((warm > 0)); then
	say "waiting $warm s: the churn has to fill Polaris's 60 s delta window first"
	sleep "$warm"
fi
check_alive
measure_window B1 "$((POLLS * POLL_S))"

# 4. galleon-eureka -----------------------------------------------------------------------------------
step "4. start galleon-eureka"
GE_LOG=$LOG_DIR/galleon-eureka.log
for attempt in 1 2 3; do
	GE_XDS=127.0.0.1:$(free_port)
	GE_HTTP=127.0.0.1:$(free_port)
	args=(--eureka-urls "$EUREKA_URL" --eureka-poll-interval "$POLL" --eureka-delta-window 60s
		--listen "$GE_XDS" --http "$GE_HTTP" --log-level debug "${EXTRA_ARGS[@]}")
	say "galleon-eureka ${args[*]}"
	t0=$(now)
	spawn GE_PID "$GE_LOG" "$TMP_DIR" "$BIN_DIR/galleon-eureka" "${args[@]}"
	ready=''
	for ((i = 0; i < 3000; i++)); do
		alive "$GE_PID" || break
		if http_ok "http://$GE_HTTP/readyz"; then
			ready=$(now)
			break
		fi
		sleep 0.1
	done
	[[ -n "$ready" ]] && break
	dead=$GE_PID
	GE_PID=''
	if ((attempt == 3)) || ! grep -q 'address already in use' "$GE_LOG"; then
		fail "galleon-eureka (pid $dead) not ready: $(grep -m 1 'level=ERROR' "$GE_LOG" || tail -n 1 "$GE_LOG")"
	fi
done
[[ "$(cat "/proc/$GE_PID/comm" 2>/dev/null)" == galleon-eureka* ]] ||
	fail "pid $GE_PID is not galleon-eureka (/proc/$GE_PID/comm: $(cat "/proc/$GE_PID/comm" 2>/dev/null))"
READY_S=$(secs "$t0" "$ready")
scrape
FULL_N=$(metric galleon_eureka_requests_total 'kind="full",result="ok"')
FULL_WIRE=$(metric galleon_eureka_response_wire_bytes_total 'kind="full"')
FULL_BODY=$(metric galleon_eureka_response_bytes_total 'kind="full"')
FULL_TIME=$(metric galleon_eureka_fetch_duration_seconds_sum 'kind="full"')
awk -v n="$FULL_N" 'BEGIN { exit !(n >= 1) }' || fail "galleon-eureka is ready but counts no full fetch (galleon_eureka_requests_total{kind=\"full\",result=\"ok\"})"
FULL_WIRE_1=$(awk -v b="$FULL_WIRE" -v n="$FULL_N" 'BEGIN { printf "%.0f", b / n }')
FULL_BODY_1=$(awk -v b="$FULL_BODY" -v n="$FULL_N" 'BEGIN { printf "%.0f", b / n }')
say "ready (/readyz 200) $READY_S s after its start (pid $GE_PID, xDS $GE_XDS, http $GE_HTTP); full fetch: $FULL_WIRE_1 bytes on the wire, $FULL_BODY_1 decoded"
row "galleon-eureka start → /readyz 200 (one full fetch, mapped and served)" "$READY_S s (the full fetch: $(awk -v s="$FULL_TIME" -v n="$FULL_N" 'BEGIN { printf "%.2f", s / n }') s to fetch and decode)"
row "one full fetch (GET /apps), as galleon-eureka received it: wire / decoded" "$(fmt_bytes "$FULL_WIRE_1") / $(fmt_bytes "$FULL_BODY_1") bytes"

# 5. window A: delta polling ---------------------------------------------------------------------
step "5. window A: galleon-eureka polls deltas"
sleep "$((POLL_S + 2))" # past its first delta
check_alive
scrape
d_n0=$(metric galleon_eureka_requests_total 'kind="delta",result="ok"')
d_w0=$(metric galleon_eureka_response_wire_bytes_total 'kind="delta"')
d_b0=$(metric galleon_eureka_response_bytes_total 'kind="delta"')
d_t0=$(metric galleon_eureka_fetch_duration_seconds_sum 'kind="delta"')
f_n0=$(metric galleon_eureka_full_fetches_total)
e_n0=$(metric galleon_eureka_requests_total 'result="')
ok_n0=$(metric galleon_eureka_requests_total 'result="ok"')
measure_window A "$((POLLS * POLL_S))"
check_alive
scrape
D_POLLS=$(awk -v a="$d_n0" -v b="$(metric galleon_eureka_requests_total 'kind="delta",result="ok"')" 'BEGIN { printf "%.0f", b - a }')
((D_POLLS > 0)) || fail "galleon-eureka made no delta request in window A"
D_WIRE_1=$(awk -v a="$d_w0" -v b="$(metric galleon_eureka_response_wire_bytes_total 'kind="delta"')" -v n="$D_POLLS" 'BEGIN { printf "%.0f", (b - a) / n }')
D_BODY_1=$(awk -v a="$d_b0" -v b="$(metric galleon_eureka_response_bytes_total 'kind="delta"')" -v n="$D_POLLS" 'BEGIN { printf "%.0f", (b - a) / n }')
D_TIME_1=$(awk -v a="$d_t0" -v b="$(metric galleon_eureka_fetch_duration_seconds_sum 'kind="delta"')" -v n="$D_POLLS" 'BEGIN { printf "%.1f", 1000 * (b - a) / n }')
A_FULLS=$(awk -v a="$f_n0" -v b="$(metric galleon_eureka_full_fetches_total)" 'BEGIN { printf "%.0f", b - a }')
A_FAILED=$(awk -v a="$e_n0" -v b="$(metric galleon_eureka_requests_total 'result="')" -v c="$ok_n0" -v d="$(metric galleon_eureka_requests_total 'result="ok"')" 'BEGIN { printf "%.0f", (b - a) - (d - c) }')
A_RSS=$(proc_kb "$GE_PID" VmRSS) || fail "cannot read /proc/$GE_PID/status"
A_HWM=$(proc_kb "$GE_PID" VmHWM) || fail "cannot read /proc/$GE_PID/status"
say "$D_POLLS delta polls: $D_WIRE_1 bytes on the wire, $D_BODY_1 decoded, ${D_TIME_1} ms each; $A_FULLS full fetches, $A_FAILED failed requests; galleon-eureka VmRSS $(mib "$A_RSS"), VmHWM $(mib "$A_HWM")"
MAPPLIED=$(grep -c 'msg="applied a delta"' "$GE_LOG" || true)
MISMATCH=$(grep -c 'apps__hashcode differs' "$GE_LOG" || true)

# 6. timed changes -------------------------------------------------------------------------------
step "6. galleon-load run --eureka-url: $CHANGES changes"
RUN_OUT_FILE=$LOG_DIR/run.out
run_args=(run --addr "$GE_XDS" --eureka-url "$EUREKA_URL" --sinks "$SINKS" --protocol "$PROTOCOL"
	--changes "$CHANGES" --interval 1ms --interval-jitter "$POLL" --metrics "http://$GE_HTTP/metrics" --timeout 2m)
say "galleon-load ${run_args[*]}"
gen_mark=$(wc -l <"$GEN_LOG")
"$BIN_DIR/galleon-load" "${run_args[@]}" >"$RUN_OUT_FILE" 2>&1 ||
	fail "galleon-load run: $(grep -m 1 '^galleon-load:' "$RUN_OUT_FILE" || tail -n 1 "$RUN_OUT_FILE")"
sed 's/^/    /' "$RUN_OUT_FILE"
read -r RUN_CHURN RUN_BEHIND RUN_LATE < <(gen_window "$gen_mark")
RUN_OUT=$(cat "$RUN_OUT_FILE")
p50=$(sed -n 's/^registry change -> every sink.* p50 \([^ ]*\) .*/\1/p' <<<"$RUN_OUT")
p99=$(sed -n 's/^registry change -> every sink.* p99 \([^ ]*\) .*/\1/p' <<<"$RUN_OUT")
pmax=$(sed -n 's/^registry change -> every sink.* max \([^ ]*\) .*/\1/p' <<<"$RUN_OUT")
l50=$(sed -n 's/^registry change -> listed by the server.* p50 \([^ ]*\) .*/\1/p' <<<"$RUN_OUT")
l99=$(sed -n 's/^registry change -> listed by the server.* p99 \([^ ]*\) .*/\1/p' <<<"$RUN_OUT")
lmax=$(sed -n 's/^registry change -> listed by the server.* max \([^ ]*\)$/\1/p' <<<"$RUN_OUT")
cbytes=$(sed -n 's/^registry change -> every sink.*(\([0-9]*\) bytes per sink per change)$/\1/p' <<<"$RUN_OUT")
[[ -n "$p50" && -n "$p99" ]] || fail "galleon-load run printed no \"registry change -> every sink ... p50 ... p99\" line"
CHK_RSS=$(proc_kb "$GE_PID" VmRSS) || fail "cannot read /proc/$GE_PID/status"
CHK_HWM=$(proc_kb "$GE_PID" VmHWM) || fail "cannot read /proc/$GE_PID/status"

# 7. windows C and B2 ------------------------------------------------------------------------------
step "7. window C: a full poller (curl GET /apps every $POLL)"
stop "$GE_PID"
GE_PID=''
check_alive
POLLER_LOG=$LOG_DIR/full-poller.log
curl -sS -o /dev/null -D "$LOG_DIR/full-headers.txt" -H 'Accept: application/json' -H 'Accept-Encoding: gzip' "$EUREKA_URL/apps" ||
	fail "curl GET $EUREKA_URL/apps failed"
C_ENCODING=$(awk -F': *' 'tolower($1) == "content-encoding" { sub(/\r$/, "", $2); print $2 }' "$LOG_DIR/full-headers.txt")
# One GET every POLL, started on the interval (a slow answer does not shift the next one).
poller() {
	local next t
	next=${EPOCHREALTIME%.*}
	while :; do
		curl -sS -o /dev/null -w '%{size_download} %{time_total}\n' --max-time 60 \
			-H 'Accept: application/json' -H 'Accept-Encoding: gzip' "$1/apps" || printf 'failed\n'
		next=$((next + $2))
		t=$((next - ${EPOCHREALTIME%.*}))
		((t > 0)) && sleep "$t"
	done
}
export -f poller
# shellcheck disable=SC2016 # $0 and $1 are the child shell's: the URL and the interval
spawn POLLER_PID "$POLLER_LOG" "$TMP_DIR" bash -c 'poller "$0" "$1"' "$EUREKA_URL" "$POLL_S"
measure_window C "$((POLLS * POLL_S))"
stop "$POLLER_PID"
POLLER_PID=''
check_alive
C_POLLS=$(grep -c '^[0-9]' "$POLLER_LOG" || true)
C_FAILED=$(grep -vc '^[0-9]' "$POLLER_LOG" || true)
((C_POLLS > 0)) || fail "the full poller completed no GET /apps (see $POLLER_LOG)"
C_BYTES_1=$(awk '/^[0-9]/ { b += $1; n++ } END { printf "%.0f", b / n }' "$POLLER_LOG")
C_TIME_1=$(awk '/^[0-9]/ { t += $2; n++ } END { printf "%.0f", 1000 * t / n }' "$POLLER_LOG")
say "$C_POLLS full polls ($C_FAILED failed): $C_BYTES_1 bytes each (Content-Encoding: ${C_ENCODING:-none}), ${C_TIME_1} ms each"

step "7. window B2: no poller"
measure_window B2 "$((POLLS * POLL_S))"
check_alive

# Per poll: the window's server CPU over its polls, and that less the rate of B1 and B2 together
# (marginal: what the polls cost).
B_RATE=$(awk -v a="${W_POLARIS[B1]}" -v b="${W_POLARIS[B2]}" -v s="${W_SECS[B1]}" -v t="${W_SECS[B2]}" 'BEGIN { printf "%.4f", (a + b) / (s + t) }')
per_poll() { awk -v c="$1" -v n="$2" 'BEGIN { printf "%.0f", 1000 * c / n }'; }
marginal() { awk -v c="${W_POLARIS[$1]}" -v s="${W_SECS[$1]}" -v r="$B_RATE" -v n="$2" 'BEGIN { printf "%.0f", 1000 * (c - r * s) / n }'; }
rate() { awk -v c="$1" -v s="$2" 'BEGIN { printf "%.0f", 100 * c / s }'; }
# window_row W WHAT: the row of window W.
window_row() {
	local w=$1
	row "window $w ($2): polaris-server / eureka-generate CPU" "$(rate "${W_POLARIS[$w]}" "${W_SECS[$w]}")% / $(rate "${W_GEN[$w]}" "${W_SECS[$w]}")% of a CPU over ${W_SECS[$w]} s; churn made ${W_CHURN[$w]} changes per $POLL (at most ${W_BEHIND[$w]} behind), renewals at worst ${W_LATE[$w]} s late; machine ${W_BUSY[$w]}% busy, load ${W_LOAD[$w]}"
}
row "bytes per delta poll (window A, $D_POLLS polls; wire / decoded)" "$(fmt_bytes "$D_WIRE_1") / $(fmt_bytes "$D_BODY_1") bytes: $(awk -v d="$D_WIRE_1" -v f="$FULL_WIRE_1" 'BEGIN { printf "%.3f", d / f }') of a full fetch's wire bytes (target ≤ 0.1)"
row "bytes per full poll (curl, window C)" "$(fmt_bytes "$C_BYTES_1") bytes (Content-Encoding: ${C_ENCODING:-none})"
row "fetch time per poll: delta (galleon-eureka, decoded) / full (curl, not decoded)" "$D_TIME_1 ms / $C_TIME_1 ms"
row "full fetches and failed requests during window A" "$A_FULLS full ($MISMATCH hashcode mismatches logged since the start), $A_FAILED failed; $MAPPLIED \"applied a delta\" lines since the start"
row "change → every $PROTOCOL sink ($SINKS sinks, $CHANGES changes, poll $POLL; target ≤ $POLL + 50 ms)" "p50 $p50, p99 $p99, max ${pmax:-?} (${cbytes:-?} B per sink per change)"
row "change → listed by polaris-server (GET /apps/LOAD-TARGET every 50 ms)" "p50 ${l50:-?}, p99 ${l99:-?}, max ${lmax:-?}"
row "during the changes: churn, renewals" "${RUN_CHURN:-?} changes per $POLL (at most ${RUN_BEHIND:-?} behind), renewals at worst ${RUN_LATE:-?} s late"
window_row B1 "no poller"
window_row A "galleon-eureka polling deltas"
window_row C "full poller, curl"
window_row B2 "no poller"
row "polaris-server CPU per poll: delta (window A) / full (window C)" "$(per_poll "${W_POLARIS[A]}" "$D_POLLS") / $(per_poll "${W_POLARIS[C]}" "$C_POLLS") ms; less the no-poller rate (B1 and B2, $(awk -v r="$B_RATE" 'BEGIN { printf "%.0f", 100 * r }')% of a CPU): $(marginal A "$D_POLLS") / $(marginal C "$C_POLLS") ms"
row "galleon-eureka CPU per delta poll (window A)" "$(per_poll "${W_ADAPTER[A]}" "$D_POLLS") ms (${W_ADAPTER[A]} s over ${W_SECS[A]} s)"
row "galleon-eureka memory after window A (VmRSS / VmHWM)" "$(mib "$A_RSS") / $(mib "$A_HWM")"
row "galleon-eureka memory after the timed changes, $SINKS sinks connected (VmRSS / VmHWM)" "$(mib "$CHK_RSS") / $(mib "$CHK_HWM")"
GEN_STOP=$(grep 'renewals (' "$GEN_LOG" | tail -n 1 || true)
[[ -z "$GEN_STOP" ]] || row "eureka-generate's last report" "${GEN_STOP#eureka-generate: }"

LOAD_END=$(loadavg)
WALL=$(secs "$SCRIPT_START" "$(now)")
printf '\n== results: galleon-eureka, %s applications x %s instances, %s%% churn per %s poll\n\n' "$APPS" "$INSTANCES" "$CHURN" "$POLL"
printf '| measure | value |\n|---|---|\n'
printf '| commit | %s |\n' "$COMMIT"
printf '| machine | %s CPUs (nproc), %s, polaris-server %s (standalone, bolt store)%s |\n' "$NPROC" "$GO_VERSION" "${POLARIS_VERSION:-?}" \
	"${GALLEON_ARGS:+, galleon-eureka $GALLEON_ARGS}"
printf '| load average (1, 5, 15 min) at start | %s |\n' "$LOAD_START"
printf '%s\n' "${ROWS[@]}"
printf '| load average (1, 5, 15 min) at end (the 1-min figure counts this run'"'"'s own processes) | %s |\n' "$LOAD_END"
printf '| wall time of this script | %s s |\n' "$WALL"

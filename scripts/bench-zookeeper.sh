#!/usr/bin/env bash
# Measures galleon-zookeeper at scale against a real ZooKeeper 3.8 and prints the results as
# markdown table rows (| measure | value |), ready to paste into docs/benchmarks.md. It mirrors the
# galleon-file end-to-end measures there (start -> ready, change -> every sink for Delta and SotW,
# bytes per sink, resident and peak memory) and adds ZooKeeper's own: the adapter's listing, the
# server's watch count, requests per change, and a session expiry with its relisting.
#
#   scripts/bench-zookeeper.sh                      10,000 services x 10 instances, Dubbo layout
#   SERVICES=1000 scripts/bench-zookeeper.sh        the same at 1,000 services
#   scripts/bench-zookeeper.sh --services 1000 --instances 10 --layout curator --sinks 10 --changes 100
#
# Settings (a flag wins over the environment variable):
#   SERVICES  (--services)   services (Dubbo interfaces, Curator services), default 10000
#   INSTANCES (--instances)  instances (providers) per service, 1-250, default 10
#   LAYOUT    (--layout)     dubbo or curator (the adapter's --zk-layout), default dubbo
#   SINKS     (--sinks)      sinks of each galleon-load run, default 10
#   CHANGES   (--changes)    changes of each galleon-load run, default 100
#   INTERVAL  (--interval)   pause after each change reached every sink, default 20ms (as in
#                            docs/benchmarks.md)
#   GALLEON_ARGS             extra flags for galleon-zookeeper, e.g. '--debounce-quiet 1ms'
#
# Steps, one process at a time (the figures mean something only on a quiet machine: the load
# average is printed at the start and the end):
#   1. ZooKeeper 3.8 standalone (scripts/zookeeper.sh classpath / java) on a free loopback port
#      in a temporary directory: java -Xmx1g, tickTime=500 (sessions of 1-10 s), no admin server,
#      four-letter words ruok, srvr, mntr, cons, wchs;
#   2. galleon-load zk-generate writes the registry;
#   3. galleon-zookeeper starts (--log-level debug, --zk-session-timeout 4s): start -> /readyz 200,
#      and its own listing time (its debug line `read ZooKeeper reads=N took=D`);
#   4. its VmRSS and VmHWM (/proc/<pid>/status) and ZooKeeper's zk_watch_count (mntr);
#   5. galleon-load run, --protocol delta then sotw, against it (raw output printed);
#   6. its session expires: SIGSTOP, one provider moved with ZooKeeper's CLI meanwhile, wait until
#      ZooKeeper's cons no longer lists the session (20 s at most), SIGCONT; resume -> the
#      relisting's `read ZooKeeper` line;
#   7. VmHWM at the end.
# Everything started is stopped on exit, failure or Ctrl-C; the temporary directory is removed
# (its logs are kept when something failed, and the failure line says where; not on Ctrl-C).
#
# Needs: go, a Java runtime and ZooKeeper 3.8 (scripts/zookeeper.sh installs the Debian package
# when missing), curl, awk, sed, GNU date; Linux (/proc).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/bench-lib.sh
source "$SCRIPT_DIR/bench-lib.sh"
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
export GOWORK=off
export LC_ALL=C # a decimal point in EPOCHREALTIME and awk; byte-wise sed

PROG=bench-zookeeper

usage() {
	sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

SERVICES=${SERVICES:-10000}
INSTANCES=${INSTANCES:-10}
LAYOUT=${LAYOUT:-dubbo}
SINKS=${SINKS:-10}
CHANGES=${CHANGES:-100}
INTERVAL=${INTERVAL:-20ms}
while (($# > 0)); do
	case "$1" in
	--services | --instances | --layout | --sinks | --changes | --interval)
		(($# >= 2)) || usage
		name=${1#--}
		printf -v "${name^^}" '%s' "$2"
		shift 2
		;;
	--services=* | --instances=* | --layout=* | --sinks=* | --changes=* | --interval=*)
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
TMP_DIR='' LOG_DIR='' ZK_PID='' GZK_PID=''

[[ -n "${EPOCHREALTIME:-}" ]] || fail "bash 5 or later is needed (EPOCHREALTIME)"
[[ "$SERVICES" =~ ^[1-9][0-9]*$ ]] || fail "SERVICES=$SERVICES: want a whole number >= 1"
if [[ ! "$INSTANCES" =~ ^[1-9][0-9]*$ ]] || ((INSTANCES > 250)); then fail "INSTANCES=$INSTANCES: want 1 to 250"; fi
[[ "$SINKS" =~ ^[1-9][0-9]*$ ]] || fail "SINKS=$SINKS: want a whole number >= 1"
[[ "$CHANGES" =~ ^[1-9][0-9]*$ ]] || fail "CHANGES=$CHANGES: want a whole number >= 1"
case "$LAYOUT" in
dubbo) ZK_ROOT=/dubbo ;;
curator) ZK_ROOT=/services ;;
*) fail "LAYOUT=$LAYOUT: want dubbo or curator" ;;
esac
read -r -a EXTRA_ARGS <<<"${GALLEON_ARGS:-}"
for tool in go curl awk sed date; do
	have "$tool" || fail "$tool is not on PATH"
done
[[ -r /proc/self/status ]] || fail "no /proc: this script reads memory from /proc/<pid>/status (Linux)"

on_exit() {
	local code=$? interrupted=0
	trap - EXIT INT TERM HUP
	exit_report "$code" && interrupted=1
	stop "$GZK_PID"
	stop "$ZK_PID"
	if [[ -n "$TMP_DIR" ]]; then
		if ((code == 0 || interrupted)); then
			rm -rf "$TMP_DIR"
		else
			# Keep the logs; the registry's data and the binaries are large.
			rm -rf "${TMP_DIR:?}/bin" "${TMP_DIR:?}/zookeeper/data"
		fi
	fi
	exit "$code"
}
trap on_exit EXIT
trap_signals

# wait_for SECONDS WHAT CMD...: poll CMD every 0.05 s until it succeeds; fail after SECONDS or
# when ZooKeeper or galleon-zookeeper exits.
wait_for() {
	local timeout=$1 what=$2 deadline
	shift 2
	deadline=$(awk -v n="$(now)" -v t="$timeout" 'BEGIN { printf "%.3f", n + t }')
	until "$@"; do
		[[ -z "$ZK_PID" ]] || alive "$ZK_PID" || fail "ZooKeeper exited while waiting for: $what"
		[[ -z "$GZK_PID" ]] || alive "$GZK_PID" || fail "galleon-zookeeper exited while waiting for: $what"
		if awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }'; then
			fail "timed out after ${timeout}s waiting for: $what"
		fi
		sleep 0.05
	done
}

USED_PORTS=' '

http_ok() { curl -fsS -o /dev/null --max-time 2 "http://$1$2" 2>/dev/null; }

# ---------------------------------------------------------------------------------------------
# ZooKeeper: four-letter words and its CLI.

# zk_4lw WORD: ZooKeeper's answer to a four-letter word.
zk_4lw() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/${ZK_ADDR##*:}" || exit 1
		printf '%s' "$1" >&3
		local line
		while IFS= read -r -t 5 line <&3 || [[ -n "$line" ]]; do
			printf '%s\n' "$line"
			line=''
		done
	) 2>/dev/null
}

# zk_mntr KEY: one value of mntr.
zk_mntr() { zk_4lw mntr | awk -v k="$1" '$1 == k { print $2; found = 1 } END { if (!found) exit 1 }'; }

# zk_cli < COMMANDS: run ZooKeeper's CLI (zkCli) commands in one JVM; prints their output.
zk_cli() {
	local to=()
	have timeout && to=(timeout 120)
	"${to[@]}" "$JAVA" -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
		-cp "$ZK_CP" org.apache.zookeeper.ZooKeeperMain -server "$ZK_ADDR" 2>>"$LOG_DIR/zookeeper-cli.log"
}

# zk_ls_lines < zk_cli output: the children the last `ls` printed ("[a, b]"), one a line.
zk_ls_lines() { awk '/^\[.*\]$/ { last = $0 } END { gsub(/^\[|\]$/, "", last); n = split(last, c, ", "); for (i = 1; i <= n; i++) print c[i] }' | sort; }

# ---------------------------------------------------------------------------------------------
# galleon-zookeeper's log (slog text: time=<RFC 3339, ms> level=... msg="..." key=value ...).

# log_epoch LINE: the line's time= as seconds since the epoch.
log_epoch() {
	local ts
	ts=$(sed -n 's/^time=\([^ ]*\).*/\1/p' <<<"$1")
	[[ -n "$ts" ]] && date -d "$ts" +%s.%N
}
# log_field LINE KEY: the value of key=value in LINE.
log_field() { sed -n "s/.* $2=\\([^ ]*\\).*/\\1/p" <<<"$1" | head -n 1; }

# ---------------------------------------------------------------------------------------------
# Results.

ROWS=()

# ---------------------------------------------------------------------------------------------

SCRIPT_START=$(now)
LOAD_START=$(loadavg)
NPROC=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)
COMMIT=$(commit_of "$REPO_DIR")
say "$PROG: $SERVICES services x $INSTANCES instances ($LAYOUT layout), $SINKS sinks, $CHANGES changes (interval $INTERVAL)${GALLEON_ARGS:+, galleon-zookeeper $GALLEON_ARGS}"
say "commit $COMMIT, $NPROC CPUs, load average $LOAD_START, $(date -u '+%Y-%m-%d %H:%M UTC')"

work_dirs bench-zk
ZK_DIR=$TMP_DIR/zookeeper
mkdir -p "$ZK_DIR/data"
ZK_LOG=$LOG_DIR/zookeeper.log
GZK_LOG=$LOG_DIR/galleon-zookeeper.log

step "build galleon-zookeeper and galleon-load"
t0=$(now)
(cd "$REPO_DIR" && go build -o "$BIN_DIR/" ./cmd/galleon-zookeeper ./cmd/galleon-load) >"$LOG_DIR/build.log" 2>&1 ||
	fail "go build ./cmd/galleon-zookeeper ./cmd/galleon-load (see $LOG_DIR/build.log)"
GO_VERSION=$(go env GOVERSION 2>/dev/null || echo go)
say "built in $(secs "$t0" "$(now)") s with $GO_VERSION"

# 1. ZooKeeper ----------------------------------------------------------------------------------
step "1. ZooKeeper 3.8 standalone"
ZK_CP=$("$SCRIPT_DIR/zookeeper.sh" classpath 2>>"$LOG_DIR/zookeeper-sh.log" | tail -n 1) ||
	fail "scripts/zookeeper.sh classpath (see $LOG_DIR/zookeeper-sh.log)"
[[ -n "$ZK_CP" ]] || fail "scripts/zookeeper.sh classpath printed no classpath"
JAVA=$("$SCRIPT_DIR/zookeeper.sh" java 2>>"$LOG_DIR/zookeeper-sh.log") || fail "scripts/zookeeper.sh java found no java"
t0=$(now)
# scripts/zookeeper.sh start: tickTime 500 ms (sessions of 1-10 s, so the adapter's 4 s is
# granted as asked), no admin server, the four-letter words used here; address and pid once it
# serves. A 1 GB heap: the registry is 130,000 znodes.
zk_started=$("$SCRIPT_DIR/zookeeper.sh" start "$ZK_DIR" "$ZK_LOG" 1g 2>>"$LOG_DIR/zookeeper-sh.log") ||
	fail "ZooKeeper did not start (see $LOG_DIR/zookeeper-sh.log and $ZK_LOG)"
read -r ZK_ADDR ZK_PID <<<"$zk_started"
ZK_VERSION=$(zk_4lw srvr | sed -n 's/^Zookeeper version: \([^-,]*\).*/\1/p')
JAVA_VERSION=$("$JAVA" -version 2>&1 | head -n 1 | sed 's/^[^"]*"\([^"]*\)".*/\1/')
say "ZooKeeper $ZK_VERSION (pid $ZK_PID, Java $JAVA_VERSION) serves on $ZK_ADDR, ready in $(secs "$t0" "$(now)") s"

# 2. zk-generate -------------------------------------------------------------------------------
step "2. galleon-load zk-generate"
t0=$(now)
"$BIN_DIR/galleon-load" zk-generate --zk-servers "$ZK_ADDR" --layout "$LAYOUT" \
	--services "$SERVICES" --instances "$INSTANCES" >"$LOG_DIR/zk-generate.out" 2>"$LOG_DIR/zk-generate.err" ||
	fail "galleon-load zk-generate: $(tail -n 1 "$LOG_DIR/zk-generate.err")"
GEN_WALL=$(secs "$t0" "$(now)")
cat "$LOG_DIR/zk-generate.out"
GEN_OUT=$(cat "$LOG_DIR/zk-generate.out")
GEN_CREATED=$(sed -n 's/.*: \([0-9]*\) znodes created.*/\1/p' <<<"$GEN_OUT")
GEN_TOOK=$(sed -n 's/.* there already, in \([^ ]*\)$/\1/p' <<<"$GEN_OUT")
ZK_ZNODES=$(zk_mntr zk_znode_count || echo '?')
ZK_DATA=$(zk_mntr zk_approximate_data_size || echo '?')
row "registry" "$SERVICES services x $INSTANCES instances + the load target, $LAYOUT layout: ${GEN_CREATED:-?} znodes written (ZooKeeper: zk_znode_count $ZK_ZNODES, zk_approximate_data_size $ZK_DATA B)"
row "galleon-load zk-generate (8 Multi transactions in flight)" "$GEN_WALL s wall (its own: ${GEN_TOOK:-?})"

# 3. galleon-zookeeper --------------------------------------------------------------------------
step "3. start galleon-zookeeper"
for attempt in 1 2 3; do
	GZK_XDS=127.0.0.1:$(free_port)
	GZK_HTTP=127.0.0.1:$(free_port)
	args=(--zk-servers "$ZK_ADDR" --zk-layout "$LAYOUT" --listen "$GZK_XDS" --http "$GZK_HTTP"
		--zk-session-timeout 4s --log-level debug "${EXTRA_ARGS[@]}")
	say "galleon-zookeeper ${args[*]}"
	t0=$(now)
	spawn GZK_PID "$GZK_LOG" . "$BIN_DIR/galleon-zookeeper" "${args[@]}"
	ready=''
	deadline=$(awk -v n="$t0" 'BEGIN { printf "%.3f", n + 600 }')
	while alive "$GZK_PID"; do
		if http_ok "$GZK_HTTP" /readyz; then
			ready=$(now)
			break
		fi
		awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }' && fail "galleon-zookeeper not ready (/readyz 200) within 600 s"
		sleep 0.05
	done
	[[ -n "$ready" ]] && break
	dead=$GZK_PID
	GZK_PID=''
	if ((attempt == 3)) || ! grep -q 'address already in use' "$GZK_LOG"; then
		fail "galleon-zookeeper (pid $dead) exited before it was ready: $(grep -m 1 'level=ERROR' "$GZK_LOG" || tail -n 1 "$GZK_LOG")"
	fi
done
[[ "$(cat "/proc/$GZK_PID/comm" 2>/dev/null)" == galleon-zookeep* ]] ||
	fail "pid $GZK_PID is not galleon-zookeeper (/proc/$GZK_PID/comm: $(cat "/proc/$GZK_PID/comm" 2>/dev/null))"
READY_S=$(secs "$t0" "$ready")
say "ready (/readyz 200) $READY_S s after its start (pid $GZK_PID, xDS $GZK_XDS, http $GZK_HTTP)"
# The listing: the rounds of reads logged before ready (a round of one read is not logged).
# The largest is the one that reads every service.
mapfile -t READ_LINES < <(grep 'msg="read ZooKeeper"' "$GZK_LOG" || true)
((${#READ_LINES[@]} > 0)) || fail "galleon-zookeeper logged no \"read ZooKeeper ... reads=N took=D\" debug line by the time it was ready"
big='' big_reads=0 all_reads=0
for l in "${READ_LINES[@]}"; do
	r=$(log_field "$l" reads)
	all_reads=$((all_reads + r))
	if ((r > big_reads)); then big_reads=$r big=$l; fi
done
LIST_TOOK=$(log_field "$big" took)
LIST_SERVICES=$(log_field "$big" services)
say "listing: ${#READ_LINES[@]} logged round(s), the largest: reads=$big_reads took=$LIST_TOOK services=$LIST_SERVICES"
row "start → /readyz 200" "$READY_S s"
row "the adapter's listing (largest \`read ZooKeeper\` round)" "$big_reads reads in $(dur_s "$LIST_TOOK") s (took=$LIST_TOOK; ${#READ_LINES[@]} logged round(s) before ready, $all_reads reads, besides the root's read, a round of one, not logged)"
SESSION=$(sed -n 's/.*msg="ZooKeeper session established".* session=\(0x[0-9a-f]*\).*/\1/p' "$GZK_LOG" | tail -n 1)
[[ -n "$SESSION" ]] || fail "galleon-zookeeper logged no \"ZooKeeper session established ... session=0x...\""

# 4. memory and watches after sync --------------------------------------------------------------
step "4. memory and watches after sync"
RSS_SYNC=$(proc_kb "$GZK_PID" VmRSS) || fail "cannot read /proc/$GZK_PID/status"
HWM_SYNC=$(proc_kb "$GZK_PID" VmHWM) || fail "cannot read /proc/$GZK_PID/status"
WATCHES_SYNC=$(zk_mntr zk_watch_count) || fail "ZooKeeper's mntr has no zk_watch_count"
say "VmRSS $(mib "$RSS_SYNC"), VmHWM $(mib "$HWM_SYNC"); ZooKeeper zk_watch_count $WATCHES_SYNC"
row "resident memory once ready (VmRSS / VmHWM)" "$(mib "$RSS_SYNC") / $(mib "$HWM_SYNC")"
row "ZooKeeper watches once ready (mntr zk_watch_count)" "$WATCHES_SYNC"

# 5. galleon-load run ---------------------------------------------------------------------------
# run_load PROTOCOL: one galleon-load run; its raw output is printed and kept in RUN_OUT.
run_load() {
	local proto=$1 out=$LOG_DIR/run-$1.out
	say "galleon-load run --addr $GZK_XDS --zk-servers $ZK_ADDR --zk-layout $LAYOUT --sinks $SINKS --protocol $proto --changes $CHANGES --interval $INTERVAL --metrics http://$GZK_HTTP/metrics"
	"$BIN_DIR/galleon-load" run --addr "$GZK_XDS" --zk-servers "$ZK_ADDR" --zk-layout "$LAYOUT" \
		--sinks "$SINKS" --protocol "$proto" --changes "$CHANGES" --interval "$INTERVAL" \
		--metrics "http://$GZK_HTTP/metrics" >"$out" 2>&1 ||
		fail "galleon-load run --protocol $proto: $(grep -m 1 '^galleon-load:' "$out" || tail -n 1 "$out")"
	sed 's/^/    /' "$out"
	RUN_OUT=$(cat "$out")
}
# report_load LABEL: the rows of the run in RUN_OUT.
report_load() {
	local label=$1 sync p50 p99 max bytes updates reqs
	sync=$(sed -n 's/^initial sync of all sinks: \([^ ]*\) (\([0-9]*\) bytes per sink)$/\1 (\2 B per sink)/p' <<<"$RUN_OUT")
	p50=$(sed -n 's/^registry change -> every sink.* p50 \([^ ]*\) .*/\1/p' <<<"$RUN_OUT")
	p99=$(sed -n 's/^registry change -> every sink.* p99 \([^ ]*\) .*/\1/p' <<<"$RUN_OUT")
	max=$(sed -n 's/^registry change -> every sink.* max \([^ ]*\) .*/\1/p' <<<"$RUN_OUT")
	bytes=$(sed -n 's/^registry change -> every sink.*(\([0-9]*\) bytes per sink per change)$/\1/p' <<<"$RUN_OUT")
	updates=$(sed -n 's/^updates per sink: \(.*\)$/\1/p' <<<"$RUN_OUT")
	reqs=$(sed -n 's/^zookeeper requests per change: \(.*\)$/\1/p' <<<"$RUN_OUT")
	[[ -n "$p50" && -n "$p99" ]] || fail "galleon-load run ($label) printed no \"registry change -> every sink ... p50 ... p99\" line"
	row "initial sync, $SINKS $label sinks" "${sync:-?}"
	row "ZooKeeper change → every $label sink ($CHANGES changes)" "p50 $p50, p99 $p99 (max ${max:-?})"
	row "bytes per sink per change, $label" "${bytes:-?} B"
	row "updates per sink, $label" "${updates:-?}"
	row "ZooKeeper requests per change, $label" "${reqs:-?}"
}

step "5. galleon-load run, Delta"
run_load delta
report_load Delta
step "5. galleon-load run, SotW"
run_load sotw
report_load SotW
RSS_RUNS=$(proc_kb "$GZK_PID" VmRSS) || fail "cannot read /proc/$GZK_PID/status"
HWM_RUNS=$(proc_kb "$GZK_PID" VmHWM) || fail "cannot read /proc/$GZK_PID/status"
row "resident memory after both runs (VmRSS / VmHWM)" "$(mib "$RSS_RUNS") / $(mib "$HWM_RUNS")"

# 6. session expiry -------------------------------------------------------------------------------
step "6. session expiry"
conn=$(zk_4lw cons | grep -F "sid=$SESSION," || true)
[[ -n "$conn" ]] || fail "ZooKeeper's cons does not list galleon-zookeeper's session $SESSION"
say "galleon-zookeeper's session $SESSION: ${conn#"${conn%%[![:space:]]*}"}"
# The provider (instance) to move: the first of the first generated service.
if [[ $LAYOUT == dubbo ]]; then
	SVC_DIR=$ZK_ROOT/org.galleon.load.Service00000/providers
else
	SVC_DIR=$ZK_ROOT/svc-00000
fi
OLD_NODE=$(printf 'ls %s\n' "$SVC_DIR" | zk_cli | zk_ls_lines | head -n 1) ||
	fail "ZooKeeper's CLI failed (see $LOG_DIR/zookeeper-cli.log)"
[[ -n "$OLD_NODE" ]] || fail "ZooKeeper lists nothing under $SVC_DIR (see $LOG_DIR/zookeeper-cli.log)"
NEW_ADDR=10.252.0.1
if [[ $LAYOUT == dubbo ]]; then
	# dubbo%3A%2F%2F<ip>%3A<port>...: the same provider URL at another address; no data (the
	# adapter reads the name only).
	[[ "$OLD_NODE" =~ ^dubbo%3A%2F%2F[0-9.]+(%3A.*)$ ]] || fail "cannot find the address in provider node $OLD_NODE"
	NEW_NODE="dubbo%3A%2F%2F$NEW_ADDR${BASH_REMATCH[1]}"
	MOVE_CMDS=$(printf 'delete %s/%s\ncreate %s/%s\nls %s\n' "$SVC_DIR" "$OLD_NODE" "$SVC_DIR" "$NEW_NODE" "$SVC_DIR")
else
	# Curator: the instance's JSON (no spaces: zkCli splits on them) at another address, under
	# another id.
	data=$(printf 'get %s/%s\n' "$SVC_DIR" "$OLD_NODE" | zk_cli | grep -m 1 '^{') ||
		fail "cannot read instance $SVC_DIR/$OLD_NODE with ZooKeeper's CLI"
	[[ "$data" != *[[:space:]\']* ]] || fail "instance $SVC_DIR/$OLD_NODE holds spaces or quotes: cannot give it to zkCli"
	NEW_NODE=bench-moved-$OLD_NODE
	data=$(sed "s/\"address\":\"[^\"]*\"/\"address\":\"$NEW_ADDR\"/; s/\"id\":\"$OLD_NODE\"/\"id\":\"$NEW_NODE\"/" <<<"$data")
	MOVE_CMDS=$(printf "delete %s/%s\ncreate %s/%s '%s'\nls %s\n" "$SVC_DIR" "$OLD_NODE" "$SVC_DIR" "$NEW_NODE" "$data" "$SVC_DIR")
fi
# The served snapshot's sequence number: it moves on when the moved instance is served.
status_seq() { curl -fsS --max-time 2 "http://$GZK_HTTP/debug/status" 2>/dev/null | sed -n 's/^ *"seq": *\([0-9]*\).*/\1/p'; }
SEQ0=$(status_seq)
[[ -n "$SEQ0" ]] || fail "galleon-zookeeper's /debug/status has no \"seq\""
RELISTS0=$(grep -c 'msg="ZooKeeper session expired: relisting every service on the new session"' "$GZK_LOG" || true)
say "kill -STOP $GZK_PID"
kill -STOP "$GZK_PID" || fail "cannot stop galleon-zookeeper (pid $GZK_PID)"
T_STOP=$(now)
say "meanwhile: delete $SVC_DIR/$OLD_NODE, create $SVC_DIR/$NEW_NODE"
listed=$(zk_cli <<<"$MOVE_CMDS" | zk_ls_lines) || fail "ZooKeeper's CLI failed (see $LOG_DIR/zookeeper-cli.log)"
if ! grep -qxF "$NEW_NODE" <<<"$listed" || grep -qxF "$OLD_NODE" <<<"$listed"; then
	fail "moving the instance with ZooKeeper's CLI failed: $SVC_DIR lists '$(tr '\n' ' ' <<<"$listed")' (see $LOG_DIR/zookeeper-cli.log)"
fi
say "moved in $(secs "$T_STOP" "$(now)") s after the stop (one JVM)"
T_GONE=''
deadline=$(awk -v n="$T_STOP" 'BEGIN { printf "%.3f", n + 20 }')
while :; do
	cons=$(zk_4lw cons || true)
	if [[ -n "$cons" && "$cons" != *"sid=$SESSION,"* ]]; then
		T_GONE=$(now)
		break
	fi
	awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }' && break
	sleep 0.1
done
[[ -n "$T_GONE" ]] || fail "ZooKeeper still lists session $SESSION 20 s after galleon-zookeeper was stopped (cons)"
EXPIRED_S=$(secs "$T_STOP" "$T_GONE")
say "ZooKeeper expired session $SESSION $EXPIRED_S s after the stop (cons no longer lists it)"
say "kill -CONT $GZK_PID"
kill -CONT "$GZK_PID" || fail "cannot resume galleon-zookeeper (pid $GZK_PID)"
T_CONT=$(now)
# The relisting: the first "read ZooKeeper" line after a new "relisting every service" line.
relist_read() {
	RELIST_LINE='' RELIST_READ=''
	local l seen=0
	while IFS= read -r l; do
		if [[ $l == *'msg="ZooKeeper session expired: relisting every service on the new session"'* ]]; then
			seen=$((seen + 1))
			((seen > RELISTS0)) && RELIST_LINE=$l
		elif [[ -n "$RELIST_LINE" && $l == *'msg="read ZooKeeper"'* ]]; then
			RELIST_READ=$l
			return 0
		fi
	done <"$GZK_LOG"
	return 1
}
wait_for 120 "galleon-zookeeper's relisting after the expiry (\"relisting every service on the new session\", then \"read ZooKeeper ... took=\")" relist_read
T_SEEN=$(now)
NEW_SESSION=$(log_field "$RELIST_LINE" new_session)
RELIST_READS=$(log_field "$RELIST_READ" reads)
RELIST_TOOK=$(log_field "$RELIST_READ" took)
# Resume -> the lines, by their own timestamps (ms); else when this script saw them.
if t=$(log_epoch "$RELIST_READ"); then RELIST_DONE_S=$(secs "$T_CONT" "$t"); else RELIST_DONE_S="<= $(secs "$T_CONT" "$T_SEEN")"; fi
if t=$(log_epoch "$RELIST_LINE"); then NEW_SESSION_S=$(secs "$T_CONT" "$t"); else NEW_SESSION_S='?'; fi
say "new session $NEW_SESSION $NEW_SESSION_S s after the resume; relisting read: reads=$RELIST_READS took=$RELIST_TOOK, logged $RELIST_DONE_S s after the resume"
seq_moved() { local s; s=$(status_seq) && [[ -n "$s" ]] && ((s > SEQ0)); }
wait_for 60 "galleon-zookeeper serving the moved instance (/debug/status seq past $SEQ0)" seq_moved
SERVED_S=$(secs "$T_CONT" "$(now)")
say "the moved instance served (snapshot seq $SEQ0 -> $(status_seq)) <= $SERVED_S s after the resume (/debug/status polled)"
sleep 1 # the relisting's answers applied and watches set
WATCHES_RELIST=$(zk_mntr zk_watch_count || echo '?')
METRICS=$(curl -fsS --max-time 5 "http://$GZK_HTTP/metrics" 2>/dev/null) || fail "galleon-zookeeper's /metrics does not answer after the resume"
RELISTS=$(awk '$1 == "galleon_zookeeper_relists_total{reason=\"session_expired\"}" { print $2 }' <<<"$METRICS")
[[ "${RELISTS:-0}" != 0 ]] || fail "galleon_zookeeper_relists_total{reason=\"session_expired\"} is not counted after the expiry"
row "session expiry: SIGSTOP → ZooKeeper drops the session (4 s timeout; cons polled)" "$EXPIRED_S s"
row "session expiry: SIGCONT → new session logged" "$NEW_SESSION_S s"
row "session expiry: SIGCONT → relisting read done (its \`read ZooKeeper\` line)" "$RELIST_DONE_S s"
row "session expiry: SIGCONT → the moved instance served (/debug/status seq polled)" "<= $SERVED_S s"
row "the relisting on the new session (one instance moved meanwhile)" "$RELIST_READS reads in $(dur_s "$RELIST_TOOK") s (took=$RELIST_TOOK)"
row "ZooKeeper watches after the relisting (mntr zk_watch_count)" "$WATCHES_RELIST (before: $WATCHES_SYNC)"

# 7. the end ----------------------------------------------------------------------------------------
step "7. peak memory"
HWM_END=$(proc_kb "$GZK_PID" VmHWM) || fail "cannot read /proc/$GZK_PID/status"
RSS_END=$(proc_kb "$GZK_PID" VmRSS) || fail "cannot read /proc/$GZK_PID/status"
say "VmHWM $(mib "$HWM_END"), VmRSS $(mib "$RSS_END")"
row "peak resident memory (VmHWM, at the end, after the relisting; VmRSS then)" "$(mib "$HWM_END") (VmRSS $(mib "$RSS_END"))"

LOAD_END=$(loadavg)
WALL=$(secs "$SCRIPT_START" "$(now)")
printf '\n== results: galleon-zookeeper, %s services x %s instances (%s), %s sinks, %s changes\n\n' \
	"$SERVICES" "$INSTANCES" "$LAYOUT" "$SINKS" "$CHANGES"
printf '| measure | value |\n|---|---|\n'
printf '| commit | %s |\n' "$COMMIT"
printf '| machine | %s CPUs (nproc), %s, ZooKeeper %s on Java %s (-Xmx1g)%s |\n' "$NPROC" "$GO_VERSION" "$ZK_VERSION" "$JAVA_VERSION" \
	"${GALLEON_ARGS:+, galleon-zookeeper $GALLEON_ARGS}"
printf '| load average (1, 5, 15 min) at start | %s |\n' "$LOAD_START"
printf '%s\n' "${ROWS[@]}"
printf '| load average (1, 5, 15 min) at end (the 1-min figure counts this run'"'"'s own processes) | %s |\n' "$LOAD_END"
printf '| wall time of this script | %s s |\n' "$WALL"

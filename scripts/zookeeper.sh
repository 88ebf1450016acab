#!/usr/bin/env bash
# Finds Apache ZooKeeper (the Debian package) for the ZooKeeper adapter's tests and demo.
#
#   scripts/zookeeper.sh classpath   print the Java classpath that runs ZooKeeper (one line, ':'-separated)
#   scripts/zookeeper.sh java        print the java binary that runs it
#   scripts/zookeeper.sh start DIR LOG [HEAP]
#                                    start a standalone server on a free 127.0.0.1 port, zoo.cfg
#                                    and data in DIR, output in LOG; once it serves, print
#                                    "127.0.0.1:PORT PID" (the caller stops PID)
#
# Installs what it needs itself, only when it is missing:
#   - ZooKeeper 3.8: `apt-get install -y --no-install-recommends zookeeper` (Debian bookworm: 3.8.0,
#     about 10 s) when /usr/share/java/zookeeper.jar is missing; needs root (or sudo). The package
#     pulls in a JRE (default-jre) and every jar zookeeper.jar's manifest names.
# The classpath is zookeeper.jar plus the dependency jars of the Debian layout (/usr/share/java), plus
# slf4j-simple.jar when present so that the server logs (to stderr). Run a server with:
#   java -cp "$(scripts/zookeeper.sh classpath)" org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg
# GALLEON_ZOOKEEPER_CLASSPATH=<classpath> skips the look-up (a ZooKeeper unpacked elsewhere).
set -euo pipefail

# shellcheck source=scripts/apt.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/apt.sh"

JAVA_DIR=${GALLEON_ZOOKEEPER_JAVA_DIR:-/usr/share/java}
ZK_JAR="$JAVA_DIR/zookeeper.jar"
# The jars zookeeper.jar's manifest (Class-Path) names in Debian's libzookeeper-java 3.8, in that order.
DEPS=(zookeeper-jute commons-cli commons-io findbugs-annotations jackson-annotations jackson-core
	jackson-databind jetty9-client jetty9-http jetty9-io jetty9-security jetty9-server jetty9-servlet
	jetty9-util jline metrics-core netty-buffer netty-common netty-handler netty-transport
	netty-transport-native-epoll netty-resolver netty-codec netty-transport-native-unix-common
	slf4j-api snappy-java)

usage() {
	sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

log() { echo "zookeeper.sh: $*" >&2; }

ensure_zookeeper() {
	if [[ -f "$ZK_JAR" ]]; then
		return 0
	fi
	galleon_apt_install zookeeper.sh "ZooKeeper ($ZK_JAR)" \
		"install the Debian package zookeeper by hand, or set GALLEON_ZOOKEEPER_CLASSPATH to a ZooKeeper 3.8 classpath" \
		zookeeper || exit 1
	[[ -f "$ZK_JAR" ]] || { log "the zookeeper package is installed but $ZK_JAR is not there: set GALLEON_ZOOKEEPER_CLASSPATH to ZooKeeper's jars"; exit 1; }
}

find_java() {
	if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
		printf '%s\n' "$JAVA_HOME/bin/java"
	elif command -v java >/dev/null 2>&1; then
		command -v java
	else
		log "java is not on PATH (nor in \$JAVA_HOME/bin): install a JRE >= 11 (apt-get install default-jre-headless) and run again"
		exit 1
	fi
}

cmd_classpath() {
	if [[ -n "${GALLEON_ZOOKEEPER_CLASSPATH:-}" ]]; then
		printf '%s\n' "$GALLEON_ZOOKEEPER_CLASSPATH"
		return 0
	fi
	ensure_zookeeper
	local cp=$ZK_JAR d
	for d in "${DEPS[@]}" slf4j-simple; do
		if [[ -f "$JAVA_DIR/$d.jar" ]]; then
			cp+=":$JAVA_DIR/$d.jar"
		fi
	done
	printf '%s\n' "$cp"
}

# four_letter PORT WORD: a four-letter-word command's answer (empty if the server does not answer).
four_letter() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf '%s' "$2" >&3
		timeout 5 cat <&3
	) 2>/dev/null || true
}

# free_port: a port nothing listens on now, in 20000-31999.
free_port() {
	local p
	while :; do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			printf '%s\n' "$p"
			return
		fi
	done
}

# cmd_start DIR LOG [HEAP]: the server make demo and scripts/bench-zookeeper.sh run. tickTime
# 500 ms: ZooKeeper grants session timeouts of 2-20 ticks, so a client may ask for 1-10 s (both
# let a session expire). No admin server; the four-letter words their probes use. Ready means
# ruok answers imok (as soon as the process runs) and srvr reports a mode (it serves). A port
# taken meanwhile is retried on another, up to three times; any other failure stops the process
# and says so in one line.
cmd_start() {
	local dir=${1:?start: give the server directory} log=${2:?start: give the log file} heap=${3:-256m}
	local cp java port attempt deadline
	cp=$(cmd_classpath)
	java=$(find_java)
	mkdir -p "$dir/data"
	ZK_START_PID=''
	trap '[[ -n $ZK_START_PID ]] && kill "$ZK_START_PID" 2>/dev/null' EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	for attempt in 1 2 3; do
		port=$(free_port)
		printf '%s\n' "tickTime=500" "dataDir=$dir/data" "clientPort=$port" "clientPortAddress=127.0.0.1" \
			"admin.enableServer=false" "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,wchs" >"$dir/zoo.cfg"
		# In a session of its own (setsid), so that a Ctrl-C meant for the caller stays the
		# caller's to handle.
		local detach=nohup
		command -v setsid >/dev/null 2>&1 && detach=setsid
		(cd "$dir" && exec "$detach" "$java" "-Xmx$heap" -Dzookeeper.jmx.log4j.disable=true \
			-cp "$cp" org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg" >"$log" 2>&1 </dev/null) &
		ZK_START_PID=$!
		deadline=$((SECONDS + 60))
		while kill -0 "$ZK_START_PID" 2>/dev/null && ((SECONDS < deadline)); do
			if [[ "$(four_letter "$port" ruok)" == imok ]] && four_letter "$port" srvr | grep -q '^Mode: '; then
				printf '127.0.0.1:%s %s\n' "$port" "$ZK_START_PID"
				ZK_START_PID='' # the caller's now
				return 0
			fi
			sleep 0.1
		done
		if kill -0 "$ZK_START_PID" 2>/dev/null; then
			log "ZooKeeper (pid $ZK_START_PID) did not serve on 127.0.0.1:$port within 60 s: see $log"
			exit 1
		fi
		wait "$ZK_START_PID" 2>/dev/null || true
		ZK_START_PID=''
		if ((attempt == 3)) || ! grep -q 'ddress already in use' "$log"; then
			log "ZooKeeper exited at start: see $log"
			exit 1
		fi
	done
}

case "${1:-}" in
classpath) cmd_classpath ;;
java)
	find_java
	;;
start)
	shift
	cmd_start "$@"
	;;
*) usage ;;
esac

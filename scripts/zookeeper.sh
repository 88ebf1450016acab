#!/usr/bin/env bash
# Finds Apache ZooKeeper (the Debian package) for the ZooKeeper adapter's tests and demo.
#
#   scripts/zookeeper.sh classpath   print the Java classpath that runs ZooKeeper (one line, ':'-separated)
#   scripts/zookeeper.sh java        print the java binary that runs it
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
	sed -n '2,5p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
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

case "${1:-}" in
classpath) cmd_classpath ;;
java)
	find_java
	;;
*) usage ;;
esac

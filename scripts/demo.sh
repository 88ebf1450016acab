#!/usr/bin/env bash
# Galleon demo: galleon-file, then galleon-consul, then galleon-zookeeper, then galleon-eureka, feed
# a real istiod, and every registry change shows up in istiod.
#
#   scripts/demo.sh            (or: make demo)
#   DEMO_KEEP=1 scripts/demo.sh   leave galleon-file, the Consul agent, galleon-consul, ZooKeeper,
#                                 galleon-zookeeper, Polaris server B, galleon-eureka, the Eureka
#                                 heartbeats and istiod running afterwards
#
# It builds galleon-file, galleon-consul, galleon-zookeeper, galleon-eureka and galleonctl, builds (once, ~5 min)
# or reuses istiod 1.29.2 via scripts/istiod.sh, copies examples/file to a temporary registry directory, starts
# galleon-file on it and istiod with `configSources: [{address: xds://<galleon-file>}]`, and then
# tells the story: what Galleon serves (galleonctl), what istiod holds (/debug/configz), an
# instance that moves (an EDS-only update: no full push), a new port (one full push), a removed
# service.
# Then the Consul story: it builds (once, ~5-9 min) or reuses Consul 1.22.6 via scripts/consul.sh,
# starts one dev agent on loopback, registers services `web` (2 instances) and `payments` through
# the catalog HTTP API, starts galleon-consul on it and restarts istiod with both galleon-file and
# galleon-consul as configSources: a health check that turns critical and back (EDS-only updates:
# no full push), a deregistered service, galleon-consul's /debug/status and metrics.
# Then the ZooKeeper story: it starts ZooKeeper 3.8 (the Debian package, installed by
# scripts/zookeeper.sh when missing) on loopback, writes three Dubbo 2 providers of one interface
# with ZooKeeper's own CLI, starts galleon-zookeeper (--zk-layout dubbo) and restarts istiod with
# all three adapters as configSources: a provider that leaves (EDS-only), and the adapter's
# ZooKeeper session expiring while providers change (it relists; EDS-only), its log and metrics.
# Then the Eureka story: it builds (once, ~2.5 min) or reuses polaris-server 1.18.1, a Eureka API
# server, via scripts/eureka.sh, starts two of them (A and B, which do not replicate to each other:
# every change is made in both, as a Eureka cluster's peers would copy it), registers application
# ORDERS (3 instances) through the Eureka REST API, keeps renewing them, starts galleon-eureka on
# both (--eureka-urls A,B) and restarts istiod with all four adapters as configSources: an instance
# taken OUT_OF_SERVICE (EDS-only), then server A crashes (kill -9) and an instance registered in B
# alone reaches istiod through B (EDS-only), galleon-eureka's log and metrics (server_up).
# Every step is checked: the demo exits non-zero if anything does not happen as told.
# Processes are stopped on exit, failure or Ctrl-C (unless DEMO_KEEP=1 and all went well).
#
# Needs: go, and bash, awk, sed, patch (for polaris-server's build); Java for ZooKeeper (scripts/zookeeper.sh installs the zookeeper
# package, which pulls in a JRE, when ZooKeeper is missing). Uses curl (else wget, else bash's
# /dev/tcp) for HTTP, and jq (else python3, else a small Go program) to read istiod's JSON.
# DEMO_JSON=jq|python3|go forces one of them.
# shellcheck disable=SC2016 # awk programs and sh -c scripts are single-quoted on purpose
set -Eeuo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
export GOWORK=off
export LC_NUMERIC=C # EPOCHREALTIME and awk: a decimal point, not a comma
# alive, have, say, now, free_port (a free loopback port: another process may still take one
# first; the servers are then restarted on new ports).
# shellcheck source=scripts/proc-lib.sh
source "$SCRIPT_DIR/proc-lib.sh"

# ---------------------------------------------------------------------------------------------
# Output.

if [[ -t 1 && -z "${NO_COLOR:-}" ]]; then
	BOLD=$'\e[1m' DIM=$'\e[2m' GREEN=$'\e[32m' RED=$'\e[31m' CYAN=$'\e[36m' RESET=$'\e[0m'
else
	BOLD='' DIM='' GREEN='' RED='' CYAN='' RESET=''
fi

START=$(now)
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

STEP=''
heading() {
	STEP=$1
	printf '\n%s━━ %s%s\n' "$BOLD$CYAN" "$1" "$RESET"
}
note() { printf '%s%s%s\n' "$DIM" "$*" "$RESET"; }
ok() { printf '  %s✔%s %s\n' "$GREEN" "$RESET" "$*"; }
indent() { sed 's/^/    /'; }
# indent_live: indent, line by line as it comes (sed may buffer when stdout is not a terminal).
indent_live() { local line; while IFS= read -r line; do printf '    %s\n' "$line"; done; }

# ---------------------------------------------------------------------------------------------
# Processes and clean-up.

DEMO_DIR=$(mktemp -d "${TMPDIR:-/tmp}/galleon-demo.XXXXXX")
BIN_DIR=$DEMO_DIR/bin
REG_DIR=$DEMO_DIR/registry
LOG_DIR=$DEMO_DIR/logs
mkdir -p "$BIN_DIR" "$REG_DIR" "$LOG_DIR"

GALLEON_PID='' ISTIOD_PID='' CONSUL_PID='' GCONSUL_PID='' ZK_PID='' GZK_PID=''
POLARIS_A_PID='' POLARIS_B_PID='' GEUREKA_PID='' HEARTBEATS_PID=''
GALLEON_LOG=$LOG_DIR/galleon-file.log
ISTIOD_LOG=$LOG_DIR/istiod.log
CONSUL_LOG=$LOG_DIR/consul.log
GCONSUL_LOG=$LOG_DIR/galleon-consul.log
ZK_LOG=$LOG_DIR/zookeeper.log
ZKCLI_LOG=$LOG_DIR/zookeeper-cli.log
GZK_LOG=$LOG_DIR/galleon-zookeeper.log
POLARIS_A_LOG=$LOG_DIR/polaris-a.log
POLARIS_B_LOG=$LOG_DIR/polaris-b.log
GEUREKA_LOG=$LOG_DIR/galleon-eureka.log
HEARTBEATS_LOG=$LOG_DIR/eureka-heartbeats.log
EUREKA_DIR=$DEMO_DIR/eureka        # a/ and b/: each polaris-server's config, store and own logs
HEARTBEATS=$EUREKA_DIR/heartbeats # "HOST:PORT APP ID" lines: the registrations eureka_heartbeats renews
SUCCESS=0

# stop PID NAME: SIGTERM, then SIGKILL after 10 s.
stop() {
	local pid=$1 i
	[[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
}

tail_log() {
	local name=$1 file=$2
	[[ -s "$file" ]] || return 0
	printf '%s--- last lines of %s (%s) ---%s\n' "$DIM" "$name" "$file" "$RESET" >&2
	# istiod logs its self-signed certificates: leave the PEM blocks out.
	awk '/-----BEGIN /{print "    [PEM block omitted]"; pem=1; next} /-----END /{pem=0; next} !pem' "$file" | tail -n 25 | sed 's/^/    /' >&2
}

on_exit() {
	local code=$?
	trap - EXIT INT TERM HUP PIPE
	if [[ $SUCCESS == 1 && "${DEMO_KEEP:-}" == 1 ]]; then
		keep_running
		exit 0
	fi
	local interrupted=0
	if [[ $SUCCESS != 1 ]]; then
		((code == 0)) && code=1
		if ((code == 129 || code == 130 || code == 141 || code == 143)); then
			interrupted=1
			printf '\n%sinterrupted%s: stopping every process the demo started\n' "$BOLD" "$RESET" >&2
		else
			printf '\n%s✘ demo failed%s during "%s" (exit %d)\n' "$BOLD$RED" "$RESET" "${STEP:-start}" "$code" >&2
			tail_log galleon-file "$GALLEON_LOG"
			tail_log istiod "$ISTIOD_LOG"
			tail_log "consul agent" "$CONSUL_LOG"
			tail_log galleon-consul "$GCONSUL_LOG"
			tail_log zookeeper "$ZK_LOG"
			tail_log "zookeeper CLI" "$ZKCLI_LOG"
			tail_log galleon-zookeeper "$GZK_LOG"
			tail_log "polaris-server A" "$POLARIS_A_LOG"
			tail_log "polaris-server A's own log" "$EUREKA_DIR/a/log/runtime/polaris-default.log"
			tail_log "polaris-server B" "$POLARIS_B_LOG"
			tail_log "polaris-server B's own log" "$EUREKA_DIR/b/log/runtime/polaris-default.log"
			tail_log galleon-eureka "$GEUREKA_LOG"
			tail_log "Eureka heartbeats" "$HEARTBEATS_LOG"
		fi
	fi
	# galleon-zookeeper may have been stopped (SIGSTOP) when the demo failed: let it hear SIGTERM.
	if [[ -n "$GZK_PID" ]]; then kill -CONT "$GZK_PID" 2>/dev/null || true; fi
	stop "$ISTIOD_PID"
	stop "$GEUREKA_PID"
	stop "$HEARTBEATS_PID"
	# polaris-server takes 5-15 s to stop on SIGTERM; its store is thrown away with $DEMO_DIR.
	kill_now "$POLARIS_A_PID"
	kill_now "$POLARIS_B_PID"
	stop "$GZK_PID"
	stop "$GCONSUL_PID"
	stop "$GALLEON_PID"
	stop "$ZK_PID"
	stop "$CONSUL_PID"
	if [[ $SUCCESS == 1 || $interrupted == 1 ]]; then
		rm -rf "$DEMO_DIR"
	else
		printf 'processes stopped; logs kept in %s\n' "$LOG_DIR" >&2
	fi
	exit "$code"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
trap 'exit 141' PIPE

fail() {
	printf '%s✘ %s%s\n' "$RED" "$*" "$RESET" >&2
	exit 1
}

# spawn VAR LOG CMD...: start CMD in the background (in its own session where setsid exists, so
# that a Ctrl-C is handled here and DEMO_KEEP=1 processes outlive the terminal) and store its pid.
spawn() {
	local var=$1 log=$2
	shift 2
	if have setsid; then
		setsid "$@" >"$log" 2>&1 </dev/null &
	else
		nohup "$@" >"$log" 2>&1 </dev/null &
	fi
	printf -v "$var" '%s' "$!"
}

# kill_now PID: SIGKILL, and wait (up to 5 s) until it is gone. Waiting for it as a child also
# keeps bash from reporting it "Killed".
kill_now() {
	local pid=$1 i
	[[ -n "$pid" ]] && kill -KILL "$pid" 2>/dev/null || return 0
	wait "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		alive "$pid" || return 0
		sleep 0.1
	done
}

# wait_for SECONDS WHAT CMD...: poll CMD (every 0.1 s) until it succeeds (return 0); return 1,
# with the reason in WAIT_ERR, after SECONDS or as soon as one of the demo's processes has exited.
WAIT_ERR=''
wait_for() {
	local timeout=$1 what=$2 deadline p
	shift 2
	deadline=$(awk -v n="$(now)" -v t="$timeout" 'BEGIN { printf "%.3f", n + t }')
	until "$@"; do
		for p in "galleon-file:$GALLEON_PID" "istiod:$ISTIOD_PID" "the consul agent:$CONSUL_PID" \
			"galleon-consul:$GCONSUL_PID" "ZooKeeper:$ZK_PID" "galleon-zookeeper:$GZK_PID" \
			"polaris-server A:$POLARIS_A_PID" "polaris-server B:$POLARIS_B_PID" "galleon-eureka:$GEUREKA_PID" \
			"the Eureka heartbeats:$HEARTBEATS_PID"; do
			if [[ -n "${p##*:}" ]] && ! alive "${p##*:}"; then
				WAIT_ERR="${p%:*} exited while waiting for: $what"
				return 1
			fi
		done
		if awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }'; then
			WAIT_ERR="timed out after ${timeout}s waiting for: $what"
			return 1
		fi
		sleep 0.1
	done
}

# wait_until SECONDS WHAT CMD...: wait_for, failing the demo if CMD never succeeds.
wait_until() { wait_for "$@" || fail "$WAIT_ERR"; }

# ---------------------------------------------------------------------------------------------
# HTTP, metrics and istiod's config.

# http_get HOST:PORT PATH: the body of a 200 response.
http_get() {
	local hostport=$1 path=$2
	if have curl; then
		curl -fsS --max-time 5 "http://$hostport$path" 2>/dev/null
	elif have wget; then
		wget -q -T 5 -O - "http://$hostport$path" 2>/dev/null
	else
		(
			exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}" || exit 1
			printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$path" "$hostport" >&3
			IFS= read -r -t 5 status <&3 || exit 1
			[[ $status == *" 200 "* ]] || exit 1
			while IFS= read -r -t 5 line <&3 && [[ $line != $'\r' && -n $line ]]; do :; done
			cat <&3
		) 2>/dev/null
	fi
}

# http_put HOST:PORT PATH BODY: PUT the (ASCII) JSON BODY; the body of a 200 response.
http_put() {
	local hostport=$1 path=$2 body=$3
	if have curl; then
		curl -fsS --max-time 5 -X PUT -H 'Content-Type: application/json' --data-binary "$body" \
			"http://$hostport$path" 2>/dev/null
	elif have wget; then
		wget -q -T 5 -O - --method=PUT --header='Content-Type: application/json' --body-data="$body" \
			"http://$hostport$path" 2>/dev/null
	else
		(
			exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}" || exit 1
			printf 'PUT %s HTTP/1.0\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
				"$path" "$hostport" "${#body}" "$body" >&3 # ASCII bodies: characters = bytes
			IFS= read -r -t 5 status <&3 || exit 1
			[[ $status == *" 200 "* ]] || exit 1
			while IFS= read -r -t 5 line <&3 && [[ $line != $'\r' && -n $line ]]; do :; done
			cat <&3
		) 2>/dev/null
	fi
}

# metric NAME: the value of one istiod metric sample as an integer (0 if not exported yet);
# fails if istiod does not answer.
metric() {
	local body
	body=$(http_get "$ISTIOD_MON" /metrics) || return 1
	awk -v n="$1" '$1 == n { printf "%d\n", $2; found = 1; exit } END { if (!found) print 0 }' <<<"$body"
}

FULL_PUSHES=pilot_pushcontext_init_seconds_count # one per full push (a new PushContext)
PUSHES=pilot_debounce_time_count                 # one per push dispatched, full or EDS-only
EDS_UPDATES='pilot_inbound_updates{type="eds"}'

# JSON_TOOL turns /debug/configz into one line per ServiceEntry:
#   namespace/name|host,host|port/PROTOCOL,...|endpoint count|address,address|port name,...
# ("-" for an empty list).
JSON_TOOL=${DEMO_JSON:-}
if [[ -z "$JSON_TOOL" ]]; then
	if have jq; then JSON_TOOL=jq; elif have python3; then JSON_TOOL=python3; else JSON_TOOL=go; fi
fi
case "$JSON_TOOL" in
jq | python3 | go) ;;
*) fail "DEMO_JSON=$JSON_TOOL: use jq, python3 or go" ;;
esac

serviceentry_rows_go() {
	if [[ ! -x "$BIN_DIR/configz-rows" ]]; then
		mkdir -p "$DEMO_DIR/configz-rows"
		cat >"$DEMO_DIR/configz-rows/main.go" <<'EOF'
// configz-rows prints istiod's /debug/configz ServiceEntries as rows (see scripts/demo.sh).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

func main() {
	var configs []struct {
		Kind     string `json:"kind"`
		Metadata struct{ Name, Namespace string }
		Spec     struct {
			Hosts []string
			Ports []struct {
				Number   uint32
				Protocol string
				Name     string
			}
			Endpoints []struct{ Address string }
		}
	}
	if err := json.NewDecoder(os.Stdin).Decode(&configs); err != nil {
		fmt.Fprintln(os.Stderr, "configz-rows:", err)
		os.Exit(1)
	}
	list := func(s []string) string {
		if len(s) == 0 {
			return "-"
		}
		return strings.Join(s, ",")
	}
	for _, c := range configs {
		if c.Kind != "ServiceEntry" {
			continue
		}
		var ports, names, addrs []string
		for _, p := range c.Spec.Ports {
			ports = append(ports, fmt.Sprintf("%d/%s", p.Number, p.Protocol))
			names = append(names, p.Name)
		}
		for _, e := range c.Spec.Endpoints {
			addrs = append(addrs, e.Address)
		}
		fmt.Printf("%s/%s|%s|%s|%d|%s|%s\n", c.Metadata.Namespace, c.Metadata.Name,
			list(c.Spec.Hosts), list(ports), len(addrs), list(addrs), list(names))
	}
}
EOF
		printf 'module configzrows\n\ngo 1.21\n' >"$DEMO_DIR/configz-rows/go.mod"
		(cd "$DEMO_DIR/configz-rows" && go build -o "$BIN_DIR/configz-rows" .) >&2 || return 1
	fi
	"$BIN_DIR/configz-rows"
}

# serviceentry_rows: the ServiceEntries istiod holds, as rows sorted by name.
serviceentry_rows() {
	local body
	body=$(http_get "$ISTIOD_MON" /debug/configz) || return 1
	case "$JSON_TOOL" in
	jq)
		jq -r '.[] | select(.kind == "ServiceEntry")
			| def list: if length == 0 then "-" else join(",") end;
			[ "\(.metadata.namespace)/\(.metadata.name)",
			  ((.spec.hosts // []) | list),
			  ((.spec.ports // []) | map("\(.number)/\(.protocol)") | list),
			  ((.spec.endpoints // []) | length | tostring),
			  ((.spec.endpoints // []) | map(.address) | list),
			  ((.spec.ports // []) | map(.name // "") | list) ] | join("|")' <<<"$body"
		;;
	python3)
		python3 -c '
import json, sys
for c in json.load(sys.stdin):
    if c.get("kind") != "ServiceEntry":
        continue
    m, s = c.get("metadata") or {}, c.get("spec") or {}
    eps = s.get("endpoints") or []
    lst = lambda xs: ",".join(xs) or "-"
    print("|".join([m.get("namespace", "") + "/" + m.get("name", ""),
                    lst(s.get("hosts") or []),
                    lst(["%s/%s" % (p.get("number"), p.get("protocol", "")) for p in s.get("ports") or []]),
                    str(len(eps)),
                    lst([e.get("address", "") for e in eps]),
                    lst([p.get("name", "") for p in s.get("ports") or []])]))
' <<<"$body"
		;;
	go) serviceentry_rows_go <<<"$body" ;;
	esac | LC_ALL=C sort
}

# row NAME: the row of one ServiceEntry ("" if istiod does not hold it).
row() { serviceentry_rows | awk -F'|' -v n="$1" '$1 == n'; }
field() { awk -F'|' -v i="$1" '{ print $i }'; }

# print_table < rows: the rows as an aligned table.
print_table() {
	awk -F'|' '
		{ for (i = 1; i <= 4; i++) { cell[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } }
		END {
			split("NAMESPACE/NAME HOSTS PORTS ENDPOINTS", h, " ")
			for (i = 1; i <= 4; i++) if (length(h[i]) > w[i]) w[i] = length(h[i])
			fmt = "    %-" w[1] "s  %-" w[2] "s  %-" w[3] "s  %" w[4] "s\n"
			printf fmt, h[1], h[2], h[3], h[4]
			for (r = 1; r <= NR; r++) printf fmt, cell[r, 1], cell[r, 2], cell[r, 3], cell[r, 4]
		}'
}

# ---------------------------------------------------------------------------------------------
# Registry edits (atomic, like an editor or config management: temp file + rename).

# edit_file FILE AWK-PROGRAM [awk args...]
edit_file() {
	local file=$1 prog=$2 tmp
	shift 2
	tmp="$(dirname "$file")/.$(basename "$file").tmp"
	awk "$@" "$prog" "$file" >"$tmp"
	cmp -s "$tmp" "$file" && { rm -f "$tmp"; fail "editing $(basename "$file") changed nothing (examples/file changed?)"; }
	mv -f "$tmp" "$file"
}

# keep_running prints where everything is (DEMO_KEEP=1).
keep_running() {
	cat <<EOF

${BOLD}Still running (DEMO_KEEP=1):${RESET}
  registry          $REG_DIR   edit, add or delete *.yaml files here
  galleon-file      pid $GALLEON_PID  MCP $GALLEON_XDS   http://$GALLEON_HTTP/debug/status   log $GALLEON_LOG
  consul agent      pid $CONSUL_PID  http://$CONSUL_HTTP/v1/catalog/services   log $CONSUL_LOG
  galleon-consul    pid $GCONSUL_PID  MCP $GCONSUL_XDS   http://$GCONSUL_HTTP/debug/status   log $GCONSUL_LOG
  ZooKeeper         pid $ZK_PID  $ZK_ADDR (data in $ZK_DIR)   log $ZK_LOG
  galleon-zookeeper pid $GZK_PID  MCP $GZK_XDS   http://$GZK_HTTP/debug/status   log $GZK_LOG
  polaris-server B  pid $POLARIS_B_PID  http://$EUREKA_B/eureka/apps (A was killed in step T)   log $POLARIS_B_LOG
  Eureka heartbeats pid $HEARTBEATS_PID  renews the instances listed in $HEARTBEATS every 10 s
  galleon-eureka    pid $GEUREKA_PID  MCP $GEUREKA_XDS   http://$GEUREKA_HTTP/debug/status   log $GEUREKA_LOG
  istiod            pid $ISTIOD_PID  http://$ISTIOD_MON/debug/configz   http://$ISTIOD_MON/metrics   log $ISTIOD_LOG

  Follow what galleon-file serves:       $GALLEONCTL watch --addr $GALLEON_XDS --delta
  Get it once:                           $GALLEONCTL get --addr $GALLEON_XDS -o yaml
  Follow what galleon-consul serves:     $GALLEONCTL watch --addr $GCONSUL_XDS --delta
  Use the Consul catalog:                CONSUL_HTTP_ADDR=$CONSUL_HTTP $CONSUL catalog services
                                         curl -X PUT http://$CONSUL_HTTP/v1/catalog/register -d '$(check_json vm-2 10.20.0.2 web-2 critical)'
  Follow what galleon-zookeeper serves:  $GALLEONCTL watch --addr $GZK_XDS --delta
  Use ZooKeeper (zkCli):                 $JAVA -cp "\$($SCRIPT_DIR/zookeeper.sh classpath)" org.apache.zookeeper.ZooKeeperMain -server $ZK_ADDR
                                         (then e.g.: ls $ZK_PROVIDERS)
  Follow what galleon-eureka serves:     $GALLEONCTL watch --addr $GEUREKA_XDS --delta
  Use Eureka (server B):                 curl -H 'Accept: application/json' http://$EUREKA_B/eureka/apps
                                         curl -X PUT 'http://$EUREKA_B/eureka/apps/ORDERS/orders-2/status?value=UP'
  What istiod holds:                     curl -s http://$ISTIOD_MON/debug/configz | jq '.[] | select(.kind == "ServiceEntry") | .metadata.namespace + "/" + .metadata.name'
  Stop everything:                       kill $ISTIOD_PID $GEUREKA_PID $HEARTBEATS_PID $GZK_PID $GCONSUL_PID $GALLEON_PID $ZK_PID $CONSUL_PID; kill -9 $POLARIS_B_PID; rm -rf $DEMO_DIR
EOF
}

# yaml_item [NAME] < galleonctl's -o yaml: the item NAME (default: the first) of the List, as a
# document of its own. awk reads to the end, so that galleonctl never writes to a closed pipe.
yaml_item() {
	awk -v want="${1:-}" '
		function flush() { if (n && !done && (want == "" || name == want)) { printf "%s", buf; done = 1 } buf = ""; name = "" }
		/^items:/ { on = 1; next }
		!on || done { next }
		/^- / { flush(); n++; sub(/^- /, ""); buf = $0 "\n"; next }
		/^  / { sub(/^  /, ""); buf = buf $0 "\n"; if ($0 ~ /^  name: /) { name = $0; sub(/^  name: /, "", name) } next }
		{ flush(); on = 0 }
		END { flush() }'
}

# start_istiod LOG WHAT: start istiod with $MESH (on new ports after a port clash) and wait until
# it has synced with its config sources (WHAT).
start_istiod() {
	local log=$1 what=$2 attempt
	ISTIOD_LOG=$log
	for attempt in 1 2 3; do
		ISTIOD_GRPC=127.0.0.1:$(free_port)
		ISTIOD_HTTP=127.0.0.1:$(free_port)
		ISTIOD_MON=127.0.0.1:$(free_port)
		# As test/istiod runs it: no Kubernetes, no webhooks, config only from the xds:// sources.
		spawn ISTIOD_PID "$ISTIOD_LOG" env -u KUBECONFIG -u KUBERNETES_SERVICE_HOST -u KUBERNETES_SERVICE_PORT \
			sh -c 'cd "$1" && shift && exec "$@"' sh "$DEMO_DIR" \
			"$PILOT" discovery --registries= --meshConfig="$MESH" --networksConfig="$NETWORKS" \
			--grpcAddr="$ISTIOD_GRPC" --httpAddr="$ISTIOD_HTTP" --httpsAddr= --secureGRPCAddr= \
			--monitoringAddr="$ISTIOD_MON" --ctrlz_port=0 --ctrlz_address=127.0.0.1 --shutdownDuration=1s
		# Its plain gRPC port opens once every config source has synced.
		istiod_synced() { http_get "$ISTIOD_MON" /debug/configz >/dev/null && port_in_use "${ISTIOD_GRPC##*:}"; }
		wait_for 60 "istiod synced with $what" istiod_synced && break
		if ((attempt == 3)) || ! grep -q 'address already in use' "$ISTIOD_LOG"; then fail "$WAIT_ERR"; fi
		stop "$ISTIOD_PID"
	done
	ok "istiod (pid $ISTIOD_PID) synced: xDS for proxies on $ISTIOD_GRPC, debug on http://$ISTIOD_MON"
}

# wait_istiod_holds WHAT: wait until istiod holds exactly the ServiceEntries in $SERVED (sorted
# names) and has pushed once (the initial sync ends with istiod's first push: every story starts
# from a settled istiod).
wait_istiod_holds() {
	holds_all_served() { [[ "$(serviceentry_rows | field 1)" == "$SERVED" ]]; }
	wait_until 30 "istiod's /debug/configz lists every service $1 serves" holds_all_served
	first_push() { local n; n=$(metric $PUSHES) && ((n >= 1)); }
	wait_until 30 "istiod's first push" first_push
	ok "istiod holds all $(wc -l <<<"$SERVED") ServiceEntries ($(elapsed "$START") since the start)"
}

# ---------------------------------------------------------------------------------------------
# Consul: a catalog through its HTTP API.

# consul_put PATH JSON: a catalog write, which Consul answers with "true".
consul_put() {
	local out
	out=$(http_put "$CONSUL_HTTP" "$1" "$2") || fail "PUT http://$CONSUL_HTTP$1 failed (is the consul agent up?)"
	[[ "$out" == true ]] || fail "PUT http://$CONSUL_HTTP$1 answered '$out', not true"
}

# instance_json NODE ADDRESS ID SERVICE PORT PROTOCOL: a catalog registration of one instance on a
# node of its own (as a VM running its own agent would appear), with a passing health check.
instance_json() {
	printf '{"Node": "%s", "Address": "%s", "Service": {"ID": "%s", "Service": "%s", "Address": "%s", "Port": %d, "Tags": ["version=v1"], "Meta": {"protocol": "%s"}}, "Check": {"CheckID": "service:%s", "Name": "%s health", "Status": "passing", "ServiceID": "%s"}}' \
		"$1" "$2" "$3" "$4" "$2" "$5" "$6" "$3" "$4" "$3"
}

# check_json NODE ADDRESS ID STATUS: the instance's health check, registered again with STATUS.
check_json() {
	printf '{"Node": "%s", "Address": "%s", "Check": {"CheckID": "service:%s", "Status": "%s", "ServiceID": "%s"}}' \
		"$1" "$2" "$3" "$4" "$3"
}

# consul_names: what galleon-consul serves (sorted names; fails if it does not answer).
consul_names() { "$GALLEONCTL" get --addr "$GCONSUL_XDS" -o names; }

# ---------------------------------------------------------------------------------------------
# ZooKeeper: four-letter words, its own CLI, Dubbo provider URLs.

# zk_4lw WORD: ZooKeeper's answer to a four-letter word (ruok, srvr, cons, ...).
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

# zk_cli < COMMANDS: run zkCli's commands (create, delete, ls, ...) in one JVM (each start costs
# about a second); prints the commands' output (its messages and errors go to $ZKCLI_LOG).
zk_cli() {
	local to=()
	have timeout && to=(timeout 60)
	${to[@]+"${to[@]}"} "$JAVA" -Xmx64m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
		-cp "$ZK_CP" org.apache.zookeeper.ZooKeeperMain -server "$ZK_ADDR" 2>>"$ZKCLI_LOG"
}

# zk_ls_lines < zk_cli's output: the children the last `ls` printed ("[a, b]"), one a line.
zk_ls_lines() { awk '/^\[.*\]$/ { last = $0 } END { gsub(/^\[|\]$/, "", last); n = split(last, c, ", "); for (i = 1; i <= n; i++) print c[i] }' | LC_ALL=C sort; }

# urlencode STRING: as Dubbo encodes a provider URL into a znode name (java.net.URLEncoder:
# letters, digits and . - * _ stay, every other byte becomes %XX).
urlencode() {
	local s=$1 out='' c i
	for ((i = 0; i < ${#s}; i++)); do
		c=${s:i:1}
		case $c in
		[A-Za-z0-9.*_-]) out+=$c ;;
		*) printf -v c '%%%02X' "'$c" && out+=$c ;;
		esac
	done
	printf '%s\n' "$out"
}
urldecode() { local s=${1//+/ }; printf '%b\n' "${s//%/\\x}"; }

DUBBO_IFACE=org.apache.demo.GreetingService
# provider_url IP: the Dubbo 2 provider URL of GreetingService 1.0.0 at IP:20880.
provider_url() {
	printf 'dubbo://%s:20880/%s?application=greeter&side=provider&version=1.0.0&weight=100&interface=%s\n' \
		"$1" "$DUBBO_IFACE" "$DUBBO_IFACE"
}
# provider_node IP: the znode of that provider (under $ZK_PROVIDERS).
provider_node() { printf '%s/%s\n' "$ZK_PROVIDERS" "$(urlencode "$(provider_url "$1")")"; }

# zk_names: what galleon-zookeeper serves (sorted names; fails if it does not answer).
zk_names() { "$GALLEONCTL" get --addr "$GZK_XDS" -o names; }

# dubbo_row: istiod's row of the Dubbo service, found by its host (the name ends in a hash).
dubbo_row() { serviceentry_rows | awk -F'|' '$2 ~ /\.default\.dubbo$/'; }

# ---------------------------------------------------------------------------------------------
# Eureka: polaris-servers, through the Eureka REST API.

# http_call METHOD HOST:PORT PATH [JSON]: one request, with the (ASCII) JSON body if given; succeeds
# on a 2xx answer (Eureka answers a registration with 204) and prints its body.
http_call() {
	local method=$1 hostport=$2 path=$3 body=${4-} curl_body=() wget_body=()
	if (($# > 3)); then
		curl_body=(-H 'Content-Type: application/json' --data-binary "$body")
		wget_body=(--header='Content-Type: application/json' --body-data="$body")
	fi
	if have curl; then
		curl -fsS --max-time 5 -X "$method" ${curl_body[@]+"${curl_body[@]}"} "http://$hostport$path" 2>/dev/null
	elif have wget; then
		wget -q -T 5 -O - --method="$method" ${wget_body[@]+"${wget_body[@]}"} "http://$hostport$path" 2>/dev/null
	else
		(
			exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}" || exit 1
			printf '%s %s HTTP/1.0\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
				"$method" "$path" "$hostport" "${#body}" "$body" >&3 # ASCII bodies: characters = bytes
			IFS= read -r -t 5 status <&3 || exit 1
			[[ $status =~ ^HTTP/[0-9.]+\ 2[0-9][0-9]\  ]] || exit 1
			while IFS= read -r -t 5 line <&3 && [[ $line != $'\r' && -n $line ]]; do :; done
			cat <&3
		) 2>/dev/null
	fi
}

EUREKA_APP=ORDERS
# eureka_instance_json ID IP: a registration of instance ID of ORDERS at IP:8080, in Netflix's JSON
# (what a Netflix or Spring Cloud client sends; as eurekatest's Instance.JSON writes it).
eureka_instance_json() {
	printf '{"instance": {"instanceId": "%s", "app": "%s", "hostName": "%s", "ipAddr": "%s", "vipAddress": "orders", "status": "UP", "port": {"$": 8080, "@enabled": "true"}, "securePort": {"$": 443, "@enabled": "false"}, "dataCenterInfo": {"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn"}, "leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": 90}, "metadata": {"version": "v1"}}}' \
		"$1" "$EUREKA_APP" "$2" "$2"
}

# eureka_register HOST:PORT ID IP: register the instance in that server (POST /eureka/apps/ORDERS)
# and hand it to the heartbeats.
eureka_register() {
	http_call POST "$1" "/eureka/apps/$EUREKA_APP" "$(eureka_instance_json "$2" "$3")" >/dev/null ||
		fail "POST http://$1/eureka/apps/$EUREKA_APP (registering $2) failed (see $LOG_DIR/polaris-*.log)"
	printf '%s %s %s\n' "$1" "$EUREKA_APP" "$2" >>"$HEARTBEATS"
}

# eureka_listing HOST:PORT: the server's /eureka/apps (XML, one element a line), one instance a
# line: "ID IP:PORT STATUS", sorted.
eureka_listing() {
	local body
	body=$(http_get "$1" /eureka/apps) || return 1
	awk -F'[<>]' '
		$2 == "instanceId" { id = $3 }
		$2 == "ipAddr" { ip = $3 }
		$2 ~ /^port( |$)/ { port = $3 }
		$2 == "status" { st = $3 }
		$2 == "/instance" { print id, ip ":" port, st }' <<<"$body" | LC_ALL=C sort
}

# eureka_hashcode HOST:PORT: the server's apps__hashcode (instances counted by status, e.g. UP_3_).
eureka_hashcode() { http_get "$1" /eureka/apps | sed -n 's/.*<apps__hashcode>\(.*\)<\/apps__hashcode>.*/\1/p'; }

# eureka_heartbeats: every 10 s, renew (PUT /eureka/apps/APP/ID) each instance $HEARTBEATS lists as
# "HOST:PORT APP ID", as a Eureka client renews its lease (every 30 s): Polaris drops an instance
# nobody renews about 90 s after it registered. Runs as a process of its own (spawn, export -f).
eureka_heartbeats() {
	local hostport app id
	while :; do
		sleep 10
		while read -r hostport app id; do
			http_call PUT "$hostport" "/eureka/apps/$app/$id" >/dev/null ||
				printf '%s: renewing %s/%s in %s failed\n' "$(date +%T)" "$app" "$id" "$hostport"
		done <"$HEARTBEATS"
	done
}

# polaris_ready HOST:PORT: the Eureka API of a polaris-server answers.
polaris_ready() { http_get "$1" /eureka/apps >/dev/null; }

# start_polaris NAME PID_VAR ADDR_VAR LOG: start polaris-server NAME (A or B) in $EUREKA_DIR/name
# (lower case; its store and logs are relative paths) on free loopback ports (new ones after a port clash), wait until its
# Eureka API answers, and set PID_VAR and ADDR_VAR (127.0.0.1:PORT; base URL /eureka).
start_polaris() {
	local name=$1 pid_var=$2 addr_var=$3 log=$4 dir=$EUREKA_DIR/${1,,} attempt port
	mkdir -p "$dir"
	for attempt in 1 2 3; do
		port=$(free_port)
		"$SCRIPT_DIR/eureka.sh" config "$dir" "$port" "$(free_port)" "$(free_port)" >/dev/null ||
			fail "scripts/eureka.sh config $dir failed"
		# TZ=UTC: Polaris writes local times into instance records and reads them back as UTC.
		spawn "$pid_var" "$log" env TZ=UTC sh -c 'cd "$1" && shift && exec "$@"' sh "$dir" \
			"$POLARIS" start -c polaris-server.yaml
		printf -v "$addr_var" '127.0.0.1:%s' "$port"
		wait_for 60 "polaris-server $name answers GET http://127.0.0.1:$port/eureka/apps" polaris_ready "127.0.0.1:$port" && return 0
		# Polaris reports a port clash in its own logs (log/runtime/*.log), not on stdout.
		if ((attempt == 3)) || ! grep -qs 'address already in use' "$log" "$dir"/log/runtime/*.log; then fail "$WAIT_ERR"; fi
		kill_now "${!pid_var}"
		printf -v "$pid_var" '%s' ''
		rm -rf "$dir" && mkdir -p "$dir"
	done
}

# eureka_names: what galleon-eureka serves (sorted names; fails if it does not answer).
eureka_names() { "$GALLEONCTL" get --addr "$GEUREKA_XDS" -o names; }

# ---------------------------------------------------------------------------------------------
cat <<EOF
${BOLD}Galleon demo${RESET}: Galleon's file adapter (galleon-file) serves the services of a directory of
YAML files to a real istiod 1.29.2 over MCP-over-xDS (istiod's configSources: xds://...).
We edit the files and watch each change arrive in istiod. Then Galleon's Consul adapter
(galleon-consul) does the same for a Consul 1.22.6 catalog: health checks fail and recover,
a service is deregistered. Then Galleon's ZooKeeper adapter (galleon-zookeeper) serves Dubbo
providers registered in ZooKeeper 3.8: a provider leaves, and its ZooKeeper session expires
while providers change. Last, Galleon's Eureka adapter (galleon-eureka) serves an application
registered in two Eureka API servers (polaris-server 1.18.1): an instance is taken out of
service, then the server galleon-eureka reads crashes and the other one takes over.
EOF

heading "1. Build galleon-file, galleon-consul, galleon-zookeeper, galleon-eureka and galleonctl"
t0=$(now)
have go || fail "go is not on PATH (Go 1.26 is needed to build Galleon)"
(cd "$REPO_DIR" && go build -o "$BIN_DIR/" ./cmd/galleon-file ./cmd/galleon-consul ./cmd/galleon-zookeeper \
	./cmd/galleon-eureka ./cmd/galleonctl)
GALLEONCTL=$BIN_DIR/galleonctl
ok "built into $BIN_DIR in $(elapsed "$t0")"

heading "2. istiod (pilot-discovery 1.29.2)"
# Its progress lines (stderr) are shown indented; the binary's path is the last line of stdout.
exec 4>&1
PILOT=$({ "$SCRIPT_DIR/istiod.sh" build 2>&1 1>&3 3>&- | indent_live >&4; } 3>&1 | tail -n 1)
exec 4>&-
[[ -x "$PILOT" ]] || fail "scripts/istiod.sh build did not produce a binary"
ok "$PILOT"

heading "3. Start galleon-file on a copy of examples/file"
cp "$REPO_DIR"/examples/file/*.yaml "$REG_DIR/"
say "    registry: $REG_DIR ($(cd "$REG_DIR" && echo *.yaml))"
# The daemons read GALLEON_* variables as flags, and galleon-consul CONSUL_* ones as defaults (an
# ACL token, TLS files): do not pass any on.
daemon_env=(env)
while IFS= read -r v; do daemon_env+=(-u "$v"); done < <(compgen -e | grep -E '^(GALLEON|CONSUL)_' || true)
for attempt in 1 2 3; do
	GALLEON_XDS=127.0.0.1:$(free_port)
	GALLEON_HTTP=127.0.0.1:$(free_port)
	spawn GALLEON_PID "$GALLEON_LOG" "${daemon_env[@]}" "$BIN_DIR/galleon-file" --file-dir "$REG_DIR" \
		--listen "$GALLEON_XDS" --http "$GALLEON_HTTP" --shutdown-grace 1s
	galleon_ready() { http_get "$GALLEON_HTTP" /readyz >/dev/null && port_in_use "${GALLEON_XDS##*:}"; }
	wait_for 20 "galleon-file ready" galleon_ready && break
	if ((attempt == 3)) || ! grep -q 'address already in use' "$GALLEON_LOG"; then fail "$WAIT_ERR"; fi
	stop "$GALLEON_PID"
done
ok "galleon-file (pid $GALLEON_PID) serves MCP on $GALLEON_XDS, http://$GALLEON_HTTP/readyz says ready"

heading "4. Start istiod reading configSources: xds://$GALLEON_XDS"
MESH=$DEMO_DIR/mesh.yaml
NETWORKS=$DEMO_DIR/networks.yaml
printf 'configSources:\n- address: "xds://%s"\n' "$GALLEON_XDS" >"$MESH"
: >"$NETWORKS"
say "    mesh config: $(tr '\n' ' ' <"$MESH" | sed 's/ $//')"
start_istiod "$LOG_DIR/istiod.log" galleon-file
SERVED=$("$GALLEONCTL" get --addr "$GALLEON_XDS" -o names)
wait_istiod_holds galleon-file

# ---------------------------------------------------------------------------------------------
heading "A. What Galleon serves (galleonctl speaks MCP-over-xDS like istiod)"
say "\$ galleonctl get --addr $GALLEON_XDS -o names"
indent <<<"$SERVED"
say ""
say "\$ galleonctl get --addr $GALLEON_XDS -o yaml    ${DIM}# first of the list${RESET}"
"$GALLEONCTL" get --addr "$GALLEON_XDS" -o yaml | yaml_item | indent

heading "B. What istiod holds (its /debug/configz)"
serviceentry_rows | print_table
note "    Each one's resourceVersion in istiod is Galleon's content hash: istiod re-processes a"
note "    ServiceEntry only when that hash moves."

# read_counters N: FULLn (full pushes), PUSHn (pushes dispatched), EDSn (EDS updates) right now.
read_counters() {
	local full push eds
	if ! { full=$(metric $FULL_PUSHES) && push=$(metric $PUSHES) && eds=$(metric "$EDS_UPDATES"); }; then
		fail "cannot read istiod's metrics (http://$ISTIOD_MON/metrics)"
	fi
	printf -v "FULL$1" '%s' "$full"
	printf -v "PUSH$1" '%s' "$push"
	printf -v "EDS$1" '%s' "$eds"
}
read_counters 0
say ""
say "istiod so far: $FULL0 full push(es) ($FULL_PUSHES), $EDS0 EDS update(s)"

# pushed_since N: istiod has dispatched a push since its push counter read N.
pushed_since() { local n; n=$(metric $PUSHES) && ((n > $1)); }

heading "C. An instance moves: bookinfo/details 10.10.1.11 -> 10.10.1.12"
before=$(row bookinfo/details)
say "    before: endpoints $(field 5 <<<"$before")"
say "\$ edit $REG_DIR/bookinfo.yaml: address: 10.10.1.11 -> address: 10.10.1.12"
edit_file "$REG_DIR/bookinfo.yaml" '!done && $0 ~ /address: 10\.10\.1\.11$/ { sub(/10\.10\.1\.11$/, "10.10.1.12"); done = 1 } { print }'
t0=$(now)
details_moved() { [[ "$(row bookinfo/details | field 5)" == 10.10.1.12 ]]; }
wait_until 20 "istiod holds bookinfo/details with endpoint 10.10.1.12" details_moved
wait_until 20 "istiod pushes the change" pushed_since "$PUSH0"
read_counters 1
ok "istiod has it $(elapsed "$t0") after the save: endpoints $(row bookinfo/details | field 5)"
ok "full pushes $FULL0 -> $FULL1, EDS updates $EDS0 -> $EDS1: an endpoint-only (EDS) update, no full push"
((FULL1 == FULL0)) || fail "an endpoint-only change caused $((FULL1 - FULL0)) full push(es); want none"
((EDS1 > EDS0)) || fail "an endpoint-only change caused no EDS update"
note "    Galleon keeps everything but the endpoints byte-identical and create_time fixed, so istiod"
note "    updates the endpoints without recomputing the whole mesh config."

heading "D. A port is added: bookinfo/ratings gets 9443/HTTPS"
say "    before: ports $(row bookinfo/ratings | field 3)"
say "\$ edit $REG_DIR/bookinfo.yaml: ratings ports += {number: 9443, protocol: HTTPS, name: https}"
edit_file "$REG_DIR/bookinfo.yaml" '
	$0 == "- name: ratings" { in_svc = 1 }
	{ print }
	in_svc && $0 == "  - {number: 9080, protocol: HTTP, name: http}" { print "  - {number: 9443, protocol: HTTPS, name: https}"; in_svc = 0 }'
t0=$(now)
ratings_port() { [[ "$(row bookinfo/ratings | field 3)" == 9080/HTTP,9443/HTTPS ]]; }
wait_until 20 "istiod holds bookinfo/ratings with ports 9080/HTTP,9443/HTTPS" ratings_port
wait_until 20 "istiod pushes the change" pushed_since "$PUSH1"
read_counters 2
ok "istiod has it $(elapsed "$t0") after the save: ports $(row bookinfo/ratings | field 3)"
ok "full pushes $FULL1 -> $FULL2: a new port changes the service, so istiod does a full push (+$((FULL2 - FULL1)))"
((FULL2 > FULL1)) || fail "a port change caused no full push"

heading "E. A service is removed: bookinfo/productpage leaves bookinfo.yaml"
say "\$ edit $REG_DIR/bookinfo.yaml: delete the productpage entry"
edit_file "$REG_DIR/bookinfo.yaml" '$0 == "- name: productpage" { exit } { print }'
t0=$(now)
productpage_gone() { [[ -z "$(row bookinfo/productpage)" ]] && [[ -n "$(row bookinfo/details)" ]]; }
wait_until 20 "bookinfo/productpage gone from istiod" productpage_gone
wait_until 20 "istiod pushes the change" pushed_since "$PUSH2"
read_counters 3
ok "gone from istiod $(elapsed "$t0") after the save; full pushes $FULL2 -> $FULL3"
((FULL3 > FULL2)) || fail "removing a service caused no full push"
say ""
serviceentry_rows | print_table
[[ "$(serviceentry_rows | wc -l)" -eq $(($(wc -l <<<"$SERVED") - 1)) ]] || fail "istiod does not hold exactly the remaining services"

# ---------------------------------------------------------------------------------------------
# The Consul story.

heading "5. Consul 1.22.6 (built from the Go module proxy)"
if ! "$SCRIPT_DIR/consul.sh" path >/dev/null 2>&1; then
	note "    The first run builds Consul (about 5-9 min on 2 cores, ~3 GB of module source and build"
	note "    cache) and caches the binary; later runs reuse it."
fi
t0=$(now)
exec 4>&1
CONSUL=$({ "$SCRIPT_DIR/consul.sh" build 2>&1 1>&3 3>&- | indent_live >&4; } 3>&1 | tail -n 1)
exec 4>&-
[[ -x "$CONSUL" ]] || fail "scripts/consul.sh build did not produce a binary"
ok "$CONSUL ($(elapsed "$t0"))"

heading "6. Start a Consul dev agent on loopback and register services"
t0=$(now)
for attempt in 1 2 3; do
	CONSUL_HTTP=127.0.0.1:$(free_port)
	# One in-memory server agent; only its HTTP API and its own Serf/RPC ports, all on 127.0.0.1.
	spawn CONSUL_PID "$CONSUL_LOG" "${daemon_env[@]}" sh -c 'cd "$1" && shift && exec "$@"' sh "$DEMO_DIR" \
		"$CONSUL" agent -dev -bind 127.0.0.1 -client 127.0.0.1 -http-port "${CONSUL_HTTP##*:}" \
		-dns-port -1 -grpc-port -1 -grpc-tls-port -1 -serf-lan-port "$(free_port)" \
		-serf-wan-port "$(free_port)" -server-port "$(free_port)" -log-level warn
	# Ready once it has elected itself leader and registered itself (service "consul").
	consul_ready() {
		local leader self
		leader=$(http_get "$CONSUL_HTTP" /v1/status/leader) && [[ -n "${leader//[\"[:space:]]/}" ]] &&
			self=$(http_get "$CONSUL_HTTP" /v1/catalog/service/consul) && [[ "$self" == *'"ServiceID"'* ]]
	}
	wait_for 30 "the consul agent has a leader" consul_ready && break
	if ((attempt == 3)) || ! grep -q 'address already in use' "$CONSUL_LOG"; then fail "$WAIT_ERR"; fi
	stop "$CONSUL_PID"
done
ok "consul agent (pid $CONSUL_PID) up in $(elapsed "$t0"): HTTP API on http://$CONSUL_HTTP, it is its own leader"
say "\$ curl -X PUT http://$CONSUL_HTTP/v1/catalog/register -d '$(instance_json vm-1 10.20.0.1 web-1 web 8080 http)'"
consul_put /v1/catalog/register "$(instance_json vm-1 10.20.0.1 web-1 web 8080 http)"
say "    ${DIM}and the same for:${RESET}"
for args in "vm-2 10.20.0.2 web-2 web 8080 http" "vm-3 10.20.0.3 payments-1 payments 9090 grpc"; do
	read -r node addr id svc port proto <<<"$args"
	say "    node $node ($addr): $svc instance $id on port $port, meta protocol $proto, check passing"
	consul_put /v1/catalog/register "$(instance_json "$node" "$addr" "$id" "$svc" "$port" "$proto")"
done
say "\$ curl http://$CONSUL_HTTP/v1/catalog/services"
services=$(http_get "$CONSUL_HTTP" /v1/catalog/services) || fail "cannot list the catalog's services"
# One line per service: {"consul":[],"payments":["version=v1"],"web":["version=v1"]}
{ tr -d ' \n' <<<"$services" && echo; } | sed 's/^{//; s/}$//; s/\],/]\n/g' | indent
[[ "$(tr -d ' \n' <<<"$services")" == *'"payments":'*'"web":'* ]] || fail "the catalog does not list payments and web"
note "    Catalog registrations are instant: no agent runs on vm-1..3, their checks are set by API."

heading "7. Start galleon-consul on the agent"
t0=$(now)
for attempt in 1 2 3; do
	GCONSUL_XDS=127.0.0.1:$(free_port)
	GCONSUL_HTTP=127.0.0.1:$(free_port)
	say "\$ galleon-consul --consul-address $CONSUL_HTTP --listen $GCONSUL_XDS --http $GCONSUL_HTTP --debounce-quiet 20ms"
	spawn GCONSUL_PID "$GCONSUL_LOG" "${daemon_env[@]}" "$BIN_DIR/galleon-consul" \
		--consul-address "$CONSUL_HTTP" --listen "$GCONSUL_XDS" --http "$GCONSUL_HTTP" \
		--debounce-quiet 20ms --shutdown-grace 1s
	gconsul_ready() { http_get "$GCONSUL_HTTP" /readyz >/dev/null && port_in_use "${GCONSUL_XDS##*:}"; }
	wait_for 20 "galleon-consul ready (it has listed the catalog of $CONSUL_HTTP)" gconsul_ready && break
	if ((attempt == 3)) || ! grep -q 'address already in use' "$GCONSUL_LOG"; then fail "$WAIT_ERR"; fi
	stop "$GCONSUL_PID"
done
CONSUL_SERVED=$'consul/consul\nconsul/payments\nconsul/web'
serves_catalog() { [[ "$(consul_names)" == "$CONSUL_SERVED" ]]; }
wait_until 20 "galleon-consul serves consul/consul, consul/payments and consul/web" serves_catalog
ok "galleon-consul (pid $GCONSUL_PID) serves MCP on $GCONSUL_XDS, ready $(elapsed "$t0") after its start"

heading "8. Restart istiod with two configSources: galleon-file and galleon-consul"
stop "$ISTIOD_PID"
ISTIOD_PID=''
printf 'configSources:\n- address: "xds://%s"\n- address: "xds://%s"\n' "$GALLEON_XDS" "$GCONSUL_XDS" >"$MESH"
say "    mesh config: $(tr '\n' ' ' <"$MESH" | sed 's/ $//')"
start_istiod "$LOG_DIR/istiod-consul.log" "galleon-file and galleon-consul"
SERVED=$({ "$GALLEONCTL" get --addr "$GALLEON_XDS" -o names && consul_names; } | LC_ALL=C sort)
wait_istiod_holds "galleon-file or galleon-consul"

heading "F. What galleon-consul serves"
say "\$ galleonctl get --addr $GCONSUL_XDS -o names"
consul_names | indent
say ""
say "\$ galleonctl get --addr $GCONSUL_XDS -o yaml    ${DIM}# consul/web${RESET}"
"$GALLEONCTL" get --addr "$GCONSUL_XDS" -o yaml | yaml_item web | indent
note "    One ServiceEntry per Consul service (the dev agent registers itself as \"consul\"), host"
note "    <service>.service.consul; meta protocol gives the port's protocol; tags key=value and meta"
note "    become endpoint labels. Only instances whose checks all pass are endpoints."

heading "G. What istiod holds: both registries"
serviceentry_rows | print_table
web=$(row consul/web)
[[ "$(field 2 <<<"$web")|$(field 3 <<<"$web")|$(field 4 <<<"$web")" == "web.service.consul|8080/HTTP|2" ]] ||
	fail "istiod's consul/web is '$web'; want host web.service.consul, port 8080/HTTP, 2 endpoints"
[[ "$(row consul/payments | field 3)" == 9090/GRPC ]] || fail "istiod's consul/payments is '$(row consul/payments)'; want port 9090/GRPC"
ok "consul/web: host web.service.consul, 2 endpoints ($(field 5 <<<"$web")); consul/payments: 9090/GRPC"
read_counters 4
say "istiod (restarted) so far: $FULL4 full push(es), $EDS4 EDS update(s)"

heading "H. A health check fails: web-2 on vm-2 turns critical"
json=$(check_json vm-2 10.20.0.2 web-2 critical)
say "\$ curl -X PUT http://$CONSUL_HTTP/v1/catalog/register -d '$json'"
consul_put /v1/catalog/register "$json"
t0=$(now)
web_endpoints() { [[ "$(row consul/web | field 5)" == "$1" ]]; }
wait_until 20 "istiod holds consul/web with the single endpoint 10.20.0.1" web_endpoints 10.20.0.1
wait_until 20 "istiod pushes the change" pushed_since "$PUSH4"
read_counters 5
ok "istiod has it $(elapsed "$t0") after the PUT: consul/web endpoints $(row consul/web | field 5)"
ok "full pushes $FULL4 -> $FULL5, EDS updates $EDS4 -> $EDS5: an endpoint-only (EDS) update, no full push"
((FULL5 == FULL4)) || fail "a failing health check caused $((FULL5 - FULL4)) full push(es); want none"
((EDS5 > EDS4)) || fail "a failing health check caused no EDS update"

heading "I. It passes again"
json=$(check_json vm-2 10.20.0.2 web-2 passing)
say "\$ curl -X PUT http://$CONSUL_HTTP/v1/catalog/register -d '$json'"
consul_put /v1/catalog/register "$json"
t0=$(now)
wait_until 20 "istiod holds consul/web with endpoints 10.20.0.1 and 10.20.0.2" web_endpoints 10.20.0.1,10.20.0.2
wait_until 20 "istiod pushes the change" pushed_since "$PUSH5"
read_counters 6
ok "istiod has it $(elapsed "$t0") after the PUT: consul/web endpoints $(row consul/web | field 5)"
ok "full pushes $FULL5 -> $FULL6, EDS updates $EDS5 -> $EDS6: again endpoint-only, no full push"
((FULL6 == FULL5)) || fail "a recovered health check caused $((FULL6 - FULL5)) full push(es); want none"
((EDS6 > EDS5)) || fail "a recovered health check caused no EDS update"

heading "J. A service is deregistered: payments"
json='{"Node": "vm-3", "ServiceID": "payments-1"}'
say "\$ curl -X PUT http://$CONSUL_HTTP/v1/catalog/deregister -d '$json'"
consul_put /v1/catalog/deregister "$json"
t0=$(now)
payments_gone() { [[ -z "$(row consul/payments)" ]] && [[ -n "$(row consul/web)" ]]; }
wait_until 20 "consul/payments gone from istiod" payments_gone
wait_until 20 "istiod pushes the change" pushed_since "$PUSH6"
read_counters 7
ok "gone from istiod $(elapsed "$t0") after the PUT; full pushes $FULL6 -> $FULL7"
((FULL7 > FULL6)) || fail "deregistering a service caused no full push"
say ""
serviceentry_rows | print_table
[[ "$(serviceentry_rows | wc -l)" -eq $(($(wc -l <<<"$SERVED") - 1)) ]] || fail "istiod does not hold exactly the remaining services"

heading "K. galleon-consul's own view: /debug/status and metrics"
say "\$ curl http://$GCONSUL_HTTP/debug/status"
status=$(http_get "$GCONSUL_HTTP" /debug/status) || fail "galleon-consul's /debug/status does not answer"
indent <<<"$status"
tr -d ' \n' <<<"$status" | grep -q '"synced":true' || fail "galleon-consul's /debug/status does not say synced"
tr -d ' \n' <<<"$status" | grep -q '"stale":false' || fail "galleon-consul's /debug/status says it is stale"
say ""
say "\$ curl -s http://$GCONSUL_HTTP/metrics | grep -E '^galleon_consul_(blocking_wakeups|services_fetched|stale)'"
metrics=$(http_get "$GCONSUL_HTTP" /metrics) || fail "galleon-consul's /metrics does not answer"
picked=$(grep -E '^galleon_consul_(blocking_wakeups|services_fetched|stale)' <<<"$metrics" || true)
[[ -n "$picked" ]] || fail "galleon-consul exports none of galleon_consul_blocking_wakeups_total, _services_fetched_total, _stale"
indent <<<"$picked"
note "    Blocking queries on the catalog and on health checks wake galleon-consul on every change;"
note "    only the services that changed are fetched again."

# ---------------------------------------------------------------------------------------------
# The ZooKeeper story.

heading "9. ZooKeeper 3.8 (the Debian package)"
t0=$(now)
if [[ -z "${GALLEON_ZOOKEEPER_CLASSPATH:-}" && ! -f "${GALLEON_ZOOKEEPER_JAVA_DIR:-/usr/share/java}/zookeeper.jar" ]]; then
	note "    scripts/zookeeper.sh installs the Debian package zookeeper (and a JRE) first: ~10 s, needs root or sudo."
fi
exec 4>&1
ZK_CP=$({ "$SCRIPT_DIR/zookeeper.sh" classpath 2>&1 1>&3 3>&- | indent_live >&4; } 3>&1 | tail -n 1)
exec 4>&-
[[ -n "$ZK_CP" ]] || fail "scripts/zookeeper.sh classpath printed no classpath"
JAVA=$("$SCRIPT_DIR/zookeeper.sh" java) || fail "scripts/zookeeper.sh java found no java"
ok "classpath ${ZK_CP%%:*}:... ($(tr ':' '\n' <<<"$ZK_CP" | wc -l) jars), $JAVA ($("$JAVA" -version 2>&1 | head -n 1)) ($(elapsed "$t0"))"

heading "10. Start ZooKeeper on loopback and register three Dubbo providers"
t0=$(now)
ZK_DIR=$DEMO_DIR/zookeeper
mkdir -p "$ZK_DIR/data"
# scripts/zookeeper.sh start: tickTime 500 ms (ZooKeeper grants session timeouts of 2-20 ticks,
# so the adapter may ask for 2 s: step O lets its session expire), no admin server, four-letter
# words for probes; it prints the address and pid once the server serves.
zk_started=$("$SCRIPT_DIR/zookeeper.sh" start "$ZK_DIR" "$ZK_LOG" 256m) || fail "ZooKeeper did not start (scripts/zookeeper.sh start; its log: $ZK_LOG)"
read -r ZK_ADDR ZK_PID <<<"$zk_started"
ZK_VERSION=$(zk_4lw srvr | sed -n 's/^Zookeeper version: \([^-,]*\).*/\1/p')
ok "ZooKeeper $ZK_VERSION (pid $ZK_PID) serves on $ZK_ADDR ($(elapsed "$t0")): ruok -> $(zk_4lw ruok), $(zk_4lw srvr | grep '^Mode: ')"
say "    zoo.cfg: $(grep -v '^dataDir=' "$ZK_DIR/zoo.cfg" | tr '\n' ' ' | sed 's/ $//')"
ZK_PROVIDERS=/dubbo/$DUBBO_IFACE/providers
say "\$ java -cp \"\$(scripts/zookeeper.sh classpath)\" org.apache.zookeeper.ZooKeeperMain -server $ZK_ADDR <<EOF"
commands=$(
	printf 'create /dubbo\ncreate /dubbo/%s\ncreate %s\n' "$DUBBO_IFACE" "$ZK_PROVIDERS"
	for ip in 10.50.0.1 10.50.0.2 10.50.0.3; do printf 'create %s\n' "$(provider_node "$ip")"; done
	printf 'ls %s\n' "$ZK_PROVIDERS"
)
indent <<<"$commands"
say "EOF"
note "    A Dubbo 2 provider registers its URL, URL-encoded, as the name of a znode under"
note "    /dubbo/<interface>/providers (an ephemeral one: here they are persistent, the CLI's"
note "    session ends). One JVM runs every command (each start costs about a second)."
t0=$(now)
listed=$(zk_cli <<<"$commands" | zk_ls_lines) || fail "ZooKeeper's CLI failed (see $ZKCLI_LOG)"
want=$(for ip in 10.50.0.1 10.50.0.2 10.50.0.3; do urlencode "$(provider_url "$ip")"; done | LC_ALL=C sort)
[[ "$listed" == "$want" ]] || fail "ZooKeeper lists under $ZK_PROVIDERS: '${listed:-nothing}'; want the three providers (see $ZKCLI_LOG)"
ok "ZooKeeper lists 3 providers under $ZK_PROVIDERS ($(elapsed "$t0")), decoded:"
while IFS= read -r name; do urldecode "$name"; done <<<"$listed" | indent

heading "11. Start galleon-zookeeper on ZooKeeper (Dubbo layout)"
t0=$(now)
for attempt in 1 2 3; do
	GZK_XDS=127.0.0.1:$(free_port)
	GZK_HTTP=127.0.0.1:$(free_port)
	say "\$ galleon-zookeeper --zk-servers $ZK_ADDR --zk-layout dubbo --zk-session-timeout 2s --zk-unreachable-after 1500ms --debounce-quiet 20ms --listen $GZK_XDS --http $GZK_HTTP"
	spawn GZK_PID "$GZK_LOG" "${daemon_env[@]}" "$BIN_DIR/galleon-zookeeper" \
		--zk-servers "$ZK_ADDR" --zk-layout dubbo --zk-session-timeout 2s --zk-unreachable-after 1500ms \
		--debounce-quiet 20ms --listen "$GZK_XDS" --http "$GZK_HTTP" --shutdown-grace 1s
	gzk_ready() { http_get "$GZK_HTTP" /readyz >/dev/null && port_in_use "${GZK_XDS##*:}"; }
	wait_for 20 "galleon-zookeeper ready (it has listed /dubbo on $ZK_ADDR)" gzk_ready && break
	if ((attempt == 3)) || ! grep -q 'address already in use' "$GZK_LOG"; then fail "$WAIT_ERR"; fi
	stop "$GZK_PID"
done
serves_dubbo() { [[ "$(zk_names)" == default/org-apache-demo-greetingservice-1-0-0--* ]]; }
wait_until 20 "galleon-zookeeper serves default/org-apache-demo-greetingservice-1-0-0--<hash>" serves_dubbo
ok "galleon-zookeeper (pid $GZK_PID) serves MCP on $GZK_XDS, ready $(elapsed "$t0") after its start"
ZK_SESSION=$(sed -n 's/.*msg="ZooKeeper session established".* session=\(0x[0-9a-f]*\).*/\1/p' "$GZK_LOG" | tail -n 1)
[[ -n "$ZK_SESSION" ]] || fail "galleon-zookeeper logged no \"ZooKeeper session established ... session=0x...\""
ok "its ZooKeeper session: $ZK_SESSION (2 s timeout)"

heading "12. Restart istiod with three configSources: galleon-file, galleon-consul and galleon-zookeeper"
stop "$ISTIOD_PID"
ISTIOD_PID=''
printf 'configSources:\n- address: "xds://%s"\n- address: "xds://%s"\n- address: "xds://%s"\n' \
	"$GALLEON_XDS" "$GCONSUL_XDS" "$GZK_XDS" >"$MESH"
say "    mesh config: $(tr '\n' ' ' <"$MESH" | sed 's/ $//')"
start_istiod "$LOG_DIR/istiod-zookeeper.log" "galleon-file, galleon-consul and galleon-zookeeper"
SERVED=$({ "$GALLEONCTL" get --addr "$GALLEON_XDS" -o names && consul_names && zk_names; } | LC_ALL=C sort)
wait_istiod_holds "galleon-file, galleon-consul or galleon-zookeeper"

heading "L. What galleon-zookeeper serves"
say "\$ galleonctl get --addr $GZK_XDS -o names"
zk_names | indent
say ""
say "\$ galleonctl get --addr $GZK_XDS -o yaml"
"$GALLEONCTL" get --addr "$GZK_XDS" -o yaml | yaml_item | indent
note "    One ServiceEntry per (interface, group, version): a readable name plus 10 hex digits of a"
note "    hash (lower-casing the interface is lossy), host <name>.default.dubbo; scheme dubbo gives"
note "    a TCP port named tcp-dubbo; weight and application/side/version become endpoint fields."

heading "M. What istiod holds: three registries"
serviceentry_rows | print_table
dubbo=$(dubbo_row)
[[ $(grep -c . <<<"$dubbo") -eq 1 ]] || fail "istiod holds $(grep -c . <<<"$dubbo") ServiceEntries with a host ending in .default.dubbo; want 1"
DUBBO_SE=$(field 1 <<<"$dubbo")
[[ "$DUBBO_SE" =~ ^default/org-apache-demo-greetingservice-1-0-0--[0-9a-f]{10}$ ]] ||
	fail "istiod's Dubbo ServiceEntry is named '$DUBBO_SE'; want default/org-apache-demo-greetingservice-1-0-0--<10 hex digits>"
[[ "$(field 2 <<<"$dubbo")" == "${DUBBO_SE#default/}.default.dubbo" ]] || fail "istiod's $DUBBO_SE has hosts '$(field 2 <<<"$dubbo")'"
[[ "$(field 3 <<<"$dubbo")|$(field 6 <<<"$dubbo")|$(field 4 <<<"$dubbo")|$(field 5 <<<"$dubbo")" == "20880/TCP|tcp-dubbo|3|10.50.0.1,10.50.0.2,10.50.0.3" ]] ||
	fail "istiod's $DUBBO_SE is '$dubbo'; want port 20880/TCP named tcp-dubbo and endpoints 10.50.0.1,10.50.0.2,10.50.0.3"
ok "$DUBBO_SE: host $(field 2 <<<"$dubbo"), port 20880/TCP tcp-dubbo, 3 endpoints ($(field 5 <<<"$dubbo"))"
read_counters 8
say "istiod (restarted) so far: $FULL8 full push(es), $EDS8 EDS update(s)"

# zk_reads: the reads galleon-zookeeper has sent to ZooKeeper so far (every op and result but
# its liveness probes, which go out on a timer while the connection is idle, not for a change).
zk_reads() {
	local body
	body=$(http_get "$GZK_HTTP" /metrics) || fail "galleon-zookeeper's /metrics does not answer"
	awk '/^galleon_zookeeper_requests_total[{ ]/ && !/op="probe"/ { n += $2 } END { printf "%d\n", n }' <<<"$body"
}

heading "N. A provider leaves: 10.50.0.3"
say "\$ zkCli: delete $(provider_node 10.50.0.3)"
reads0=$(zk_reads) || exit
t0=$(now)
listed=$(printf 'delete %s\nls %s\n' "$(provider_node 10.50.0.3)" "$ZK_PROVIDERS" | zk_cli | zk_ls_lines) ||
	fail "ZooKeeper's CLI failed (see $ZKCLI_LOG)"
want=$(for ip in 10.50.0.1 10.50.0.2; do urlencode "$(provider_url "$ip")"; done | LC_ALL=C sort)
[[ "$listed" == "$want" ]] || fail "ZooKeeper still lists under $ZK_PROVIDERS: '$listed'; want 10.50.0.1 and 10.50.0.2 (see $ZKCLI_LOG)"
t1=$(now)
dubbo_endpoints() { [[ "$(row "$DUBBO_SE" | field 5)" == "$1" ]]; }
wait_until 20 "istiod holds $DUBBO_SE with endpoints 10.50.0.1 and 10.50.0.2" dubbo_endpoints 10.50.0.1,10.50.0.2
wait_until 20 "istiod pushes the change" pushed_since "$PUSH8"
read_counters 9
ok "istiod has it $(elapsed "$t1") after the CLI returned ($(elapsed "$t0") with the CLI's JVM): endpoints $(row "$DUBBO_SE" | field 5)"
ok "full pushes $FULL8 -> $FULL9, EDS updates $EDS8 -> $EDS9: an endpoint-only (EDS) update, no full push"
((FULL9 == FULL8)) || fail "a provider leaving caused $((FULL9 - FULL8)) full push(es); want none"
((EDS9 > EDS8)) || fail "a provider leaving caused no EDS update"
reads=$(zk_reads) || exit
reads=$((reads - reads0))
ok "galleon-zookeeper sent $reads read to ZooKeeper for it (galleon_zookeeper_requests_total)"
((reads == 1)) || fail "galleon-zookeeper sent $reads reads to ZooKeeper for one provider leaving; want 1 (the providers list)"
note "    Its children watch on providers fired: it read that list again, nothing else."

heading "O. The adapter's ZooKeeper session expires while providers change"
say "    galleon-zookeeper's session $ZK_SESSION, as ZooKeeper lists its connection (cons):"
conn=$(zk_4lw cons | grep -F "sid=$ZK_SESSION," || true)
[[ -n "$conn" ]] || fail "ZooKeeper's cons does not list galleon-zookeeper's session $ZK_SESSION"
# shellcheck disable=SC2001 # leading blanks of each line
sed 's/^[[:space:]]*//' <<<"$conn" | indent
say "\$ kill -STOP $GZK_PID    ${DIM}# galleon-zookeeper: no more pings, its session times out${RESET}"
kill -STOP "$GZK_PID" || fail "cannot stop galleon-zookeeper (pid $GZK_PID)"
t0=$(now)
say "\$ zkCli: delete $(provider_node 10.50.0.2)"
say "         create $(provider_node 10.50.0.4)"
listed=$(printf 'delete %s\ncreate %s\nls %s\n' "$(provider_node 10.50.0.2)" "$(provider_node 10.50.0.4)" "$ZK_PROVIDERS" |
	zk_cli | zk_ls_lines) || fail "ZooKeeper's CLI failed (see $ZKCLI_LOG)"
want=$(for ip in 10.50.0.1 10.50.0.4; do urlencode "$(provider_url "$ip")"; done | LC_ALL=C sort)
[[ "$listed" == "$want" ]] || fail "ZooKeeper lists under $ZK_PROVIDERS: '$listed'; want 10.50.0.1 and 10.50.0.4 (see $ZKCLI_LOG)"
ok "ZooKeeper now lists 10.50.0.1 and 10.50.0.4 ($(elapsed "$t0") after the stop)"
session_gone() { local cons; cons=$(zk_4lw cons) && [[ -n "$cons" && "$cons" != *"sid=$ZK_SESSION,"* ]]; }
wait_until 30 "ZooKeeper expires session $ZK_SESSION (cons no longer lists it)" session_gone
ok "ZooKeeper expired session $ZK_SESSION $(elapsed "$t0") after the stop: cons no longer lists it"
[[ "$(row "$DUBBO_SE" | field 5)" == 10.50.0.1,10.50.0.2 ]] ||
	fail "istiod's $DUBBO_SE changed while galleon-zookeeper was stopped: '$(row "$DUBBO_SE")'"
say "    istiod still holds $(row "$DUBBO_SE" | field 5): the adapter has not heard of it yet"
say "\$ kill -CONT $GZK_PID"
kill -CONT "$GZK_PID" || fail "cannot resume galleon-zookeeper (pid $GZK_PID)"
t1=$(now)
wait_until 30 "istiod holds $DUBBO_SE with endpoints 10.50.0.1 and 10.50.0.4" dubbo_endpoints 10.50.0.1,10.50.0.4
wait_until 20 "istiod pushes the change" pushed_since "$PUSH9"
read_counters 10
ok "istiod has it $(elapsed "$t1") after galleon-zookeeper resumed: endpoints $(row "$DUBBO_SE" | field 5)"
relisted() { grep -q 'msg="ZooKeeper session expired: relisting' "$GZK_LOG"; }
wait_until 10 "galleon-zookeeper logs \"ZooKeeper session expired: relisting ...\"" relisted
NEW_SESSION=$(sed -n 's/.*msg="ZooKeeper session expired: relisting.* new_session=\(0x[0-9a-f]*\).*/\1/p' "$GZK_LOG" | tail -n 1)
[[ -n "$NEW_SESSION" && "$NEW_SESSION" != "$ZK_SESSION" ]] || fail "galleon-zookeeper logged no new session id after the expiry (got '$NEW_SESSION')"
ok "galleon-zookeeper relisted on a new session ($ZK_SESSION -> $NEW_SESSION)"
ok "full pushes $FULL9 -> $FULL10, EDS updates $EDS9 -> $EDS10: the relisting sent only the difference, EDS-only"
((FULL10 == FULL9)) || fail "the session expiry and its relisting caused $((FULL10 - FULL9)) full push(es); want none"
((EDS10 > EDS9)) || fail "the session expiry and its relisting caused no EDS update"
note "    Every watch died with the session; on the new one the adapter read /dubbo and each"
note "    interface's lists again and compared with what it had served: only endpoints differed."

heading "P. galleon-zookeeper's own view: its log and metrics"
LOG_LINES='msg="(ZooKeeper session|registry (un)?reachable|reconnected)'
say "\$ grep -E '$LOG_LINES' $GZK_LOG    ${DIM}# registry=, zookeeper=, root=, layout= left out${RESET}"
picked=$(grep -E "$LOG_LINES" "$GZK_LOG" |
	sed -E 's/ registry=zookeeper//; s/ zookeeper=[^ ]+ root=[^ ]+ layout=[^ ]+//' || true)
[[ -n "$picked" ]] || fail "galleon-zookeeper's log has no session lines"
indent <<<"$picked"
note "    Resumed, the client found its connection closed, connected again at once, learnt that"
note "    its session had expired and got a new one straight away (the adapter's host provider"
note "    pauses only once every server has been tried)."
if grep -q 'registry unreachable' <<<"$picked"; then
	note "    With no session for --zk-unreachable-after (1.5s) the adapter reported the registry"
	note "    unreachable and kept serving what it had read last: istiod saw nothing of the outage."
fi
say ""
say "\$ curl -s http://$GZK_HTTP/metrics | grep -E '^galleon_zookeeper_(session_events|requests|relists)_total'"
metrics=$(http_get "$GZK_HTTP" /metrics) || fail "galleon-zookeeper's /metrics does not answer"
picked=$(grep -E '^galleon_zookeeper_(session_events|requests|relists)_total' <<<"$metrics" || true)
indent <<<"$picked"
zk_metric() { awk -v n="$1" '$1 == n { printf "%d\n", $2; found = 1 } END { if (!found) print 0 }' <<<"$metrics"; }
(($(zk_metric 'galleon_zookeeper_session_events_total{event="expired"}') >= 1)) ||
	fail "galleon_zookeeper_session_events_total{event=\"expired\"} is not counted"
(($(zk_metric 'galleon_zookeeper_session_events_total{event="established"}') >= 2)) ||
	fail "galleon_zookeeper_session_events_total{event=\"established\"} counts fewer than 2 sessions"
grep -q '^galleon_zookeeper_requests_total{' <<<"$metrics" || fail "galleon-zookeeper exports no galleon_zookeeper_requests_total"
note "    Only children lists are read in the Dubbo layout (a provider is its znode's name); no_node:"
note "    the interface has no configurators znode (overrides), so it is watched through the interface."

# ---------------------------------------------------------------------------------------------
# The Eureka story.

heading "13. polaris-server 1.18.1, a Eureka API server (built from the Go module proxy)"
if ! "$SCRIPT_DIR/eureka.sh" path >/dev/null 2>&1; then
	note "    The first run builds polaris-server (about 2.5 min on 2 cores, ~330 MB of module source)"
	note "    and caches the binary; later runs reuse it."
fi
t0=$(now)
exec 4>&1
POLARIS=$({ "$SCRIPT_DIR/eureka.sh" build 2>&1 1>&3 3>&- | indent_live >&4; } 3>&1 | tail -n 1)
exec 4>&-
[[ -x "$POLARIS" ]] || fail "scripts/eureka.sh build did not produce a binary"
ok "$POLARIS ($(elapsed "$t0"))"
note "    PolarisMesh's server speaks Eureka's REST API (/eureka/apps, /apps/delta, status overrides):"
note "    no Netflix Eureka server can be built here without a Maven repository."

heading "14. Start two Eureka servers, A and B, on loopback and register ORDERS in both"
t0=$(now)
mkdir -p "$EUREKA_DIR"
: >"$HEARTBEATS"
EUREKA_A='' EUREKA_B=''
start_polaris A POLARIS_A_PID EUREKA_A "$POLARIS_A_LOG"
start_polaris B POLARIS_B_PID EUREKA_B "$POLARIS_B_LOG"
ok "polaris-server A (pid $POLARIS_A_PID): http://$EUREKA_A/eureka; B (pid $POLARIS_B_PID): http://$EUREKA_B/eureka ($(elapsed "$t0"))"
note "    Polaris servers do not replicate to each other as Eureka peers do: the demo makes every"
note "    change in both, which is what a Eureka cluster's replication would do."
say "\$ curl -X POST -H 'Content-Type: application/json' http://$EUREKA_A/eureka/apps/$EUREKA_APP -d '$(eureka_instance_json orders-1 10.70.0.1)'"
say "    ${DIM}and the same for orders-2 (10.70.0.2) and orders-3 (10.70.0.3), in A and in B${RESET}"
for srv in "$EUREKA_A" "$EUREKA_B"; do
	for i in 1 2 3; do eureka_register "$srv" "orders-$i" "10.70.0.$i"; done
done
export HEARTBEATS
export -f have http_call eureka_heartbeats
spawn HEARTBEATS_PID "$HEARTBEATS_LOG" bash -c eureka_heartbeats
ok "a heartbeat process (pid $HEARTBEATS_PID) renews the 6 registrations every 10 s (PUT /eureka/apps/$EUREKA_APP/<id>)"
listed_in() { [[ "$(eureka_hashcode "$1")" == "$2" ]]; }
for srv in "$EUREKA_A" "$EUREKA_B"; do
	wait_until 20 "http://$srv/eureka/apps lists 3 UP instances (apps__hashcode UP_3_)" listed_in "$srv" UP_3_
done
say "\$ curl http://$EUREKA_A/eureka/apps    ${DIM}# XML; instanceId, ipAddr:port and status of each${RESET}"
eureka_listing "$EUREKA_A" | indent
ok "A and B both list them, apps__hashcode UP_3_ ($(elapsed "$t0") since the first server's start)"

heading "15. Start galleon-eureka on both servers"
t0=$(now)
for attempt in 1 2 3; do
	GEUREKA_XDS=127.0.0.1:$(free_port)
	GEUREKA_HTTP=127.0.0.1:$(free_port)
	say "\$ galleon-eureka --eureka-urls http://$EUREKA_A/eureka,http://$EUREKA_B/eureka --eureka-poll-interval 500ms --debounce-quiet 20ms --listen $GEUREKA_XDS --http $GEUREKA_HTTP"
	spawn GEUREKA_PID "$GEUREKA_LOG" "${daemon_env[@]}" "$BIN_DIR/galleon-eureka" \
		--eureka-urls "http://$EUREKA_A/eureka,http://$EUREKA_B/eureka" --eureka-poll-interval 500ms \
		--debounce-quiet 20ms --listen "$GEUREKA_XDS" --http "$GEUREKA_HTTP" --shutdown-grace 1s
	geureka_ready() { http_get "$GEUREKA_HTTP" /readyz >/dev/null && port_in_use "${GEUREKA_XDS##*:}"; }
	wait_for 20 "galleon-eureka ready (it has fetched /eureka/apps from $EUREKA_A)" geureka_ready && break
	if ((attempt == 3)) || ! grep -q 'address already in use' "$GEUREKA_LOG"; then fail "$WAIT_ERR"; fi
	stop "$GEUREKA_PID"
done
serves_orders() { [[ "$(eureka_names)" == default/orders ]]; }
wait_until 20 "galleon-eureka serves default/orders" serves_orders
ok "galleon-eureka (pid $GEUREKA_PID) serves MCP on $GEUREKA_XDS, ready $(elapsed "$t0") after its start"
note "    It reads one server at a time, A first: the full listing once, then /apps/delta every"
note "    500 ms, checked against the server's apps__hashcode; B is only read if A fails."

heading "16. Restart istiod with four configSources: galleon-file, galleon-consul, galleon-zookeeper and galleon-eureka"
stop "$ISTIOD_PID"
ISTIOD_PID=''
printf 'configSources:\n- address: "xds://%s"\n- address: "xds://%s"\n- address: "xds://%s"\n- address: "xds://%s"\n' \
	"$GALLEON_XDS" "$GCONSUL_XDS" "$GZK_XDS" "$GEUREKA_XDS" >"$MESH"
say "    mesh config: $(tr '\n' ' ' <"$MESH" | sed 's/ $//')"
start_istiod "$LOG_DIR/istiod-eureka.log" "galleon-file, galleon-consul, galleon-zookeeper and galleon-eureka"
SERVED=$({ "$GALLEONCTL" get --addr "$GALLEON_XDS" -o names && consul_names && zk_names && eureka_names; } | LC_ALL=C sort)
wait_istiod_holds "galleon-file, galleon-consul, galleon-zookeeper or galleon-eureka"

heading "Q. What galleon-eureka serves"
say "\$ galleonctl get --addr $GEUREKA_XDS -o names"
eureka_names | indent
say ""
say "\$ galleonctl get --addr $GEUREKA_XDS -o yaml"
"$GALLEONCTL" get --addr "$GEUREKA_XDS" -o yaml | yaml_item | indent
note "    One ServiceEntry per application (--namespace default), host <app, lower case>.eureka;"
note "    UP instances are endpoints, their metadata (and what Polaris adds to it) endpoint labels;"
note "    OUT_OF_SERVICE, DOWN and STARTING ones are left out."

heading "R. What istiod holds: four registries"
serviceentry_rows | print_table
orders=$(row default/orders)
[[ "$(field 2 <<<"$orders")|$(field 3 <<<"$orders")|$(field 4 <<<"$orders")|$(field 5 <<<"$orders")" == "orders.eureka|8080/HTTP|3|10.70.0.1,10.70.0.2,10.70.0.3" ]] ||
	fail "istiod's default/orders is '$orders'; want host orders.eureka, port 8080/HTTP and endpoints 10.70.0.1,10.70.0.2,10.70.0.3"
ok "default/orders: host orders.eureka, port 8080/HTTP, 3 endpoints ($(field 5 <<<"$orders"))"
read_counters 11
say "istiod (restarted) so far: $FULL11 full push(es), $EDS11 EDS update(s)"

heading "S. An operator takes orders-2 out of service (a status override, in A and in B)"
for srv in "$EUREKA_A" "$EUREKA_B"; do
	say "\$ curl -X PUT 'http://$srv/eureka/apps/$EUREKA_APP/orders-2/status?value=OUT_OF_SERVICE'"
	http_call PUT "$srv" "/eureka/apps/$EUREKA_APP/orders-2/status?value=OUT_OF_SERVICE" >/dev/null ||
		fail "PUT http://$srv/eureka/apps/$EUREKA_APP/orders-2/status?value=OUT_OF_SERVICE failed"
done
t0=$(now)
orders_endpoints() { [[ "$(row default/orders | field 5)" == "$1" ]]; }
wait_until 20 "istiod holds default/orders with endpoints 10.70.0.1 and 10.70.0.3" orders_endpoints 10.70.0.1,10.70.0.3
wait_until 20 "istiod pushes the change" pushed_since "$PUSH11"
read_counters 12
ok "istiod has it $(elapsed "$t0") after the PUTs: endpoints $(row default/orders | field 5)"
ok "full pushes $FULL11 -> $FULL12, EDS updates $EDS11 -> $EDS12: an endpoint-only (EDS) update, no full push"
((FULL12 == FULL11)) || fail "an instance going OUT_OF_SERVICE caused $((FULL12 - FULL11)) full push(es); want none"
((EDS12 > EDS11)) || fail "an instance going OUT_OF_SERVICE caused no EDS update"
for srv in "$EUREKA_A" "$EUREKA_B"; do
	wait_until 20 "http://$srv/eureka/apps lists orders-2 OUT_OF_SERVICE" listed_in "$srv" OUT_OF_SERVICE_1_UP_2_
done
say "\$ curl http://$EUREKA_B/eureka/apps    ${DIM}# B says the same as A${RESET}"
eureka_listing "$EUREKA_B" | indent
note "    The next /apps/delta listed orders-2 MODIFIED with its new status: galleon-eureka changed"
note "    the endpoints alone, so istiod updated EDS without recomputing the mesh config."

heading "T. Server A crashes; B takes over"
say "\$ kill -9 $POLARIS_A_PID    ${DIM}# polaris-server A: no clean shutdown, connections refused from now on${RESET}"
pid=$POLARIS_A_PID
POLARIS_A_PID=''
kill_now "$pid"
t0=$(now)
a_gone() { ! alive "$1" && ! polaris_ready "$EUREKA_A"; }
wait_until 10 "polaris-server A (pid $pid) is gone" a_gone "$pid"
# The heartbeats renew in B only from now on (a rename: the loop reads the file whole each round).
grep -v "^$EUREKA_A " "$HEARTBEATS" >"$HEARTBEATS.new" || true
mv -f "$HEARTBEATS.new" "$HEARTBEATS"
say "\$ curl -X POST -H 'Content-Type: application/json' http://$EUREKA_B/eureka/apps/$EUREKA_APP -d '$(eureka_instance_json orders-4 10.70.0.4)'"
eureka_register "$EUREKA_B" orders-4 10.70.0.4
note "    orders-4 registers with B alone: only B can tell galleon-eureka about it."
# failed_over: istiod holds orders-4 through B, and never lost what it had meanwhile.
failed_over() {
	local eps
	eps=$(row default/orders | field 5)
	[[ ",$eps," == *,10.70.0.1,* && ",$eps," == *,10.70.0.3,* ]] ||
		fail "istiod's endpoints of default/orders are '$eps' after A crashed: it lost 10.70.0.1 or 10.70.0.3"
	[[ "$eps" == 10.70.0.1,10.70.0.3,10.70.0.4 ]]
}
wait_until 30 "istiod holds default/orders with endpoints 10.70.0.1, 10.70.0.3 and 10.70.0.4" failed_over
wait_until 20 "istiod pushes the change" pushed_since "$PUSH12"
read_counters 13
ok "istiod has it $(elapsed "$t0") after A crashed: endpoints $(row default/orders | field 5); it never held fewer meanwhile"
ok "full pushes $FULL12 -> $FULL13, EDS updates $EDS12 -> $EDS13: the failover and orders-4 were endpoint-only (EDS)"
((FULL13 == FULL12)) || fail "the failover to B and orders-4 joining caused $((FULL13 - FULL12)) full push(es); want none"
((EDS13 > EDS12)) || fail "the failover to B and orders-4 joining caused no EDS update"
note "    orders-2 stays out: B holds its OUT_OF_SERVICE override too."

heading "U. galleon-eureka's own view: its log and metrics"
LOG_LINES='msg="(Eureka server failed|reading another Eureka server|no Eureka server answers|Eureka server answers again|a Eureka server answers again)'
say "\$ grep -E '$LOG_LINES' $GEUREKA_LOG    ${DIM}# registry=, eureka= left out${RESET}"
picked=$(grep -E "$LOG_LINES" "$GEUREKA_LOG" | sed -E 's/ registry=eureka//; s/ eureka="?\[[^]]*\]"?//' || true)
[[ -n "$picked" ]] || fail "galleon-eureka logged nothing about server A failing"
indent <<<"$picked"
grep -q 'msg="reading another Eureka server"' <<<"$picked" || fail "galleon-eureka did not log that it reads another server"
say ""
say "\$ curl -s http://$GEUREKA_HTTP/metrics | grep -E '^galleon_eureka_(server_up|requests_total|full_fetches_total)'"
metrics=$(http_get "$GEUREKA_HTTP" /metrics) || fail "galleon-eureka's /metrics does not answer"
picked=$(grep -E '^galleon_eureka_(server_up|requests_total|full_fetches_total)' <<<"$metrics" || true)
indent <<<"$picked"
eureka_metric() { awk -v n="$1" '$1 == n { print $2; found = 1 } END { if (!found) print "none" }' <<<"$metrics"; }
up_a=$(eureka_metric "galleon_eureka_server_up{server=\"http://$EUREKA_A/eureka\"}")
up_b=$(eureka_metric "galleon_eureka_server_up{server=\"http://$EUREKA_B/eureka\"}")
[[ "$up_a" == 0 ]] || fail "galleon_eureka_server_up for A (http://$EUREKA_A/eureka) is $up_a; want 0"
[[ "$up_b" == 1 ]] || fail "galleon_eureka_server_up for B (http://$EUREKA_B/eureka) is $up_b; want 1"
ok_b=$(eureka_metric "galleon_eureka_requests_total{kind=\"delta\",result=\"ok\",server=\"http://$EUREKA_B/eureka\"}")
[[ "$ok_b" != none && "$ok_b" -gt 0 ]] || fail "galleon-eureka counts no delta answered by B (galleon_eureka_requests_total: $ok_b)"
ok "galleon_eureka_server_up: A $up_a, B $up_b; B has answered $ok_b /apps/delta requests"
full_all=$(awk '/^galleon_eureka_full_fetches_total[{ ]/ { n += $2 } END { printf "%d\n", n }' <<<"$metrics")
if [[ "$full_all" == "$(eureka_metric 'galleon_eureka_full_fetches_total{reason="start"}')" ]]; then
	note "    One full listing, at the start: B's deltas reconciled with what A had served (the same"
	note "    apps__hashcode), so the failover needed none."
else
	note "    A delta of B did not reconcile with what A had served (apps__hashcode): galleon-eureka"
	note "    fetched B's full listing, and served only the difference."
fi
say ""
say "\$ curl http://$GEUREKA_HTTP/debug/status"
status=$(http_get "$GEUREKA_HTTP" /debug/status) || fail "galleon-eureka's /debug/status does not answer"
indent <<<"$status"
tr -d ' \n' <<<"$status" | grep -q '"stale":false' || fail "galleon-eureka's /debug/status says it is stale"
tr -d ' \n' <<<"$status" | grep -qF "\"http://$EUREKA_A/eureka\":" || fail "galleon-eureka's /debug/status does not list A (http://$EUREKA_A/eureka) as degraded"
note "    A failed (unreachable): galleon-eureka moved to B at once and stays there, probing A in"
note "    the background with back-off; A is listed degraded, and what is served is not stale."

heading "Done"
SUCCESS=1
ok "every step checked, in $(elapsed "$START")"


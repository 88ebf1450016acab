#!/usr/bin/env bash
# Galleon demo: galleon-file, then galleon-consul, feed a real istiod, and every registry change
# shows up in istiod.
#
#   scripts/demo.sh            (or: make demo)
#   DEMO_KEEP=1 scripts/demo.sh   leave galleon-file, the Consul agent, galleon-consul and istiod
#                                 running afterwards
#
# It builds galleon-file, galleon-consul and galleonctl, builds (once, ~5 min) or reuses istiod
# 1.29.2 via scripts/istiod.sh, copies examples/file to a temporary registry directory, starts
# galleon-file on it and istiod with `configSources: [{address: xds://<galleon-file>}]`, and then
# tells the story: what Galleon serves (galleonctl), what istiod holds (/debug/configz), an
# instance that moves (an EDS-only update: no full push), a new port (one full push), a removed
# service.
# Then the Consul story: it builds (once, ~5-9 min) or reuses Consul 1.22.6 via scripts/consul.sh,
# starts one dev agent on loopback, registers services `web` (2 instances) and `payments` through
# the catalog HTTP API, starts galleon-consul on it and restarts istiod with both galleon-file and
# galleon-consul as configSources: a health check that turns critical and back (EDS-only updates:
# no full push), a deregistered service, galleon-consul's /debug/status and metrics.
# Every step is checked: the demo exits non-zero if anything does not happen as told.
# Processes are stopped on exit, failure or Ctrl-C (unless DEMO_KEEP=1 and all went well).
#
# Needs: go, and bash, awk, sed. Uses curl (else wget, else bash's /dev/tcp) for HTTP, and jq
# (else python3, else a small Go program) to read istiod's JSON. DEMO_JSON=jq|python3|go forces
# one of them.
# shellcheck disable=SC2016 # awk programs and sh -c scripts are single-quoted on purpose
set -Eeuo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
export GOWORK=off
export LC_NUMERIC=C # EPOCHREALTIME and awk: a decimal point, not a comma

# ---------------------------------------------------------------------------------------------
# Output.

if [[ -t 1 && -z "${NO_COLOR:-}" ]]; then
	BOLD=$'\e[1m' DIM=$'\e[2m' GREEN=$'\e[32m' RED=$'\e[31m' CYAN=$'\e[36m' RESET=$'\e[0m'
else
	BOLD='' DIM='' GREEN='' RED='' CYAN='' RESET=''
fi

now() { printf '%s\n' "${EPOCHREALTIME:-$SECONDS}"; }
START=$(now)
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

STEP=''
heading() {
	STEP=$1
	printf '\n%s━━ %s%s\n' "$BOLD$CYAN" "$1" "$RESET"
}
say() { printf '%s\n' "$*"; }
note() { printf '%s%s%s\n' "$DIM" "$*" "$RESET"; }
ok() { printf '  %s✔%s %s\n' "$GREEN" "$RESET" "$*"; }
indent() { sed 's/^/    /'; }
# indent_live: indent, line by line as it comes (sed may buffer when stdout is not a terminal).
indent_live() { local line; while IFS= read -r line; do printf '    %s\n' "$line"; done; }
have() { command -v "$1" >/dev/null 2>&1; }

# ---------------------------------------------------------------------------------------------
# Processes and clean-up.

DEMO_DIR=$(mktemp -d "${TMPDIR:-/tmp}/galleon-demo.XXXXXX")
BIN_DIR=$DEMO_DIR/bin
REG_DIR=$DEMO_DIR/registry
LOG_DIR=$DEMO_DIR/logs
mkdir -p "$BIN_DIR" "$REG_DIR" "$LOG_DIR"

GALLEON_PID='' ISTIOD_PID='' CONSUL_PID='' GCONSUL_PID=''
GALLEON_LOG=$LOG_DIR/galleon-file.log
ISTIOD_LOG=$LOG_DIR/istiod.log
CONSUL_LOG=$LOG_DIR/consul.log
GCONSUL_LOG=$LOG_DIR/galleon-consul.log
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
		fi
	fi
	stop "$ISTIOD_PID"
	stop "$GCONSUL_PID"
	stop "$GALLEON_PID"
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

alive() { kill -0 "$1" 2>/dev/null; }

# wait_for SECONDS WHAT CMD...: poll CMD (every 0.1 s) until it succeeds (return 0); return 1,
# with the reason in WAIT_ERR, after SECONDS or as soon as one of the demo's processes has exited.
WAIT_ERR=''
wait_for() {
	local timeout=$1 what=$2 deadline p
	shift 2
	deadline=$(awk -v n="$(now)" -v t="$timeout" 'BEGIN { printf "%.3f", n + t }')
	until "$@"; do
		for p in "galleon-file:$GALLEON_PID" "istiod:$ISTIOD_PID" "the consul agent:$CONSUL_PID" \
			"galleon-consul:$GCONSUL_PID"; do
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
#   namespace/name|host,host|port/PROTOCOL,...|endpoint count|address,address
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
		var ports, addrs []string
		for _, p := range c.Spec.Ports {
			ports = append(ports, fmt.Sprintf("%d/%s", p.Number, p.Protocol))
		}
		for _, e := range c.Spec.Endpoints {
			addrs = append(addrs, e.Address)
		}
		fmt.Printf("%s/%s|%s|%s|%d|%s\n", c.Metadata.Namespace, c.Metadata.Name,
			list(c.Spec.Hosts), list(ports), len(addrs), list(addrs))
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
			  ((.spec.endpoints // []) | map(.address) | list) ] | join("|")' <<<"$body"
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
                    lst([e.get("address", "") for e in eps])]))
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
# Free loopback ports: random ones below Linux's ephemeral range that nothing answers on. Another
# process may still take one first; the servers are then restarted on new ports.

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
USED_PORTS=' '
free_port() {
	local p
	while :; do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
		[[ "$USED_PORTS" == *" $p "* ]] && continue
		port_in_use "$p" && continue
		USED_PORTS+="$p "
		printf '%s\n' "$p"
		return
	done
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
  registry       $REG_DIR   edit, add or delete *.yaml files here
  galleon-file   pid $GALLEON_PID  MCP $GALLEON_XDS   http://$GALLEON_HTTP/debug/status   log $GALLEON_LOG
  consul agent   pid $CONSUL_PID  http://$CONSUL_HTTP/v1/catalog/services   log $CONSUL_LOG
  galleon-consul pid $GCONSUL_PID  MCP $GCONSUL_XDS   http://$GCONSUL_HTTP/debug/status   log $GCONSUL_LOG
  istiod         pid $ISTIOD_PID  http://$ISTIOD_MON/debug/configz   http://$ISTIOD_MON/metrics   log $ISTIOD_LOG

  Follow what galleon-file serves:    $GALLEONCTL watch --addr $GALLEON_XDS --delta
  Get it once:                        $GALLEONCTL get --addr $GALLEON_XDS -o yaml
  Follow what galleon-consul serves:  $GALLEONCTL watch --addr $GCONSUL_XDS --delta
  Use the Consul catalog:             CONSUL_HTTP_ADDR=$CONSUL_HTTP $CONSUL catalog services
                                      curl -X PUT http://$CONSUL_HTTP/v1/catalog/register -d '$(check_json vm-2 10.20.0.2 web-2 critical)'
  What istiod holds:                  curl -s http://$ISTIOD_MON/debug/configz | jq '.[] | select(.kind == "ServiceEntry") | .metadata.namespace + "/" + .metadata.name'
  Stop everything:                    kill $ISTIOD_PID $GCONSUL_PID $GALLEON_PID $CONSUL_PID; rm -rf $DEMO_DIR
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
cat <<EOF
${BOLD}Galleon demo${RESET}: Galleon's file adapter (galleon-file) serves the services of a directory of
YAML files to a real istiod 1.29.2 over MCP-over-xDS (istiod's configSources: xds://...).
We edit the files and watch each change arrive in istiod. Then Galleon's Consul adapter
(galleon-consul) does the same for a Consul 1.22.6 catalog: health checks fail and recover,
a service is deregistered.
EOF

heading "1. Build galleon-file, galleon-consul and galleonctl"
t0=$(now)
have go || fail "go is not on PATH (Go 1.26 is needed to build Galleon)"
(cd "$REPO_DIR" && go build -o "$BIN_DIR/" ./cmd/galleon-file ./cmd/galleon-consul ./cmd/galleonctl)
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
	spawn GALLEON_PID "$GALLEON_LOG" "${daemon_env[@]}" "$BIN_DIR/galleon-file" --dir "$REG_DIR" \
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

heading "Done"
SUCCESS=1
ok "every step checked, in $(elapsed "$START")"


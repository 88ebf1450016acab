#!/usr/bin/env bash
# Galleon demo: galleon-file feeds a real istiod, and every registry change shows up in istiod.
#
#   scripts/demo.sh            (or: make demo)
#   DEMO_KEEP=1 scripts/demo.sh   leave galleon-file and istiod running afterwards
#
# It builds galleon-file and galleonctl, builds (once, ~5 min) or reuses istiod 1.29.2 via
# scripts/istiod.sh, copies examples/file to a temporary registry directory, starts galleon-file
# on it and istiod with `configSources: [{address: xds://<galleon-file>}]`, and then tells the
# story: what Galleon serves (galleonctl), what istiod holds (/debug/configz), an instance that
# moves (an EDS-only update: no full push), a new port (one full push), a removed service.
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

GALLEON_PID='' ISTIOD_PID=''
GALLEON_LOG=$LOG_DIR/galleon-file.log
ISTIOD_LOG=$LOG_DIR/istiod.log
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
			printf '\n%sinterrupted%s: stopping galleon-file and istiod\n' "$BOLD" "$RESET" >&2
		else
			printf '\n%s✘ demo failed%s during "%s" (exit %d)\n' "$BOLD$RED" "$RESET" "${STEP:-start}" "$code" >&2
			tail_log galleon-file "$GALLEON_LOG"
			tail_log istiod "$ISTIOD_LOG"
		fi
	fi
	stop "$ISTIOD_PID"
	stop "$GALLEON_PID"
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
# with the reason in WAIT_ERR, after SECONDS or as soon as galleon-file or istiod has exited.
WAIT_ERR=''
wait_for() {
	local timeout=$1 what=$2 deadline
	shift 2
	deadline=$(awk -v n="$(now)" -v t="$timeout" 'BEGIN { printf "%.3f", n + t }')
	until "$@"; do
		if [[ -n "$GALLEON_PID" ]] && ! alive "$GALLEON_PID"; then
			WAIT_ERR="galleon-file exited while waiting for: $what"
			return 1
		fi
		if [[ -n "$ISTIOD_PID" ]] && ! alive "$ISTIOD_PID"; then
			WAIT_ERR="istiod exited while waiting for: $what"
			return 1
		fi
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
  registry     $REG_DIR   edit, add or delete *.yaml files here
  galleon-file pid $GALLEON_PID  MCP $GALLEON_XDS   http://$GALLEON_HTTP/debug/status   log $GALLEON_LOG
  istiod       pid $ISTIOD_PID  http://$ISTIOD_MON/debug/configz   http://$ISTIOD_MON/metrics   log $ISTIOD_LOG

  Follow what galleon-file serves:    $GALLEONCTL watch --addr $GALLEON_XDS --delta
  Get it once:                        $GALLEONCTL get --addr $GALLEON_XDS -o yaml
  What istiod holds:                  curl -s http://$ISTIOD_MON/debug/configz | jq '.[] | select(.kind == "ServiceEntry") | .metadata.name'
  Stop everything:                    kill $ISTIOD_PID $GALLEON_PID; rm -rf $DEMO_DIR
EOF
}

# ---------------------------------------------------------------------------------------------
cat <<EOF
${BOLD}Galleon demo${RESET}: Galleon's file adapter (galleon-file) serves the services of a directory of
YAML files to a real istiod 1.29.2 over MCP-over-xDS (istiod's configSources: xds://...).
We edit the files and watch each change arrive in istiod.
EOF

heading "1. Build galleon-file and galleonctl"
t0=$(now)
have go || fail "go is not on PATH (Go 1.26 is needed to build Galleon)"
(cd "$REPO_DIR" && go build -o "$BIN_DIR/" ./cmd/galleon-file ./cmd/galleonctl)
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
# The daemon reads GALLEON_* variables as flags: do not pass any on.
daemon_env=(env)
while IFS= read -r v; do daemon_env+=(-u "$v"); done < <(compgen -e | grep '^GALLEON_' || true)
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
for attempt in 1 2 3; do
	ISTIOD_GRPC=127.0.0.1:$(free_port)
	ISTIOD_HTTP=127.0.0.1:$(free_port)
	ISTIOD_MON=127.0.0.1:$(free_port)
	# As test/istiod runs it: no Kubernetes, no webhooks, config only from the xds:// source.
	spawn ISTIOD_PID "$ISTIOD_LOG" env -u KUBECONFIG -u KUBERNETES_SERVICE_HOST -u KUBERNETES_SERVICE_PORT \
		sh -c 'cd "$1" && shift && exec "$@"' sh "$DEMO_DIR" \
		"$PILOT" discovery --registries= --meshConfig="$MESH" --networksConfig="$NETWORKS" \
		--grpcAddr="$ISTIOD_GRPC" --httpAddr="$ISTIOD_HTTP" --httpsAddr= --secureGRPCAddr= \
		--monitoringAddr="$ISTIOD_MON" --ctrlz_port=0 --ctrlz_address=127.0.0.1 --shutdownDuration=1s
	# Its plain gRPC port opens once every config source has synced.
	istiod_synced() { http_get "$ISTIOD_MON" /debug/configz >/dev/null && port_in_use "${ISTIOD_GRPC##*:}"; }
	wait_for 60 "istiod synced with galleon-file" istiod_synced && break
	if ((attempt == 3)) || ! grep -q 'address already in use' "$ISTIOD_LOG"; then fail "$WAIT_ERR"; fi
	stop "$ISTIOD_PID"
done
ok "istiod (pid $ISTIOD_PID) synced: xDS for proxies on $ISTIOD_GRPC, debug on http://$ISTIOD_MON"

SERVED=$("$GALLEONCTL" get --addr "$GALLEON_XDS" -o names)
holds_all_served() { [[ "$(serviceentry_rows | field 1)" == "$SERVED" ]]; }
wait_until 30 "istiod's /debug/configz lists every service galleon-file serves" holds_all_served
# The initial sync ends with istiod's first push: start the story from a settled istiod.
first_push() { local n; n=$(metric $PUSHES) && ((n >= 1)); }
wait_until 30 "istiod's first push" first_push
ok "istiod holds all $(wc -l <<<"$SERVED") ServiceEntries ($(elapsed "$START") since the start)"

# ---------------------------------------------------------------------------------------------
heading "A. What Galleon serves (galleonctl speaks MCP-over-xDS like istiod)"
say "\$ galleonctl get --addr $GALLEON_XDS -o names"
indent <<<"$SERVED"
say ""
say "\$ galleonctl get --addr $GALLEON_XDS -o yaml    ${DIM}# first of the list${RESET}"
# The first item of the List, as a document of its own (awk reads to the end, so that galleonctl
# never writes to a closed pipe).
"$GALLEONCTL" get --addr "$GALLEON_XDS" -o yaml |
	awk 'done { next }
		/^items:/ { on = 1; next }
		on && /^- / { if (++n > 1) { done = 1; next } sub(/^- /, ""); print; next }
		on && n == 1 && /^  / { sub(/^  /, ""); print; next }
		on && n == 1 { done = 1 }' | indent

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

heading "Done"
SUCCESS=1
ok "every step checked, in $(elapsed "$START")"


#!/usr/bin/env bash
# The scale curve of docs/benchmarks.md: the core's BenchmarkInstanceChange (internal/serve/xds, Delta
# and SotW) at 1,000, 10,000 and 50,000 services x 10 instances, each with 10 and 100 sinks. Prints
# a markdown table to stdout, keeps the results as a TSV, and draws docs/benchmarks-scale.png from
# that TSV with scripts/tools/plot.
#
#   scripts/bench-scale.sh [OUT_DIR]        about 3.5 minutes on 2 cores (measured 2026-11-23)
#   SERVICES=1000 SINKS=10 OPS=5 PNG=/tmp/smoke.png scripts/bench-scale.sh /tmp/smoke
#
# Settings:
#   OUT_DIR (argument)  where scale.tsv, each run's raw output and the built binaries go; default a
#                       new temporary directory, kept (its path is printed)
#   SERVICES            services to run at, default "1000 10000 50000" (1 to 62750)
#   SINKS               sink counts to run with, default "10 100"
#   OPS                 ops (changes) of every run, default per run (below)
#   PNG                 the plot to write, default docs/benchmarks-scale.png
#
# Each run is one process of the benchmark binary: GALLEON_BENCH_SERVICES and GALLEON_BENCH_SINKS
# set, -test.bench 'InstanceChange/<delta|sotw>-<sinks>sinks$', -test.benchtime <ops>x; the same as
#   GALLEON_BENCH_SERVICES=50000 GALLEON_BENCH_SINKS=100 \
#       go test -run XXX -bench 'InstanceChange/delta-100sinks$' -benchtime 1000x ./internal/serve/xds/
# Ops per run: Delta 1000 (a change is ~1 KB per sink); SotW as many as move about 30 GB in all,
# from 5 to 300, since every change sends the full state (~0.95 KB per service) to every sink:
# 300 at 1,000 services and at 10,000 x 10, 30 at 10,000 x 100, 60 at 50,000 x 10 and only 6 at
# 50,000 x 100 (4.7 GB per change), whose p99 is then simply the slowest of 6. Go runs each benchmark once with
# one op before the counted run, so every run sets up its data set and sinks twice.
#
# Needs: go, awk; Linux (/proc, for the RSS and the load average).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/bench-lib.sh
source "$SCRIPT_DIR/bench-lib.sh"
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
export GOWORK=off
export LC_ALL=C # a decimal point in EPOCHREALTIME and awk

PROG=bench-scale
FAILED=0
STEP=
LOG_DIR=
SERVICES=${SERVICES:-1000 10000 50000}
SINKS=${SINKS:-10 100}
OPS=${OPS:-}
PNG=${PNG:-$REPO_DIR/docs/benchmarks-scale.png}

if (($# > 1)); then
	sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
fi
OUT_DIR=${1:-$(mktemp -d "${TMPDIR:-/tmp}/galleon-bench-scale.XXXXXX")}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
LOG_DIR=$OUT_DIR
TSV=$OUT_DIR/scale.tsv

for n in $SERVICES $SINKS ${OPS:+"$OPS"}; do
	[[ "$n" =~ ^[1-9][0-9]*$ ]] || fail "SERVICES, SINKS and OPS take whole numbers of at least 1, got '$n'"
done

# ops PROTOCOL SERVICES SINKS: the changes to measure in one run (see the header).
ops() {
	if [[ -n "$OPS" ]]; then
		printf '%s\n' "$OPS"
	elif [[ "$1" == delta ]]; then
		printf '1000\n'
	else
		awk -v s="$2" -v k="$3" 'BEGIN { n = int(30e9 / (s * k * 1000)); print (n < 5 ? 5 : n > 300 ? 300 : n) }'
	fi
}

# tsv_row FILE PROTOCOL SERVICES SINKS SECONDS: the TSV row of the benchmark's result line in FILE;
# fails when there is none.
tsv_row() {
	awk -v proto="$2" -v services="$3" -v sinks="$4" -v secs="$5" '
		$1 ~ ("^BenchmarkInstanceChange/" proto "-" sinks "sinks(-[0-9]+)?$") {
			for (i = 3; i < NF; i += 2) m[$(i + 1)] = $i
			printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", proto == "delta" ? "Delta" : "SotW",
				sinks, services, $2, m["p50-ms"], m["p99-ms"], m["bytes/sink"], m["B/op"], m["allocs/op"],
				m["rss-MB"], ("live-B/extra-sink" in m) ? m["live-B/extra-sink"] : "-", secs
			found = 1
		}
		END { exit !found }' "$1"
}

# table: the markdown table of the TSV, then for each sink count the Delta growth from the fewest
# services to the most, against the target of issue 14 (<= 2x), and the memory per extra sink.
table() {
	awk -F '\t' '
		function group(n,   s, out) {
			s = sprintf("%d", n)
			for (out = ""; length(s) > 3; s = substr(s, 1, length(s) - 3)) out = "," substr(s, length(s) - 2) out
			return s out
		}
		function size(b) { return b < 1e4 ? group(b) " B" : b < 1e6 ? sprintf("%.1f KB", b / 1e3) : sprintf("%.2f MB", b / 1e6) }
		function kb(b) { return b == "-" ? "-" : sprintf("%.0f KB", b / 1e3) }
		BEGIN {
			print "| services | sinks | protocol | ops | p50 ms | p99 ms | bytes per sink per change | allocated per change | allocs per change | RSS MiB | live memory per extra sink |"
			print "|---|---|---|---|---|---|---|---|---|---|---|"
		}
		NR > 1 {
			printf "| %s | %s | %s | %s | %.2f | %.2f | %s | %s | %s | %.0f | %s |\n", group($3), $2, $1, $4, $5, $6,
				size($7), size($8), group($9), $10, kb($11)
			key = $1 ", " $2 " sinks"
			if (!(key in lo)) { keys[++n] = key; lo[key] = hi[key] = $3; lo50[key] = hi50[key] = $5; lo99[key] = hi99[key] = $6 }
			if ($3 < lo[key]) { lo[key] = $3; lo50[key] = $5; lo99[key] = $6 }
			if ($3 > hi[key]) { hi[key] = $3; hi50[key] = $5; hi99[key] = $6 }
			mem[key] = mem[key] sep[key] group($3) " services " kb($11); sep[key] = ", "
		}
		END {
			print ""
			for (i = 1; i <= n; i++) {
				key = keys[i]
				if (key !~ /^Delta/ || hi[key] == lo[key]) continue
				r50 = hi50[key] / lo50[key]; r99 = hi99[key] / lo99[key]
				printf "%s, %s -> %s services: p50 x%.2f, p99 x%.2f; target <= 2x %s\n", key, group(lo[key]), group(hi[key]),
					r50, r99, r50 <= 2 && r99 <= 2 ? "met" : r50 <= 2 ? "met at p50, missed at p99" : "missed"
			}
			for (i = 1; i <= n; i++) printf "Live memory per extra sink, %s: %s\n", keys[i], mem[keys[i]]
		}' "$TSV"
}

step "Building the benchmark binary (internal/serve/xds) and the plotting tool" >&2
(cd "$REPO_DIR" && go test -c -o "$OUT_DIR/xds.test" ./internal/serve/xds/) || fail "go test -c ./internal/serve/xds/"
(cd "$REPO_DIR/scripts/tools/plot" && go build -o "$OUT_DIR/plot" .) || fail "building scripts/tools/plot"

started=$(date -u '+%Y-%m-%d %H:%M UTC')
load_before=$(loadavg)
t0=$(now)
printf 'protocol\tsinks\tservices\tops\tp50_ms\tp99_ms\tbytes_per_sink\tbytes_per_op\tallocs_per_op\trss_mib\tlive_bytes_per_extra_sink\tseconds\n' >"$TSV"
for services in $SERVICES; do
	for sinks in $SINKS; do
		for proto in delta sotw; do
			n=$(ops "$proto" "$services" "$sinks")
			raw=$OUT_DIR/$proto-$services-$sinks.txt
			step "$services services x $sinks sinks, $proto, ${n} ops (load $(loadavg))" >&2
			t=$(now)
			(cd "$REPO_DIR/internal/serve/xds" && GALLEON_BENCH_SERVICES=$services GALLEON_BENCH_SINKS=$sinks \
				"$OUT_DIR/xds.test" -test.run XXX -test.bench "InstanceChange/$proto-${sinks}sinks\$" \
				-test.benchtime "${n}x" -test.timeout 20m) >"$raw" 2>&1 ||
				fail "$services services x $sinks sinks, $proto: the benchmark failed (see $raw)"
			secs=$(secs "$t" "$(now)")
			grep '^Benchmark' "$raw" >&2 || true
			tsv_row "$raw" "$proto" "$services" "$sinks" "$secs" >>"$TSV" ||
				fail "$services services x $sinks sinks, $proto: no result line in $raw"
		done
	done
done
total=$(secs "$t0" "$(now)")

step "Plotting $PNG" >&2
"$OUT_DIR/plot" -in "$TSV" -out "$PNG" \
	-title "One instance change until every sink holds it ($started)" || fail "plotting $PNG"

printf 'Measured %s, load average %s before and %s after, %s s in all; %d CPUs, %s.\n' \
	"$started" "$load_before" "$(loadavg)" "$total" "$(nproc)" "$(go env GOVERSION)"
printf 'Ops per run: Delta as listed, SotW fewer where each change moves more (its p99 over few ops is the slowest op).\n\n'
table
printf '\nTSV and raw output: %s; plot: %s\n' "$OUT_DIR" "$PNG"

#!/usr/bin/env bash
# Runs every fuzz target for a while. Each parses or handles input from outside the process: a
# registry file, a Consul agent's answer, an xDS or legacy MCP client's requests.
#
#   scripts/fuzz.sh            each target for ${FUZZTIME:-30s}       (make fuzz)
#   FUZZTIME=3s scripts/fuzz.sh                                       (the short pass of make test)
#
# A failing input is written by go under the package's testdata/fuzz/<Target>/: commit it, and it
# runs as a regression test in every `go test` from then on (the seeds in the code run too).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

targets=(
	"./adapters/file FuzzParseFile"
	"./adapters/consul FuzzMapService"
	"./internal/xds FuzzRequests"
	"./internal/mcp FuzzRequest"
)
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	echo "fuzz: $name ($pkg) for ${FUZZTIME:-30s}" >&2
	"${GO:-go}" test -run '^$' -fuzz "^${name}\$" -fuzztime "${FUZZTIME:-30s}" "$pkg"
done

#!/usr/bin/env bash
# Prints how much Go source each large build of `make test` compiles that no earlier build has
# compiled (scripts/tools/buildshare): what a cold run pays for, and what a version bump of one
# tool's dependencies would add. Run it after changing a wrapper module under scripts/tools/;
# docs/benchmarks.md ("Cold make test: what the builds share") has the last table.
#
#   scripts/build-sharing.sh
#
# Asks the module proxy for modules not yet in the module cache (go list reads their source).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
export GOWORK=off GOFLAGS=-mod=readonly

kube="$REPO_DIR/scripts/tools/kubernetes"
# In the order make test builds them (Makefile: vet, lint, unit, e2e). The labels carry no
# versions: the pins live in consul.sh, istiod.sh and kube.sh. polaris-server is left out:
# eureka.sh builds it with a patched copy of its module (-modfile), which go list here would not see.
builds=(
	"galleon (unit tests)=$REPO_DIR=test:./..."
	"consul=$REPO_DIR/scripts/tools/consul=github.com/hashicorp/consul"
	"pilot-discovery (test/go.mod)=$REPO_DIR/test=istio.io/istio/pilot/cmd/pilot-discovery"
	"pilot-discovery (scripts/tools/istiod-1.30)=$REPO_DIR/scripts/tools/istiod-1.30=istio.io/istio/pilot/cmd/pilot-discovery"
	"test module (e2e)=$REPO_DIR/test=test:./..."
	"pilot-discovery (scripts/tools/kubernetes)=$kube=istio.io/istio/pilot/cmd/pilot-discovery"
	"kube-apiserver=$kube=k8s.io/kubernetes/cmd/kube-apiserver"
	"kubectl=$kube=k8s.io/kubernetes/cmd/kubectl"
	"etcd=$kube=./etcd"
	"helm=$kube=helm.sh/helm/v3/cmd/helm"
)
cd "$SCRIPT_DIR/tools/buildshare"
go run . "${builds[@]}"

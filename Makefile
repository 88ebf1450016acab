# Galleon: build, test and demo. `make help` lists the targets.
#
# Two tiers of tests: a plain `go test ./...` in the repository root is the fast one (no outside
# server, nothing installed; the real-server tests skip and say so), and `make test` runs
# everything: GALLEON_REAL_SERVERS=1 turns the Consul, Eureka, Nacos and ZooKeeper tests on, and istiod,
# the Kubernetes API server and the rest are built or installed first.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go
# The developer tool: provisioning (the servers the tests run, built from committed go.sums and
# cached outside the repository) and the steps of make test that are more than one go command.
DEVTOOL := $(GO) run ./internal/testing/devtool
# make is the tier with real servers: every test it runs may start Consul, polaris-server,
# ZooKeeper, istiod or a kube-apiserver (building or installing them first).
export GALLEON_REAL_SERVERS := 1
# A go.work above the repository must not change which versions any module builds with.
export GOWORK := off

# Every Go module of the repository, written once: vet, lint, deps and tidy loop over it, and the
# unit tests run in each but the two that hold the end-to-end tests (e2e) and the image writer
# (images-test).
MODULES := . bench docs/example-adapter scripts/tools/buildshare scripts/tools/images test test/legacymcp
UNIT_MODULES := $(filter-out test test/legacymcp scripts/tools/images,$(MODULES))

.PHONY: help build test unit vet lint e2e istiod kube consul eureka nacos zookeeper proto deps tidy fuzz fuzz-short images images-test fresh-machine demo
help: ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build every binary into bin/ (the adapters, galleonctl, and bench/'s galleon-load)
	$(GO) build -o bin/ ./cmd/...
	cd bench && $(GO) build -o ../bin/ ./cmd/galleon-load

deps: ## download every module the repository's Go modules need (MODULES), retrying requests the module proxy leaves unanswered
	$(DEVTOOL) deps $(MODULES)

vet: deps ## go vet in every module, the gofmt check and the generated-code check
	for m in $(MODULES); do (cd $$m && $(GO) vet ./...); done
	$(DEVTOOL) gofmt-check
	$(DEVTOOL) proto check

tidy: ## go mod tidy in every module (maintainers: asks the module proxy for more than a build does)
	for m in $(MODULES); do (cd $$m && GOFLAGS=-mod=mod $(GO) mod tidy); done

proto: ## regenerate proto/**/*.pb.go (installs protoc and the pinned plugins itself, cached outside the repo)
	$(DEVTOOL) proto generate

lint: deps ## staticcheck (pinned in scripts/tools/lint, checks in staticcheck.conf) on every module
	$(DEVTOOL) lint $(MODULES)

zookeeper: ## make sure ZooKeeper can be started (installs the Debian zookeeper package when missing; ~10 s)
	$(DEVTOOL) zookeeper classpath >/dev/null

# -timeout 25m: adapters/nacos, against a real polaris-server with the race detector, takes 555-572 s
# (CI runs, 2026-11), and go test's default of 10 minutes a package failed it once at 600 s.
unit: deps consul eureka nacos zookeeper ## unit and protocol tests of every module but the end-to-end ones, race detector on, the Consul, Eureka, Nacos and ZooKeeper tests against a real consul, polaris-server (its Eureka and Nacos APIs) and ZooKeeper (GALLEON_REAL_SERVERS=1)
	for m in $(UNIT_MODULES); do (cd $$m && $(GO) test -race -count=1 -timeout 25m ./...); done

# The istiod releases every e2e test runs against (docs/istiod-releases.md); 1.30-b01690e (the 1.30
# line as the module proxy serves it) and 1.31-dev start only with a Kubernetes API server, which
# the harness runs for them (test/kube).
E2E_ISTIOD_RELEASES ?= 1.29.2,1.30-b01690e,1.31-dev
# -parallel 4: the registry outage tests (a minute each, file and Consul, per release) are the
# only parallel tests there, and they spend their minute waiting; go test's default of one per
# core ran them two by two.

istiod: ## build and cache pilot-discovery 1.29.2, 1.30-b01690e and 1.31-dev from the Go module proxy (once; 3, 5 and 10 min cold on two cores)
	$(DEVTOOL) build istiod >/dev/null

kube: ## build and cache kube-apiserver, kubectl, etcd and helm from the Go module proxy (one module with istiod 1.31-dev, scripts/tools/kubernetes), and fetch the ServiceMonitor CRD (once)
	$(DEVTOOL) build kube >/dev/null

consul: ## build and cache consul 1.22.6 from the Go module proxy, outside the repo (once; ~9 min cold on two cores)
	$(DEVTOOL) build consul >/dev/null

eureka: ## build and cache polaris-server 1.18.1, the Eureka API server of the Eureka adapter's tests, from the Go module proxy, outside the repo (once; ~2.5 min cold)
	$(DEVTOOL) build polaris-server >/dev/null

nacos: eureka ## the Nacos API server of the Nacos adapter's tests: the same polaris-server (its service-nacos API, HTTP and gRPC)

e2e: deps istiod kube ## end-to-end and conformance tests against real istiods (E2E_ISTIOD_RELEASES, or GALLEON_ISTIOD_RELEASES), the chart on a real kube-apiserver, and the provisioning tool's failure paths
	GALLEON_ISTIOD_RELEASES=$${GALLEON_ISTIOD_RELEASES:-$(E2E_ISTIOD_RELEASES)} GO=$(GO) $(DEVTOOL) test-report test -count=1 -parallel 4 -timeout 30m ./...
	GO=$(GO) $(DEVTOOL) test-report test/legacymcp -count=1 ./...

fuzz: ## run every fuzz target of the product module (found in the source) for FUZZTIME (default 30s) each; a failing input lands in the package's testdata/fuzz: commit it
	GO=$(GO) $(DEVTOOL) fuzz

fuzz-short: deps ## a short pass of every fuzz target (3,000 inputs each), part of make test
	GO=$(GO) $(DEVTOOL) fuzz -fuzztime 3000x

images: ## one OCI image per adapter without a container engine: an OCI layout and a docker archive each, in <cache>/images or IMAGES_DIR (devtool images; deploy/README.md says how to push or load them)
	$(DEVTOOL) images $(IMAGES_DIR)

images-test: deps ## write the adapters' images and check them: user 65532, entrypoint, no shell, CA bundle, labels, size, same digest twice, the chart's default names, the binary runs from the image's files (part of make test)
	$(DEVTOOL) images test

test: vet lint unit fuzz-short images-test e2e ## every test: static analysis, unit, protocol, fuzz (short), the images, conformance and end-to-end

fresh-machine: ## rehearse a new user's first run: clone HEAD to a temp dir, run make demo and make test with empty Go and tool caches, print the time of each
	$(DEVTOOL) fresh-machine

demo: ## galleon-file, then galleon-consul on a Consul agent, then galleon-zookeeper on ZooKeeper (Dubbo providers), then galleon-eureka on two Eureka servers (polaris-server), then galleon-nacos on a Nacos API server (polaris-server, services registered with Nacos's official Go client), then galleon-fleet on the file directory and the Consul agent, feed a real istiod: see services, endpoint changes, a new port, a failing health check, removals, a ZooKeeper session expiry, an instance out of service, a Eureka server failover, a disabled Nacos instance, a new Nacos group, a host two registries have merged and a registry list edited live arrive (DEMO_KEEP=1 leaves it running)
	$(DEVTOOL) deps . test # the modules it builds, fetched under the stall watchdog (go run would wait forever on a request the proxy never answers)
	cd test && $(GO) run ./demo

# Galleon: build, test and demo. `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go

.PHONY: help build test unit vet lint e2e istiod kube consul eureka zookeeper proto deps fuzz fuzz-short images images-test
help: ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build every binary into bin/
	$(GO) build -o bin/ ./cmd/...

deps: ## download every module the three Go modules need, retrying requests the module proxy leaves unanswered (scripts/gofetch.sh)
	scripts/deps.sh

vet: deps ## go vet (both modules), gofmt check and generated-code check (scripts/proto.sh check)
	$(GO) vet ./...
	cd test && $(GO) vet ./...
	cd test/legacymcp && $(GO) vet ./...
	cd docs/example-adapter && $(GO) vet ./...
	cd scripts/tools/buildshare && $(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	scripts/proto.sh check

proto: ## regenerate proto/**/*.pb.go (installs protoc and the pinned plugins itself, cached outside the repo)
	scripts/proto.sh generate

lint: deps ## staticcheck on every module, pinned in scripts/tools/lint (built once from the Go module proxy and cached)
	scripts/lint.sh

zookeeper: ## make sure ZooKeeper can be started (installs the Debian zookeeper package when missing; ~10 s)
	scripts/zookeeper.sh classpath >/dev/null

unit: deps consul eureka zookeeper ## unit and protocol tests of the main module, of the example adapter (docs/example-adapter, a module of its own) and of the build-sharing model (scripts/tools/buildshare), race detector on (the Consul, Eureka and ZooKeeper adapters' tests use a real consul, polaris-server and ZooKeeper)
	$(GO) test -race -count=1 ./...
	cd docs/example-adapter && $(GO) test -race -count=1 ./...
	cd scripts/tools/buildshare && $(GO) test -count=1 ./...

# The istiod releases every e2e test runs against (docs/istiod-releases.md); 1.30-b01690e (the 1.30
# line as the module proxy serves it) and 1.31-dev start only with a Kubernetes API server, which
# the harness runs for them (test/kube).
E2E_ISTIOD_RELEASES ?= 1.29.2,1.30-b01690e,1.31-dev
# -parallel 4: the registry outage tests (a minute each, file and Consul, per release) are the
# only parallel tests there, and they spend their minute waiting; go test's default of one per
# core ran them two by two.

istiod: ## build and cache pilot-discovery 1.29.2, 1.30-b01690e and 1.31-dev from the Go module proxy (once; 3, 5 and 10 min cold on two cores)
	scripts/istiod.sh build >/dev/null
	scripts/istiod.sh build 1.30-b01690e >/dev/null
	scripts/istiod.sh build 1.31-dev >/dev/null

kube: ## build and cache kube-apiserver, kubectl, etcd and helm from the Go module proxy (one module with istiod 1.31-dev, scripts/tools/kubernetes), and fetch the ServiceMonitor CRD (once)
	scripts/kube.sh build >/dev/null
	scripts/kube.sh crds >/dev/null

consul: ## build and cache consul 1.22.6 from the Go module proxy, outside the repo (once; ~9 min cold on two cores)
	scripts/consul.sh build >/dev/null

eureka: ## build and cache polaris-server 1.18.1, the Eureka API server of the Eureka adapter's tests, from the Go module proxy, outside the repo (once; ~2.5 min cold)
	scripts/eureka.sh build >/dev/null

e2e: deps istiod kube ## end-to-end and conformance tests against real istiods (E2E_ISTIOD_RELEASES, or GALLEON_ISTIOD_RELEASES), the chart on a real kube-apiserver, and the set-up scripts' failure paths
	GALLEON_ISTIOD_RELEASES=$${GALLEON_ISTIOD_RELEASES:-$(E2E_ISTIOD_RELEASES)} GO=$(GO) scripts/test-report.sh test -count=1 -parallel 4 ./...
	GO=$(GO) scripts/test-report.sh test/legacymcp -count=1 ./...

fuzz: ## run every fuzz target for FUZZTIME (default 30s) each; a failing input lands in the package's testdata/fuzz: commit it
	GO=$(GO) scripts/fuzz.sh

fuzz-short: deps ## a short pass of every fuzz target (3,000 inputs each), part of make test
	FUZZTIME=3000x GO=$(GO) scripts/fuzz.sh

images: ## one OCI image per adapter without a container engine: an OCI layout and a docker archive each, in $(scripts/cache-dir.sh dir)/images or IMAGES_DIR (scripts/images.sh; deploy/README.md says how to push or load them)
	scripts/images.sh $(IMAGES_DIR)

images-test: deps ## write the adapters' images and check them: user 65532, entrypoint, no shell, CA bundle, labels, size, same digest twice, the chart's default names, the binary runs from the image's files (part of make test)
	scripts/images.sh test

test: vet lint unit fuzz-short images-test e2e ## every test: static analysis, unit, protocol, fuzz (short), the images, conformance and end-to-end

.PHONY: fresh-machine
fresh-machine: ## rehearse a new user's first run: clone HEAD to a temp dir, run make demo and make test with empty Go and tool caches, print the time of each
	scripts/fresh-machine.sh

.PHONY: demo
demo: ## galleon-file, then galleon-consul on a Consul agent, then galleon-zookeeper on ZooKeeper (Dubbo providers), then galleon-eureka on two Eureka servers (polaris-server), feed a real istiod: see services, endpoint changes, a new port, a failing health check, removals, a ZooKeeper session expiry, an instance out of service and a Eureka server failover arrive (DEMO_KEEP=1 leaves it running)
	scripts/demo.sh

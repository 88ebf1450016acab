# Galleon: build, test and demo. `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go

.PHONY: help build test unit vet fmt-check
help: ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build every binary into bin/
	$(GO) build -o bin/ ./cmd/...

vet: ## go vet and gofmt check
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

unit: ## unit and protocol tests of the main module, race detector on
	$(GO) test -race -count=1 ./...

test: vet unit ## every test

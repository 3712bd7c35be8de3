# rigger — build, test and demo. `make help` lists the targets.
#
# RIGGER_CACHE holds what is slow to make and safe to keep between runs on one
# machine (the Kubernetes binaries built from the Go module proxy, image
# tarballs). It lives outside the repository so that a fresh clone reuses it.

SHELL        := /bin/bash
GO           ?= go
BIN          := bin/rigger
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS      := -s -w -X main.version=$(VERSION)
RIGGER_CACHE ?= /var/cache/rigger
FUZZTIME     ?= 20s
export RIGGER_CACHE

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build bin/rigger (static)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/rigger

.PHONY: prereqs
prereqs: ## install what the sandbox and the tests need (does nothing when present)
	@bash hack/install-prereqs.sh

.PHONY: lint
lint: ## go vet and gofmt
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

.PHONY: test
test: prereqs lint build ## every test, with -race, the real sandbox parts and a short fuzz run
	RIGGER_E2E=1 $(GO) test -race -timeout 20m ./...
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME) ./spec

.PHONY: bench
bench: ## benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...

.PHONY: demo
demo: prereqs build ## validate and show the example clusters
	@for f in examples/clusters/*/cluster.yml; do \
		echo "==> $$f"; $(BIN) validate -f $$f || exit 1; \
	done
	@echo; echo "==> fully defaulted examples/clusters/sandbox/cluster.yml"
	@$(BIN) config defaults -f examples/clusters/sandbox/cluster.yml

.PHONY: clean
clean: ## remove build outputs
	rm -rf bin

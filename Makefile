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
# The fuzz targets (package:target; docs/testing.md says what each is fed and
# how to fuzz one for longer): `make fuzz` runs each for FUZZTIME. `make test`
# runs their seeds and saved inputs as tests, without fuzzing.
FUZZTIME ?= 5s
FUZZ_TARGETS := ./spec:FuzzLoad \
	./spec/sopsfile:FuzzDecrypt \
	./sandbox:FuzzParseState \
	./reconcile/etcdsnap:FuzzParseName \
	./reconcile/etcdsnap:FuzzParseSidecar \
	./gitops/webhook:FuzzHandler \
	./gitops:FuzzParseStatus \
	./gitops:FuzzSameMeaning \
	./reconcile/addons:FuzzDecodeManifest \
	./reconcile/addons:FuzzDecodeInventory \
	./reconcile/plan:FuzzSpecReason \
	./reconcile/plan:FuzzReadSaved \
	./reconcile/dockerop:FuzzReadTar \
	./reconcile/pki:FuzzFromFiles \
	./reconcile/kubenode:FuzzParseState \
	./reconcile/health:FuzzParseEtcdHealth \
	./reconcile/etcdsnap:FuzzVerifyOutput \
	./transport/sshtun:FuzzCAPatterns \
	./reconcile/statedir:FuzzReadJSON \
	./transport/agenttun:FuzzReadFrame \
	./transport/agenttun:FuzzJoinRequest \
	./transport/agenttun:FuzzTunnelFrames \
	./reconcile/rkestate:FuzzParse \
	./reconcile/secretsenc:FuzzParse \
	./gitops/notify:FuzzParseTarget \
	./gitops/notify:FuzzRetryAfter
# Each new interesting input is minimized for at most this long (Go's default,
# 60s, spends a short fuzz run minimizing the large seed files instead of fuzzing).
FUZZMINIMIZE ?= 1s
# How the test and fuzz binaries are linked: without DWARF (-w: stack traces and
# race reports do not need it; half the link time) and by Go's own linker
# (-linkmode=internal). k8s.io/kubectl's drain brings in kustomize's plugin
# loader, and with it the cgo package plugin, for which Go links with the system
# linker by default: 10 s instead of 7 for a -race test binary, 38 s instead of 7
# for a fuzz one.
TESTLDFLAGS := -w -linkmode=internal
# The garbage collector's target of the builds and the tests (docs/testing.md):
# the compilers, linkers and vet allocate much and keep little, and collecting
# a quarter as often takes 15 to 20 % less of their CPU; the -race test
# binaries collect less often too. Not for the benchmarks, which measure
# memory as rigger runs it.
BUILDGOGC ?= 400
export RIGGER_CACHE

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build bin/rigger (static)
	GOGC=$(BUILDGOGC) CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/rigger

.PHONY: image
image: build ## build the image rigger/rigger:dev (bin/rigger and the CA bundle) with the local Docker engine
	cp /etc/ssl/certs/ca-certificates.crt bin/ca-certificates.crt
	docker build -t rigger/rigger:dev .

.PHONY: prereqs
prereqs: ## install what the sandbox and the tests need (does nothing when present)
	@bash hack/install-prereqs.sh
	@bash hack/install-versitygw.sh >/dev/null

.PHONY: lint
lint: fmtcheck ## go vet and gofmt
	$(GO) vet ./...

.PHONY: fmtcheck
fmtcheck: ## fail when gofmt would change a file
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

.PHONY: test
test: prereqs fmtcheck build rke-render sops kubectl ## every test, with -race and every go vet check, the real sandbox parts and every fuzz target's seeds
	@# Sandboxes left by a killed run go first; the tests' own go after, pass or fail.
	$(BIN) sandbox down --all
	@# A cold cache is filled here (Kubernetes and the add-on programs from the Go module
	@# proxy, about 30 minutes on 2 cores), outside the tests' time limits.
	$(BIN) sandbox images >/dev/null
	@# go test vets each package it tests with every go vet check (-vet=all), from the same
	@# -race builds it tests: `make lint`'s go vet would build the module once more. The
	@# packages without tests are vetted here, first. TESTLDFLAGS says how the test binaries
	@# are linked.
	GOGC=$(BUILDGOGC) $(GO) vet -race $$($(GO) list -f '{{if not (or .TestGoFiles .XTestGoFiles)}}{{.ImportPath}}{{end}}' ./...)
	@# testtimes prints what go test prints without -v, then the ten slowest packages and
	@# tests (docs/testing.md: the budget), and last the failed tests with the last messages
	@# each logged; bin/test.json keeps the whole stream, every subtest's time and log included.
	$(GO) build -o bin/testtimes ./hack/testtimes
	@# nodebin's in-place upgrade runs the test binary as rigger's own, which a -race
	@# binary (linked dynamically) cannot stand for: it runs here without -race.
	GOGC=$(BUILDGOGC) CGO_ENABLED=0 $(GO) test -count=1 -run '^TestUpgradeInPlace$$' ./internal/nodebin
	set -o pipefail; GOGC=$(BUILDGOGC) RIGGER_E2E=1 RIGGER_COLD_RUNS=$(TEST_COLD_RUNS) RIGGER_RKE_RENDER=$(CURDIR)/bin/rke-render RIGGER_SOPS=$(SOPS_BIN) RIGGER_KUBECTL=$(KUBECTL_BIN) $(GO) test -json -vet=all -race -ldflags='$(TESTLDFLAGS)' -count=1 -p 3 -timeout 40m $(if $(TESTSKIP),-skip '$(TESTSKIP)') $(SLOW_PACKAGES) ./... 2>&1 | tee bin/test.json | bin/testtimes -top 10; \
	  rc=$$?; $(BIN) sandbox down --all || rc=1; exit $$rc

# go test starts packages in the order it is given them, three at a time (-p 3:
# with two, the two cores were 44 % idle, the sandbox tests waiting on their
# clusters; docs/testing.md): the longest first (make test's own summary of
# 2026-12-06), so that no long package starts last and runs alone while the
# other cores idle. A package missing here only starts later.
SLOW_PACKAGES = ./reconcile ./reconcile/certrotate ./reconcile/etcdsnap ./reconcile/coldconverge ./cmd/rigger/incluster \
  ./cmd/rigger ./gitops ./reconcile/kubenode ./reconcile/secretsenc ./reconcile/dockerop

# make test TESTSKIP=regexp: the tests (go test -skip) another target of the same run
# runs anyway.
TESTSKIP ?=

# make test TEST_COLD_RUNS=N: N cold converges (TestColdConverges, as make test-cold
# makes them) in ./reconcile/coldconverge's slot, beside the other sandbox packages,
# whose load keeps the cores busy in place of test-cold's hog (.ci/run: 3). None by default.
TEST_COLD_RUNS ?= 0

# The Kubernetes versions past the sandbox's default that TestUpgradeSandbox
# upgrades to, one minor at a time (make test-road, make bench).
UPGRADE_VERSIONS = v1.33.13,v1.34.4

# The newest minor version's step, which `make test-long` runs too
# (TestNewestMinorSandbox): the last two of sandbox.KubeReleases.
NEWEST_VERSIONS = v1.36.3,v1.37.2

# What make test-long builds: RKE's next minor (TestRKEUpSandbox, and the
# etcd 3.5 TestNewestMinorSandbox starts on) and the newest minor's step.
LONG_VERSIONS = v1.33.13,$(NEWEST_VERSIONS)
# make bench: which benchmarks (a go test -bench pattern), and where their
# output and tables go.
BENCH     ?= .
BENCH_OUT ?= bin/bench

# RKE v1.8.14's modules, for the tests that run RKE's own code to compare rigger with
# it (hack/rke-render): without them in the module cache those tests skip. Built once
# for the packages that run it (RIGGER_RKE_RENDER), not once by each.
.PHONY: rke-render
rke-render:
	cd hack/rke-render && $(GO) mod download && GOGC=$(BUILDGOGC) GOFLAGS=-mod=readonly $(GO) build -ldflags='$(TESTLDFLAGS)' -o $(CURDIR)/bin/rke-render .

# The real sops CLI (hack/sops: getsops/sops/v3's cmd/sops from the Go module proxy), for the
# tests that check that rigger reads what sops writes (RIGGER_SOPS; without it they skip, and
# fail with RIGGER_E2E=1). Built once into RIGGER_CACHE, named by hack/sops/go.sum's hash, so
# that a second run, or a fresh clone, does not build it again.
SOPS_BIN = $(RIGGER_CACHE)/sops/sops-$(shell sha256sum hack/sops/go.sum | cut -c1-16)
.PHONY: sops
sops:
	@test -x $(SOPS_BIN) || { mkdir -p $(RIGGER_CACHE)/sops && cd hack/sops && $(GO) mod download && \
	  GOGC=$(BUILDGOGC) CGO_ENABLED=0 GOFLAGS=-mod=readonly $(GO) build -trimpath -ldflags '-s -w' -o $(SOPS_BIN).tmp github.com/getsops/sops/v3/cmd/sops && \
	  mv $(SOPS_BIN).tmp $(SOPS_BIN); }

# kubectl (hack/kubectl-build: k8s.io/kubernetes' cmd/kubectl from the Go module proxy), for
# the test that installs rigger serve in a cluster with `kubectl apply -k` (RIGGER_KUBECTL;
# without it that test builds it into the same place). Built once into RIGGER_CACHE, named by
# its go.sum's hash.
KUBECTL_VERSION = v1.32.13
KUBECTL_BIN = $(RIGGER_CACHE)/kubectl/kubectl-$(KUBECTL_VERSION)-$(shell sha256sum hack/kubectl-build/$(KUBECTL_VERSION)/go.sum | cut -c1-16)
.PHONY: kubectl
kubectl:
	@test -x $(KUBECTL_BIN) || { mkdir -p $(RIGGER_CACHE)/kubectl && cd hack/kubectl-build/$(KUBECTL_VERSION) && $(GO) mod download && \
	  GOGC=$(BUILDGOGC) CGO_ENABLED=0 GOWORK=off GOFLAGS='-mod=readonly -buildvcs=false' $(GO) build -trimpath \
	  -ldflags '-s -w -X k8s.io/component-base/version.gitVersion=$(KUBECTL_VERSION)' -o $(KUBECTL_BIN).tmp k8s.io/kubernetes/cmd/kubectl && \
	  mv $(KUBECTL_BIN).tmp $(KUBECTL_BIN); }

# RKE v1.8.14's own rke binary (github.com/rancher/rke, built inside hack/rke-render's module,
# whose replace lines go install refuses), for the test that runs a real `rke up` and adopts
# its cluster (RIGGER_RKE; without it that test builds it into the same place). Built once into
# RIGGER_CACHE, named by that go.sum's hash.
RKE_VERSION = v1.8.14
RKE_BIN = $(RIGGER_CACHE)/rke/rke-$(RKE_VERSION)-$(shell sha256sum hack/rke-render/go.sum | cut -c1-16)
.PHONY: rke
rke:
	@test -x $(RKE_BIN) || { mkdir -p $(RIGGER_CACHE)/rke && cd hack/rke-render && $(GO) mod download && \
	  GOGC=$(BUILDGOGC) CGO_ENABLED=0 GOWORK=off GOFLAGS='-mod=readonly -buildvcs=false' $(GO) build -trimpath \
	  -ldflags '-s -w -X main.VERSION=$(RKE_VERSION)' -o $(RKE_BIN).tmp github.com/rancher/rke && \
	  mv $(RKE_BIN).tmp $(RKE_BIN); }

# What make test-long needs beyond make test's: the other Kubernetes versions (about 6 to 10
# minutes each on a cold cache) and the stand-ins for RKE's images, outside the tests' time limits.
.PHONY: long-images
long-images: prereqs build rke kubectl ## build the images make test-long needs (other Kubernetes versions, RKE's stand-ins) into the cache
	$(BIN) sandbox images --kubernetes $(LONG_VERSIONS) --rke --kubectl $(KUBECTL_BIN) >/dev/null

.PHONY: test-long
test-long: long-images rke-render ## the long sandbox tests: rigger's flags against every version's binaries built, RKE's own rke up adopted and upgraded to 1.33 under load, the newest minor's step under load (from etcd 3.5), etcd 3.5 to 3.7 on one data directory, serve upgrading the cluster it runs in
	GOGC=$(BUILDGOGC) RIGGER_E2E=1 RIGGER_LONG=1 RIGGER_RKE_RENDER=$(CURDIR)/bin/rke-render RIGGER_RKE=$(RKE_BIN) RIGGER_KUBECTL=$(KUBECTL_BIN) \
	  $(GO) test -race -ldflags='$(TESTLDFLAGS)' -count=1 -p 3 -timeout 60m \
	  -run '^(TestFlagsAgainstBinaries|TestNewestMinorSandbox|TestRKEUpSandbox|TestSnapshotLogsRealEtcd|TestServeUpgradesItsClusterSandbox)$$' -v \
	  ./reconcile/desired ./reconcile ./cmd/rigger/rkeup ./reconcile/etcdmember ./cmd/rigger/incluster; rc=$$?; \
	$(BIN) sandbox down --name test53 || rc=1; $(BIN) sandbox down --name test51 || rc=1; $(BIN) sandbox down --name test44 || rc=1; \
	if [ $$rc -ne 0 ]; then echo "make test-long FAILED: see the --- FAIL lines above"; fi; exit $$rc

# The whole upgrade road past RKE, one minor at a time (make test-road).
ROAD_VERSIONS = $(UPGRADE_VERSIONS),v1.35.4,v1.36.3,v1.37.2

.PHONY: test-road
test-road: prereqs build ## the whole upgrade road under load, RKE's 1.32 to 1.37 one minor at a time, exec, port-forward and logs checked after each step, and rigger's flags against every version's binaries (docs/operations.md)
	@# Kubernetes 1.34 and 1.35 besides test-long's versions (about 7 to 10 minutes each on a cold cache).
	$(BIN) sandbox images --kubernetes $(ROAD_VERSIONS) >/dev/null
	GOGC=$(BUILDGOGC) RIGGER_E2E=1 RIGGER_LONG=1 RIGGER_ROAD=1 $(GO) test -race -ldflags='$(TESTLDFLAGS)' -count=1 -p 1 -timeout 90m \
	  -run '^(TestFlagsAgainstBinaries|TestUpgradeSandbox)$$' -v ./reconcile/desired ./reconcile; rc=$$?; \
	$(BIN) sandbox down --name test36 || rc=1; \
	if [ $$rc -ne 0 ]; then echo "make test-road FAILED: see the --- FAIL lines above"; fi; exit $$rc

# How many cold converges `make test-cold` makes in a row (.ci/run's make test makes three).
COLD_RUNS ?= 10

.PHONY: test-cold
test-cold: prereqs build ## COLD_RUNS cold converges of the example cluster on fresh sandbox nodes, one core kept busy; each must succeed first time
	$(BIN) sandbox images >/dev/null
	GOGC=$(BUILDGOGC) RIGGER_E2E=1 RIGGER_COLD_RUNS=$(COLD_RUNS) $(GO) test -count=1 -timeout 150m -run '^TestColdConverges$$' -v ./reconcile/coldconverge; rc=$$?; $(BIN) sandbox down --name test29 || rc=1; \
	if [ $$rc -ne 0 ]; then echo "make test-cold FAILED: the run table and the first failing run's timeline are above (--- FAIL lines)"; fi; exit $$rc

.PHONY: fuzz
fuzz: ## a short fuzz run of every fuzz target (FUZZTIME each; not part of make test)
	@GO=$(GO) TESTLDFLAGS='$(TESTLDFLAGS)' bash hack/fuzz.sh $(FUZZMINIMIZE) $(foreach t,$(FUZZ_TARGETS),$(FUZZTIME):$(t))

.PHONY: chaos
chaos: prereqs build ## the chaos suite: kill -9, engines stopped, partitions, git away, on a sandbox; prints a table (docs/reliability.md)
	$(BIN) sandbox images >/dev/null
	RIGGER_E2E=1 RIGGER_CHAOS=1 $(GO) test -count=1 -timeout 60m -run '^TestChaosSandbox$$' -v ./gitops; rc=$$?; $(BIN) sandbox down --name test22 || rc=1; exit $$rc

.PHONY: bench
bench: prereqs build ## benchmarks, those against sandbox nodes included (as root)
	@# BenchmarkUpgrade upgrades to the next minor version: its images, outside the benchmarks' time.
	$(BIN) sandbox images --kubernetes $(UPGRADE_VERSIONS) >/dev/null
	@# One package at a time (-p 1): each sandbox benchmark has the machine to itself.
	@# ./... includes BenchmarkScaleSimulated (reconcile/simnode): up to 1,000
	@# simulated nodes on 127.0.x.y:22022, in a child process (make bench-scale runs it alone), and
	@# BenchmarkServeSimulated (gitops): one serve following 100 clusters of 3 simulated
	@# nodes on 127.0.x.y:22322, and BenchmarkServeSimulatedPriority, its fleet on :22328 (make bench-serve runs both alone), and BenchmarkServeHostileNodes: serve
	@# under every attack of a node at once, nodes on 127.0.x.y:22324 (make bench-hostile runs it alone).
	@# The raw output goes to $(BENCH_OUT).txt, the tables of docs/BENCHMARKS.md to $(BENCH_OUT).md.
	RIGGER_E2E=1 RIGGER_BIN=$(CURDIR)/$(BIN) $(GO) test -p 1 -run '^$$' -bench '$(BENCH)' -benchmem -timeout 60m ./... | tee $(BENCH_OUT).txt; \
		rc=$${PIPESTATUS[0]}; $(BIN) sandbox down --all || rc=1; \
		$(GO) run ./hack/benchtable < $(BENCH_OUT).txt > $(BENCH_OUT).md && echo && cat $(BENCH_OUT).md; exit $$rc

.PHONY: bench-scale
bench-scale: ## observe+plan, a no-op apply and a one-flag rollout of 10 to 1,000 simulated nodes beside their floors (docs/BENCHMARKS.md); no sandbox needed
	mkdir -p $(dir $(BENCH_OUT)); $(GO) test -p 1 -run '^$$' -bench '^BenchmarkScaleSimulated$$' -benchtime 1x -benchmem -timeout 30m ./reconcile/simnode | tee $(BENCH_OUT)-scale.txt; \
		rc=$${PIPESTATUS[0]}; $(GO) run ./hack/benchtable < $(BENCH_OUT)-scale.txt > $(BENCH_OUT)-scale.md && echo && cat $(BENCH_OUT)-scale.md; exit $$rc

.PHONY: bench-serve
bench-serve: ## one rigger serve following 100 clusters of simulated nodes: memory, push → reconcile start, drift spread, a slow cluster, a push behind queued drift checks and serve's own commits (docs/BENCHMARKS.md); no sandbox needed
	mkdir -p $(dir $(BENCH_OUT)); $(GO) test -p 1 -run '^$$' -bench '^BenchmarkServeSimulated(Priority)?$$' -benchtime 1x -benchmem -timeout 30m ./gitops | tee $(BENCH_OUT)-serve.txt; \
		rc=$${PIPESTATUS[0]}; $(GO) run ./hack/benchtable < $(BENCH_OUT)-serve.txt > $(BENCH_OUT)-serve.md && echo && cat $(BENCH_OUT)-serve.md; exit $$rc

.PHONY: bench-hostile
bench-hostile: ## rigger serve's memory under every attack of a hostile node at once, with deploy/'s GOMEMLIMIT (docs/agent.md); no sandbox needed
	mkdir -p $(dir $(BENCH_OUT)); GOMEMLIMIT=400MiB $(GO) test -p 1 -run '^$$' -bench '^BenchmarkServeHostileNodes$$' -benchtime 1x -timeout 30m ./gitops | tee $(BENCH_OUT)-hostile.txt; \
		rc=$${PIPESTATUS[0]}; $(GO) run ./hack/benchtable < $(BENCH_OUT)-hostile.txt > $(BENCH_OUT)-hostile.md && echo && cat $(BENCH_OUT)-hostile.md; exit $$rc

.PHONY: demo
demo: prereqs build ## validate the examples, start the sandbox nodes, apply the sandbox cluster, show its status, run a pod across nodes
	@for f in examples/clusters/*/cluster.yml; do \
		echo "==> $$f"; $(BIN) validate -f $$f || exit 1; \
	done
	@echo; echo "==> sandbox nodes (rigger sandbox up)"
	@$(BIN) sandbox up || { echo; \
		echo "make demo FAILED at rigger sandbox up: the line above says which part of the machine's set-up failed."; \
		echo "  Then:  make demo  (what was made is kept), or start over:  make sandbox-down && make demo. Help: docs/sandbox.md"; exit 1; }
	@echo; echo "==> rigger apply: examples/clusters/sandbox/cluster.yml on those nodes"
	@$(BIN) apply --yes -f examples/clusters/sandbox/cluster.yml || { echo; \
		echo "make demo FAILED at rigger apply: the lines above name the node or add-on and why."; \
		echo "  What is not in sync:  $(BIN) status -f examples/clusters/sandbox/cluster.yml"; \
		echo "  Fix the cause, then go on from here:  make demo  (the nodes and images are kept; the apply goes on from where it stopped)"; \
		echo "  Help: docs/nodes.md (a Node that is not Ready), docs/addons.md (Readiness), docs/sandbox.md"; exit 1; }
	@echo; echo "==> rigger status"
	@$(BIN) status -f examples/clusters/sandbox/cluster.yml || { echo; \
		echo "make demo FAILED: rigger status says the cluster is not in sync (the reasons are listed above)."; \
		echo "  Run the apply again to repair it:  $(BIN) apply --yes -f examples/clusters/sandbox/cluster.yml"; exit 1; }
	@echo; echo "==> a pod on rigger-node1 fetches a page from a pod on rigger-node3 (rigger sandbox smoke)"
	@$(BIN) sandbox smoke -f examples/clusters/sandbox/cluster.yml || { echo; \
		echo "make demo FAILED at the smoke test: the line above says which step (a pod scheduled, a fetch by IP or by name)."; \
		echo "  What is not in sync:  $(BIN) status -f examples/clusters/sandbox/cluster.yml; then make demo again"; exit 1; }
	@echo; echo "The cluster stays up: 'bin/rigger kubeconfig -f examples/clusters/sandbox/cluster.yml' prints its"
	@echo "admin kubeconfig; 'bin/rigger remove -f examples/clusters/sandbox/cluster.yml' tears it down and"
	@echo "'make sandbox-down' removes the nodes."

.PHONY: sandbox
sandbox: prereqs build ## make (or complete) the local sandbox: 3 nodes with sshd, Docker and the cluster images
	$(BIN) sandbox up
	$(BIN) sandbox status

.PHONY: sandbox-down
sandbox-down: build ## remove every sandbox and what it changed on the machine
	$(BIN) sandbox down --all

.PHONY: sandbox-demo
sandbox-demo: prereqs build ## sandbox up, status and down, timed
	time $(BIN) sandbox up
	$(BIN) sandbox status; rc=$$?; $(BIN) sandbox down || rc=1; exit $$rc

.PHONY: clean
clean: ## remove build outputs
	rm -rf bin

# airlock. `make help` lists the targets; `make test` is what CI runs.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO ?= go
PKGS ?= ./...
BIN ?= bin
# go build flags: scripts/demo.sh passes -v to show the build's progress.
BUILDFLAGS ?=
# make install puts the commands in $(DESTDIR)$(PREFIX)/bin.
PREFIX ?= /usr/local
DESTDIR ?=
FUZZTIME ?= 30s
TEST_TIMEOUT ?= 20m
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
# golangci-lint v2 with .golangci.yml, built from the Go module proxy at a
# pinned version like staticcheck (go run caches the binary it builds).
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0

# Go files outside testdata and build output. Fuzz targets and deps tests are
# found with these on each run, so a new one needs no edit here.
PRUNE := \( -name testdata -o -name bin -o -name .git -o -name vendor \) -prune
FIND_GO := find . $(PRUNE) -o -name '*.go' -print
FIND_GO_TESTS := find . $(PRUNE) -o -name '*_test.go' -print

.PHONY: help build install demo example-wordstats test-deps test test-go test-kube lint fmt fuzz bench bench-compare bench-idle bench-egress bench-workers bench-serve bench-e2b bench-ports bench-mcp deps check clean

help: ## List the targets
	@awk -F ':.*## ' '/^[a-zA-Z0-9_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build every command into ./bin, static (CGO_ENABLED=0), airlock with its thin entry for a warm sandbox run where the machine can (scripts/build-thin.sh)
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build $(BUILDFLAGS) -trimpath -o $(BIN)/ ./cmd/airlock-host ./cmd/airlock-exec
	@st=0; GO='$(GO)' BUILDFLAGS='$(BUILDFLAGS)' scripts/build-thin.sh $(BIN) || st=$$?; \
	if [ $$st -eq 3 ]; then \
	  echo "make build: airlock without its thin entry (build-thin.sh said why above)"; \
	  CGO_ENABLED=0 $(GO) build $(BUILDFLAGS) -trimpath -o $(BIN)/ ./cmd/airlock; \
	elif [ $$st -ne 0 ]; then exit $$st; fi

install: build ## Install airlock, airlock-host and airlock-exec side by side in $(DESTDIR)$(PREFIX)/bin (PREFIX=/usr/local)
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN)/airlock $(BIN)/airlock-host $(BIN)/airlock-exec $(DESTDIR)$(PREFIX)/bin/

demo: ## A real agent run: fix examples/invoice (scripted model; MODEL=anthropic:… for a real one)
	./scripts/demo.sh

example-wordstats: ## An agent fixes a pytest test in sandboxes of a Python image airlock builds (root; Debian's mirror the first time)
	./examples/wordstats/run.sh

test-deps: ## Install the Debian packages tests use (root only; idempotent, quiet)
	@bash scripts/ci-deps.sh

test: test-deps ## Every test: lint and every package's (test-go), the cluster's binaries and images prepared beside them at low priority, then the kubernetes tier on a real cluster (test-kube; skipped, saying so, where the machine cannot run one)
	GO=$(GO) scripts/kube-test.sh --beside '$(MAKE) --no-print-directory test-go'

test-go: lint ## lint, then go test -race on every package (about 8 min on 2 cores, warm)
	GO=$(GO) scripts/gotest.sh -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

test-kube: ## The kubernetes backend's tests on a single-node cluster started and stopped around them (root; the first run builds kube-apiserver and kubelet, ~16 min on 2 idle cores; AIRLOCK_KUBE_CACHE holds them)
	GO=$(GO) scripts/kube-test.sh

lint: ## go vet, gofmt, staticcheck, then golangci-lint with .golangci.yml (make fmt fixes its formatting findings)
	$(GO) vet $(PKGS)
	@out="$$($(FIND_GO) | xargs gofmt -l)"; \
	if [ -n "$$out" ]; then echo "gofmt -l: these files need gofmt -w:"; echo "$$out"; exit 1; fi
	$(STATICCHECK) $(PKGS)
	$(GOLANGCI_LINT) run $(PKGS)

fmt: ## Format the Go files as lint wants them: gofumpt, then goimports (airlock's imports last)
	$(GOLANGCI_LINT) fmt $(PKGS)

fuzz: ## Run every Fuzz* function in the repo, one by one, for FUZZTIME (30s) each
	@for dir in $$($(FIND_GO_TESTS) | xargs grep -l '^func Fuzz' | xargs -r -n1 dirname | sort -u); do \
	  list="$$($(GO) test -list 'Fuzz.*' "$$dir")"; \
	  for f in $$(grep '^Fuzz' <<<"$$list"); do \
	    echo "== $$dir $$f"; \
	    $(GO) test -run='^$$' -fuzz="^$$f\$$" -fuzztime=$(FUZZTIME) "$$dir"; \
	  done; \
	done

bench: ## Go benchmarks of every package
	$(GO) test -run=NONE -bench=. -benchmem $(PKGS)

bench-compare: ## airlock side by side with bwrap, runc and runsc (root)
	./bench/compare.sh

bench-idle: build ## Host memory of 500 idle sandboxes held by one process (root)
	$(GO) run ./bench/idle -n 500 -exec $(BIN)/airlock-exec

bench-egress: ## Egress proxy beside direct and tinyproxy: latency, throughput, 1,000 tunnels
	./bench/egress.sh

bench-workers: ## Runs completed per minute by 1, 2 and 3 workers sharing one store (root)
	./bench/workers.sh

bench-serve: ## airlock serve under load: 100 runs created at once, 1,000 SSE subscribers, and the delivery floor (root)
	./bench/serve.sh

bench-e2b: ## E2B SDK: Sandbox.create() to first command output over 100 sandboxes (root, node)
	./bench/e2b.sh

bench-ports: ## Preview URLs: p50 through the data plane vs direct loopback in the sandbox, 1,000 WebSockets held (root, node)
	./bench/ports.sh

bench-mcp: ## MCP: run_command true through airlock mcp (stdio) against airlock sandbox exec, p50 (root)
	./bench/mcp.sh

deps: ## Import-boundary tests: what airlock-exec and execproto may link, deps.txt, static executor
	$(GO) test -count=1 -run 'Deps|ExecutorStatic' $$($(FIND_GO_TESTS) | grep '/deps_test\.go$$' | xargs -n1 dirname | sort -u)

check: lint test ## Everything CI runs (lint, then every test)

clean: ## Remove build output
	rm -rf $(BIN)

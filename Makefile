# airlock: `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
FUZZTIME ?= 30s
PKGS := ./...

.PHONY: help build demo test test-deps lint fuzz bench bench-compare deps check clean

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## Build bin/airlock and the static executor bin/airlock-exec
	@mkdir -p bin
	$(GO) build -trimpath -o bin/airlock ./cmd/airlock
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/airlock-exec ./cmd/airlock-exec

demo: ## The main job: build and test examples/calc in a sandbox with no network
	./scripts/demo.sh

test-deps: ## Install what the tests need (root, Debian): idempotent
	./scripts/ci-deps.sh

test: test-deps lint ## Every test: vet, gofmt, staticcheck, go test -race (needs root for sandboxes)
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

lint: ## go vet, gofmt and staticcheck
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

fuzz: ## Run every fuzz target for FUZZTIME each
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list 'Fuzz.*' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run=NONE -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg || exit 1; \
	  done; done

bench: ## Go benchmarks
	$(GO) test -run=NONE -bench=. -benchmem $(PKGS)

bench-compare: ## airlock side by side with bwrap, runc and runsc (root)
	./bench/compare.sh

deps: ## Check the executor's import boundary
	$(GO) test -count=1 -run 'Deps' ./cmd/airlock-exec/

check: lint test ## Everything CI runs

clean: ## Remove build output
	rm -rf bin

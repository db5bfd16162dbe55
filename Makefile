# retryq — `make` or `make help` lists the targets.
GO      ?= go
PKGS    ?= ./...
BIN     ?= bin/retryq
FUZZTIME ?= 10s
STATICCHECK_VERSION ?= v0.8.2
# VERSION is what `make build` links in as the version a node records in the registry (`retryq nodes`):
# dev-<commit>[-dirty] from git, as a toolchain-stamped build reports it, even where GOFLAGS has -buildvcs=false.
VERSION ?= $(shell v=$$(git rev-parse --short=12 HEAD 2>/dev/null) && echo "dev-$$v$$(git diff --quiet HEAD 2>/dev/null || echo -dirty)" || echo dev)

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the retryq binary into bin/ (VERSION=v1.2.3 to name its version)
	$(GO) build -ldflags "-X github.com/retryq/retryq/internal/cli.Version=$(VERSION)" -o $(BIN) ./cmd/retryq

.PHONY: test
test: ## Run every test with the race detector (PostgreSQL tests start a throwaway cluster when the binaries are present)
	$(GO) test -race -count=1 -timeout 40m $(PKGS)

.PHONY: race
race: test ## Alias of test (tests always run with -race)

.PHONY: short
short: ## Quick tests without the race detector and without the slow end-to-end tests
	$(GO) test -short -count=1 $(PKGS)

.PHONY: bench
bench: ## Run the benchmarks (see docs/benchmarks.md for the recorded figures)
	$(GO) test -run='^$$' -bench=. -benchmem ./retry/... ./breaker/... ./budget/...
	$(GO) test -run='^$$' -bench='SQLite|Postgres|Pgbench' -benchtime=1x -timeout 30m .
	$(GO) test -run='^$$' -bench=APIEnqueue -benchtime=3s ./internal/api

.PHONY: fuzz-smoke
fuzz-smoke: ## Run each fuzz target for FUZZTIME (default 10s)
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg; \
	  done; \
	done

.PHONY: lint
lint: ## gofmt check, go vet (also for darwin, freebsd and windows), staticcheck, and golangci-lint when installed
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet $(PKGS)
	@for os in darwin freebsd windows; do echo "GOOS=$$os go vet"; GOOS=$$os $(GO) vet $(PKGS) || exit 1; done
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)
	@if command -v golangci-lint >/dev/null 2>&1; then golangci-lint run; else echo "golangci-lint not installed; skipped"; fi

.PHONY: demo
demo: ## Run the demo on embedded SQLite
	$(GO) run ./cmd/retryq demo

# converge: `make help` lists the targets.

GO                  ?= go
# MODULES are the repository's Go modules: the product (.) and the deployment
# checks, a module of their own so that their heavy dependencies (BuildKit,
# compose-go, kustomize, k8s.io) stay out of the product's go.mod. test, lint
# and test-short run PKGS in each (make test MODULES=. PKGS=./store: one package).
MODULES             ?= . test/deploycheck test/observability test/sourcecheck test/apicheck
PKGS                ?= ./...
TEST_TIMEOUT        ?= 15m
# TEST_REQUIRE_DB=1 makes tests that need PostgreSQL fail instead of skip
# when there is none (CI sets it).
TEST_REQUIRE_DB     ?=
# golangci-lint runs staticcheck, errcheck, govet, ineffassign, unused and the
# depguard rules of .golangci.yml; the go command fetches and caches it (the
# first build takes a few minutes, later runs seconds).
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT       ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
DEV_DATA_DIR        ?= .converge-dev
# FUZZTIME is how long `make fuzz` runs each fuzz target.
FUZZTIME            ?= 5s
# FUZZ_TARGETS are the fuzz targets of ./api, found in its test files.
FUZZ_TARGETS        := $(shell grep -ho '^func Fuzz[A-Za-z0-9_]*' api/*_test.go | cut -c6-)

.DEFAULT_GOAL := help
.PHONY: help deps test test-race test-short test-pgbouncer fuzz lint lint-openapi build run db-reset bench faults

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

deps: ## Make sure the test dependencies are there (PostgreSQL running, Chromium)
	@bash scripts/ensure-deps.sh

test: deps ## Run every test of every module with the race detector (TEST_REQUIRE_DB=1: no database fails), then the e2e suite through PgBouncer (test-pgbouncer), then `make fuzz`
	@for m in $(MODULES); do \
		echo "(cd $$m && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS))"; \
		(cd $$m && TEST_REQUIRE_DB=$(TEST_REQUIRE_DB) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)) || exit 1; \
	done
	@$(MAKE) --no-print-directory test-pgbouncer
	@$(MAKE) --no-print-directory fuzz

test-race: test ## Same as test

test-short: deps ## Run the tests of every module with -short, without the race detector
	@for m in $(MODULES); do \
		echo "(cd $$m && $(GO) test -short -count=1 -timeout $(TEST_TIMEOUT) $(PKGS))"; \
		(cd $$m && TEST_REQUIRE_DB=$(TEST_REQUIRE_DB) $(GO) test -short -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)) || exit 1; \
	done

test-pgbouncer: deps ## Run the e2e suite and test/pooler through PgBouncer in transaction mode (database.pooler: transaction)
	TEST_PGBOUNCER=1 TEST_REQUIRE_PGBOUNCER=1 TEST_REQUIRE_DB=$(TEST_REQUIRE_DB) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./test/e2e/ ./test/pooler/

fuzz: ## Run each fuzz target of ./api for FUZZTIME (5s); a failing input lands in api/testdata/fuzz
	@for f in $(FUZZ_TARGETS); do \
		echo "$(GO) test -run='^$$' -fuzz='^$$f$$' -fuzztime=$(FUZZTIME) ./api"; \
		$(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./api || { \
			echo "$$f failed; once more (a failing input is in api/testdata/fuzz and fails again; the engine's own \"context deadline exceeded\" on a loaded machine does not)"; \
			$(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./api || exit 1; }; \
	done

lint: ## gofmt (must list nothing), then go vet and golangci-lint (.golangci.yml: staticcheck, import rules) in every module, then lint-openapi
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt -l lists:"; echo "$$out"; exit 1; fi
	@for m in $(MODULES); do \
		echo "(cd $$m && $(GO) vet $(PKGS) && golangci-lint run $(PKGS))"; \
		(cd $$m && $(GO) vet $(PKGS) && $(GOLANGCI_LINT) run --allow-parallel-runners --config $(CURDIR)/.golangci.yml $(PKGS)) || exit 1; \
	done
	@$(MAKE) --no-print-directory lint-openapi

# The OpenAPI linters, pinned; npx fetches them from the npm registry once.
REDOCLY_VERSION     ?= 2.77.0
SPECTRAL_VERSION    ?= 6.16.3

lint-openapi: ## spectral (no warning) and redocly (no warning) lint of api/openapi.json, with npx; skipped when npm's registry is unreachable
	@if ! command -v npx >/dev/null 2>&1 || ! timeout 30 npm view @redocly/cli@$(REDOCLY_VERSION) version >/dev/null 2>&1; then \
		echo "lint-openapi: no npx, or the npm registry is unreachable: skipped"; exit 0; fi; \
	echo "npx @stoplight/spectral-cli@$(SPECTRAL_VERSION) lint --fail-severity=warn api/openapi.json"; \
	npx -y @stoplight/spectral-cli@$(SPECTRAL_VERSION) lint --fail-severity=warn --ruleset .spectral.yaml api/openapi.json || exit 1; \
	echo "npx @redocly/cli@$(REDOCLY_VERSION) lint api/openapi.json"; \
	log=$$(mktemp); npx -y @redocly/cli@$(REDOCLY_VERSION) lint --config redocly.yaml --max-problems 50 api/openapi.json >$$log 2>&1; rc=$$?; \
	grep -v "^ *║\|^ *╔\|^ *╚" $$log; if [ $$rc -ne 0 ] || grep -Eq "You have [0-9]+ warnings?" $$log; then rm -f $$log; exit 1; fi; rm -f $$log

faults: deps ## Run the full fault suite (test/faults, FAULTS_FULL=1; about 12 min; FAULTS_STRICT=1 also fails on process exits); `make test` runs its smoke
	FAULTS_FULL=1 $(GO) test -count=1 -timeout 60m -run TestFaultSuite -v ./test/faults/

build: ## Build bin/converge
	$(GO) build -o bin/converge ./cmd/converge

run: ## Run `converge dev`: private PostgreSQL, API, dashboard and a demo target
	$(GO) run ./cmd/converge dev

db-reset: ## Reset the dev database: schema down and up in $DATABASE_URL, else delete the `converge dev` data folder
	@if [ -n "$$DATABASE_URL" ]; then \
		$(GO) run ./cmd/converge migrate down && $(GO) run ./cmd/converge migrate up; \
	elif [ -f "$(DEV_DATA_DIR)/postmaster.pid" ]; then \
		echo "$(DEV_DATA_DIR) is in use: stop \`converge dev\` first (or remove a stale $(DEV_DATA_DIR)/postmaster.pid)" >&2; exit 1; \
	else \
		echo "removing $(DEV_DATA_DIR)"; rm -rf "$(DEV_DATA_DIR)"; \
	fi

bench: ## Run the pipeline benchmark against $DATABASE_URL (unset: a private PostgreSQL server of its own)
	$(GO) run ./cmd/converge bench pipeline

# Tidemark developer entry points. `make help` lists them.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO        ?= go
BIN       := bin
MODULE    := github.com/tidemark-io/tidemark
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS   := -X $(MODULE)/internal/cli.version=$(VERSION)

# Where `go install` puts tools (staticcheck, protoc plugins).
GOBIN_DIR = $(or $(shell $(GO) env GOBIN),$(shell $(GO) env GOPATH)/bin)

STATICCHECK_VERSION     := v0.8.2
PROTOC_GEN_GO_VERSION   := v1.36.12
PROTOC_GEN_GRPC_VERSION := v1.6.2
ETCD_VERSION            := v3.7.3
PROTO_DIR               := proto/tidemark/v1
# make proto: where generated code goes (the module root; proto-check uses a temp dir).
PROTO_OUT               ?= .

# make run: `master dev` reads DATA_URL from the environment, so
# `DATA_URL='s3://bucket?region=...' make run` keeps the stores in that bucket;
# unset, they are in ./data/store.
# make bench: per-benchmark time; BENCHCOUNT=6 gives benchstat enough samples.
BENCHTIME ?= 2s
BENCHCOUNT ?= 1
# make fuzz: budget per fuzz target, empty = each target's execution count in
# scripts/fuzz.sh (about 10 s each); a count (50000x) or a duration (5m) for all.
FUZZTIME ?=

.PHONY: help build test run bench lint proto proto-check etcdctl clean fuzz chaos screenshots docs

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# Stripped (-s -w: no symbol table, no DWARF; panics still print file:line). master-dev
# is the local cluster `master dev` execs: the only binary with the embedded etcd server.
build: ## build bin/worker, bin/master and bin/master-dev (stripped), and print their sizes
	$(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/ ./cmd/worker ./cmd/master ./cmd/master-dev
	@for b in worker master master-dev; do \
		wc -c < $(BIN)/$$b | awk -v b=$(BIN)/$$b '{ printf "  %-15s %6.1f MB\n", b, $$1 / 1e6 }'; \
	done

# The object-store servers: the objstore and table tests run their azblob://, s3:// and
# gs:// cases against Azurite, MinIO and fake-gcs-server when TIDEMARK_AZURITE_ADDR,
# TIDEMARK_MINIO_ADDR and TIDEMARK_GCS_ADDR are set; locally they skip them otherwise,
# under CI=true they fail. test_servers (scripts/lib/server.sh) starts each through its
# script (scripts/azurite.sh, minio.sh, gcs.sh) unless its variable is already set.
# The end-to-end tests (real processes) run after the other packages, not beside
# them: the etcd lease and outage tests of pkg/worker and pkg/master keep real time,
# and should not share two cores with clusters of processes. Between them run the
# Kubernetes manifest tests, a module of their own (deploy/kubernetes: the Kubernetes
# API types and kustomize stay out of the binaries).
test: ## run every test with -race (starts Azurite, MinIO and fake-gcs-server when they can be installed)
	@source scripts/lib/server.sh; \
	test_servers azurite minio gcs; \
	$(GO) test -race -count=1 -timeout 30m $$($(GO) list ./... | grep -v '/e2e$$'); \
	(cd deploy/kubernetes && $(GO) test -count=1 -timeout 10m ./...); \
	$(GO) test -race -count=1 -timeout 30m ./e2e

run: build ## build, then run a local cluster (etcd, master, 3 workers; data in ./data or DATA_URL's bucket) until Ctrl-C
	./$(BIN)/master dev

# The incident reproductions (bench/) write their section into BENCHMARKS.md; then every
# Go benchmark runs. BENCH_FLAGS passes flags to `tidemark-bench run` (--only storm,lock).
bench: ## run the incident reproductions (into BENCHMARKS.md) and every Go benchmark, output in bench.out
	GO='$(GO)' BENCHTIME='$(BENCHTIME)' BENCHCOUNT='$(BENCHCOUNT)' bash scripts/bench.sh

# Each target's corpus is its package's testdata/fuzz/<target>/, replayed by `make test`.
fuzz: ## run every Go fuzz target for its execution budget, ~10s each (scripts/fuzz.sh)
	GO='$(GO)' FUZZTIME='$(FUZZTIME)' bash scripts/fuzz.sh

# The reliability campaigns (e2e/chaos_*_test.go, build tag chaos): too long for CI.
# CHAOS_RUN chooses campaigns by test name (a go test -run regexp).
chaos: ## run the reliability campaigns (about 10 min) and write their figures into RELIABILITY.md, output in chaos.out
	GO='$(GO)' CHAOS_RUN='$(CHAOS_RUN)' bash scripts/chaos.sh

# The dashboard's screenshots in docs/ (shown in docs/DASHBOARD.md) are taken by its browser
# test (e2e/dashboard_test.go) on a real dev cluster, after SCREENSHOT_ROUNDS rounds of
# writes, each observed by a scan (more rounds: fuller charts). Needs chromium.
SCREENSHOT_ROUNDS ?= 12
screenshots: ## regenerate the dashboard screenshots in docs/ (headless chromium, a few minutes)
	TIDEMARK_SCREENSHOTS='$(CURDIR)/docs' TIDEMARK_SCREENSHOT_ROUNDS='$(SCREENSHOT_ROUNDS)' \
		$(GO) test -count=1 -timeout 20m -run '^TestDashboardInABrowser$$' ./e2e

# docs/CONFIGURATION.md's tables are the flags': each binary's TestConfigurationDoc
# writes its section when TIDEMARK_UPDATE_DOCS=1 (and fails when it is stale otherwise).
# -p 1: the sections share one file, so their writers take turns.
docs: ## regenerate docs/CONFIGURATION.md's tables from the flags (after changing a flag or its help)
	TIDEMARK_UPDATE_DOCS=1 $(GO) test -count=1 -p 1 -run '^TestConfigurationDoc$$' ./cmd/... ./internal/cli

lint: ## gofmt, go vet, staticcheck
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags chaos ./...
	@if ! "$(GOBIN_DIR)/staticcheck" -version 2>/dev/null | grep '($(STATICCHECK_VERSION:v%=%))' >/dev/null; then \
		echo "installing staticcheck $(STATICCHECK_VERSION)"; \
		$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); \
	fi
	"$(GOBIN_DIR)/staticcheck" ./...
	cd deploy/kubernetes && $(GO) vet ./... && "$(GOBIN_DIR)/staticcheck" ./...

proto: ## regenerate Go code from proto/tidemark/v1/*.proto
	@shopt -s nullglob; protos=($(PROTO_DIR)/*.proto); \
	if [ $${#protos[@]} -eq 0 ]; then echo "proto: no .proto files in $(PROTO_DIR) yet: nothing to generate"; exit 0; fi; \
	command -v protoc >/dev/null || { echo "proto: protoc not found (apt-get install protobuf-compiler)"; exit 1; }; \
	"$(GOBIN_DIR)/protoc-gen-go" --version 2>/dev/null | grep -qx 'protoc-gen-go $(PROTOC_GEN_GO_VERSION)' || \
		$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION); \
	"$(GOBIN_DIR)/protoc-gen-go-grpc" --version 2>/dev/null | grep -qx 'protoc-gen-go-grpc $(PROTOC_GEN_GRPC_VERSION:v%=%)' || \
		$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GRPC_VERSION); \
	PATH="$(GOBIN_DIR):$$PATH" protoc -I proto \
		--go_out=$(PROTO_OUT) --go_opt=module=$(MODULE) \
		--go-grpc_out=$(PROTO_OUT) --go-grpc_opt=module=$(MODULE) \
		"$${protos[@]}"; \
	echo "proto: generated Go code for $${protos[*]} in $(PROTO_OUT)"

# Not part of lint/CI (those must not need protoc): run it after editing a .proto file.
proto-check: ## check the committed .pb.go files match the .proto files (needs protoc)
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(MAKE) --no-print-directory proto PROTO_OUT="$$tmp" >/dev/null; \
	if diff -r -x '*.proto' -x '*_test.go' -x 'doc.go' "$$tmp/$(PROTO_DIR)" $(PROTO_DIR); then \
		echo "proto-check: generated code is up to date"; \
	else echo "proto-check: generated code is stale: run make proto and commit the result"; exit 1; fi

# `go install etcdctl@version` is refused (etcdctl's go.mod has replace directives), so
# build it in a throwaway module that requires it.
etcdctl: ## install etcdctl $(ETCD_VERSION) into GOBIN (end-to-end tests use it)
	@if "$(GOBIN_DIR)/etcdctl" version 2>/dev/null | grep 'etcdctl version: $(ETCD_VERSION:v%=%)' >/dev/null; then \
		echo "etcdctl $(ETCD_VERSION) already in $(GOBIN_DIR)"; exit 0; fi; \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	cd "$$tmp"; \
	$(GO) mod init tidemark-etcdctl >/dev/null 2>&1; \
	$(GO) get go.etcd.io/etcd/etcdctl/v3@$(ETCD_VERSION); \
	$(GO) build -o "$(GOBIN_DIR)/etcdctl" go.etcd.io/etcd/etcdctl/v3; \
	"$(GOBIN_DIR)/etcdctl" version

clean: ## remove bin/ and bench.out (data/ is kept)
	rm -rf $(BIN) bench.out

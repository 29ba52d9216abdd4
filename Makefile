# shepherd — see README.md. The two commands that must always work on a fresh
# machine are `make run` and `make test`.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
export GOTOOLCHAIN := local

# Tools and the test control plane are cached outside the repository, keyed by
# version, so a clean clone reuses them and `git status` stays clean.
SHEPHERD_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/shepherd
export SHEPHERD_CACHE
TOOLS := $(SHEPHERD_CACHE)/bin

CONTROLLER_GEN_VERSION ?= v0.23.0
CONTROLLER_GEN := $(TOOLS)/controller-gen-$(CONTROLLER_GEN_VERSION)
export CONTROLLER_GEN

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/shepherd-k8s/shepherd/cmd/shepherd/app.version=$(VERSION)

GO_TEST_FLAGS ?= -count=1 -timeout 40m

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy functions and CRDs from api/.
	$(CONTROLLER_GEN) object paths=./api/...
	$(MAKE) manifests

# Generated CRDs, by owner. deploy/crds holds shepherd's own (shepherd.dev),
# the only CRDs an install carries. test/seedcrds holds the seed designs'
# shapes of the third-party groups (tests of clusters whose CRDs carry the
# seed fields); integrations/pinned/crds the Grove CRDs that mirror Grove's
# published API. CRD_DIR, when set, receives the three in its subdirectories
# shepherd/, seed/ and grove/ instead (the freshness test).
CRD_DIR ?=
SHEPHERD_CRD_DIR := $(if $(CRD_DIR),$(CRD_DIR)/shepherd,deploy/crds)
SEED_CRD_DIR := $(if $(CRD_DIR),$(CRD_DIR)/seed,test/seedcrds)
GROVE_CRD_DIR := $(if $(CRD_DIR),$(CRD_DIR)/grove,integrations/pinned/crds)
CRD_GEN := crd:generateEmbeddedObjectMeta=true

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Regenerate the CRDs (shepherd's, the seed shapes, the Grove mirror).
	mkdir -p $(SHEPHERD_CRD_DIR) $(SEED_CRD_DIR) $(GROVE_CRD_DIR)
	rm -f $(SHEPHERD_CRD_DIR)/shepherd.dev_*.yaml $(SEED_CRD_DIR)/*.yaml $(GROVE_CRD_DIR)/grove.io_*.yaml
	$(CONTROLLER_GEN) $(CRD_GEN) paths=./api/shepherd/... output:crd:artifacts:config=$(SHEPHERD_CRD_DIR)
	$(CONTROLLER_GEN) $(CRD_GEN) paths=./api/trainer/... paths=./api/jobset/... paths=./api/grove/... output:crd:artifacts:config=$(SEED_CRD_DIR)
	$(CONTROLLER_GEN) $(CRD_GEN) paths=./integrations/pinned/grove/... output:crd:artifacts:config=$(GROVE_CRD_DIR)
	$(if $(CRD_DIR),,cp deploy/crds/shepherd.dev_*.yaml charts/shepherd/files/) # the chart's copy (test/helm)

.PHONY: pinned-crds
pinned-crds: ## Copy the Trainer and JobSet CRDs of the versions go.mod pins into integrations/pinned/crds (not committed).
	go run ./hack/pinnedcrds

.PHONY: fmt
fmt: ## go fmt.
	go fmt ./...

.PHONY: vet
vet: ## go vet.
	go vet ./...

.PHONY: lint
lint: vet ## gofmt check and go vet.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: verify
verify: generate lint ## Fail if generated files are stale or code is unformatted.
	@git diff --exit-code -- api deploy/crds charts/shepherd/files test/seedcrds integrations/pinned || { echo "generated files are stale: run make generate"; exit 1; }

.PHONY: controlplane
controlplane: ## Build (once) the real kube-apiserver + etcd used by tests and make run.
	./hack/build-controlplane.sh >/dev/null

##@ Build and run

.PHONY: build
build: pinned-crds ## Build bin/shepherd.
	go build -ldflags "$(LDFLAGS)" -o bin/shepherd ./cmd/shepherd

.PHONY: test
test: controlplane pinned-crds $(CONTROLLER_GEN) ## Unit and integration tests against a real kube-apiserver + etcd.
	KUBEBUILDER_ASSETS="$$(./hack/build-controlplane.sh)" go test $(GO_TEST_FLAGS) ./...

.PHONY: bench-admission
bench-admission: controlplane pinned-crds ## Admission cost through a real kube-apiserver: no policy, exported VAPs, serve, an empty webhook (ADMISSION_N, ADMISSION_CLIENTS, SHEPHERD_BASELINE_BIN).
	KUBEBUILDER_ASSETS="$$(./hack/build-controlplane.sh)" go test -count=1 -run '^$$' -bench '^BenchmarkAdmission$$' -benchtime 1x -timeout 60m ./test/perf/

.PHONY: run
run: build controlplane ## Start a local control plane with shepherd serving it.
	./hack/run.sh

$(CONTROLLER_GEN):
	mkdir -p $(TOOLS)
	GOBIN=$(TOOLS)/tmp go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(TOOLS)/tmp/controller-gen $@

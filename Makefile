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

CRD_DIR ?= deploy/crds

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Regenerate CRDs into deploy/crds (or CRD_DIR).
	mkdir -p $(CRD_DIR)
	rm -f $(CRD_DIR)/*.yaml
	$(CONTROLLER_GEN) crd:generateEmbeddedObjectMeta=true paths=./api/... output:crd:artifacts:config=$(CRD_DIR)

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
	@git diff --exit-code -- api deploy/crds || { echo "generated files are stale: run make generate"; exit 1; }

.PHONY: controlplane
controlplane: ## Build (once) the real kube-apiserver + etcd used by tests and make run.
	./hack/build-controlplane.sh >/dev/null

##@ Build and run

.PHONY: build
build: ## Build bin/shepherd.
	go build -ldflags "$(LDFLAGS)" -o bin/shepherd ./cmd/shepherd

.PHONY: test
test: controlplane $(CONTROLLER_GEN) ## Unit and integration tests against a real kube-apiserver + etcd.
	KUBEBUILDER_ASSETS="$$(./hack/build-controlplane.sh)" go test $(GO_TEST_FLAGS) ./...

.PHONY: run
run: build controlplane ## Start a local control plane with shepherd serving it.
	./hack/run.sh

$(CONTROLLER_GEN):
	mkdir -p $(TOOLS)
	GOBIN=$(TOOLS)/tmp go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(TOOLS)/tmp/controller-gen $@

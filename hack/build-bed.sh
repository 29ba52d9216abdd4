#!/usr/bin/env bash
# Builds the real upstream controllers of the test bed (test/bed) from the Go
# module proxy, each in a scratch module of its own (see docs/architecture.md,
# "The test bed"), into a cache outside the repository keyed by component and
# version, and prints the directory holding one subdirectory per component:
#
#   jobset-<v>/jobset-controller                     sigs.k8s.io/jobset (root main)
#   trainer-<v>/trainer-controller-manager           github.com/kubeflow/trainer/v2
#   kube-controller-manager-<v>/kube-controller-manager   k8s.io/kubernetes
#   kube-scheduler-<v>/kube-scheduler                k8s.io/kubernetes
#   kwok-<v>/kwok                                    sigs.k8s.io/kwok
#
# Later runs find the binaries there and return at once. BED_COMPONENTS (a
# space-separated list of jobset, trainer, kcm, scheduler, kwok; default all
# five, which test/bed runs) selects what is built.
set -euo pipefail

JOBSET_VERSION=${JOBSET_VERSION:-v0.12.0}
TRAINER_VERSION=${TRAINER_VERSION:-v2.3.0}
K8S_VERSION=${K8S_VERSION:-v1.37.1}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
BED_COMPONENTS=${BED_COMPONENTS:-jobset trainer kcm scheduler kwok}
CACHE=${SHEPHERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shepherd}
OUT="$CACHE/bed"

log() { echo "build-bed: $*" >&2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
mkdir -p "$OUT"

# build NAME DIR BIN: runs the function NAME in a fresh scratch module unless
# DIR/BIN exists, and times it.
build() {
  local fn=$1 dir=$2 bin=$3
  [ -x "$dir/$bin" ] && return 0
  mkdir -p "$dir" "$work/$fn"
  local start=$SECONDS
  (cd "$work/$fn"; "$fn" "$dir/$bin.tmp")
  mv "$dir/$bin.tmp" "$dir/$bin"
  log "$bin built in $((SECONDS - start)) s"
}

build_jobset() {
  log "building the JobSet $JOBSET_VERSION controller (first time only)"
  go mod init shepherd.local/jobset >/dev/null 2>&1
  go mod edit -require="sigs.k8s.io/jobset@$JOBSET_VERSION"
  # No package of our own imports it: resolve the module's own requirements.
  go mod download "sigs.k8s.io/jobset@$JOBSET_VERSION"
  go get "sigs.k8s.io/jobset@$JOBSET_VERSION" >/dev/null 2>&1 || go get "sigs.k8s.io/jobset@$JOBSET_VERSION"
  # The version its log and user agent report (JobSet's Makefile sets it so).
  go build -trimpath -ldflags "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION" \
    -o "$1" sigs.k8s.io/jobset
}

build_trainer() {
  log "building the Trainer $TRAINER_VERSION controller manager (first time only)"
  local pkg=github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
  go mod init shepherd.local/trainer >/dev/null 2>&1
  go get "$pkg@$TRAINER_VERSION" >/dev/null 2>&1 || go get "$pkg@$TRAINER_VERSION"
  go build -trimpath -ldflags "-s -w" -o "$1" "$pkg"
}

# build_k8s CMD OUT: a k8s.io/kubernetes command (kube-controller-manager,
# kube-scheduler) as a library import, the recipe of build-controlplane.sh.
build_k8s() {
  local cmd=$1 out=$2 ctor
  case $cmd in
  kube-controller-manager) ctor=NewControllerManagerCommand ;;
  kube-scheduler) ctor=NewSchedulerCommand ;;
  esac
  log "building $cmd $K8S_VERSION (first time only, several minutes)"
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  local staging="v0.${K8S_VERSION#v1.}"
  cat > main.go <<GO
// Command $cmd is the upstream $cmd, built as a library import.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/$cmd/app"
)

func main() { os.Exit(cli.Run(app.$ctor())) }
GO
  go mod init "shepherd.local/$cmd" >/dev/null 2>&1
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  # k8s.io/kubernetes points every staging module at ./staging; replace each
  # with the published module of the same minor, read from its own go.mod.
  local m
  for m in $(awk '$2 == "=>" && $3 ~ /^\.\/staging/ {print $1}' "$gomod"); do
    go mod edit -replace="$m=$m@$staging"
  done
  go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
  go mod tidy >/dev/null 2>&1 || go mod tidy
  local pkg=k8s.io/component-base/version
  go build -trimpath -o "$out" -ldflags "-s -w \
    -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor \
    -X $pkg.gitTreeState=clean" .
}

build_kcm() { build_k8s kube-controller-manager "$1"; }
build_scheduler() { build_k8s kube-scheduler "$1"; }

build_kwok() {
  log "building kwok $KWOK_VERSION (first time only)"
  local pkg=sigs.k8s.io/kwok/cmd/kwok
  go mod init shepherd.local/kwok >/dev/null 2>&1
  go get "$pkg@$KWOK_VERSION" >/dev/null 2>&1 || go get "$pkg@$KWOK_VERSION"
  go build -trimpath -ldflags "-s -w" -o "$1" "$pkg"
}

for c in $BED_COMPONENTS; do
  case $c in
  jobset) build build_jobset "$OUT/jobset-$JOBSET_VERSION" jobset-controller ;;
  trainer) build build_trainer "$OUT/trainer-$TRAINER_VERSION" trainer-controller-manager ;;
  kcm) build build_kcm "$OUT/kube-controller-manager-$K8S_VERSION" kube-controller-manager ;;
  scheduler) build build_scheduler "$OUT/kube-scheduler-$K8S_VERSION" kube-scheduler ;;
  kwok) build build_kwok "$OUT/kwok-$KWOK_VERSION" kwok ;;
  *) log "unknown component $c (want jobset, trainer, kcm, scheduler, kwok)"; exit 2 ;;
  esac
done

echo "$OUT"

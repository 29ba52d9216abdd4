#!/usr/bin/env bash
# make run: a local control plane (the test harness's kube-apiserver + etcd,
# Workload API on) with shepherd's CRDs and webhooks installed, `shepherd
# serve` answering them, and examples/ applied. Ctrl-C stops everything.
# The Makefile has built bin/shepherd and the control plane already.
set -euo pipefail
cd "$(dirname "$0")/.."
export KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-$(./hack/build-controlplane.sh)}"
go build -o bin/devcluster ./hack/devcluster
exec ./bin/devcluster -shepherd bin/shepherd -examples examples -state bin/run "$@"

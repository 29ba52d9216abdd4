#!/usr/bin/env bash
# make run: today a stub that proves the binary and the control plane build.
# The admission webhook server issue turns this into a local control plane
# with shepherd serving it.
set -euo pipefail
cd "$(dirname "$0")/.."
./bin/shepherd version
echo "control plane binaries: $(./hack/build-controlplane.sh)"
echo "shepherd serve is not implemented yet; see README.md."

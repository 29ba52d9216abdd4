#!/usr/bin/env bash
# Builds a real kube-apiserver and etcd from the Go module proxy (no container
# engine and no binary downloads are available here; see docs/architecture.md)
# into a cache outside the repository, keyed by version, and prints the
# directory.
# Later runs find the binaries there and return at once.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.1}
ETCD_VERSION=${ETCD_VERSION:-v3.6.7}
CACHE=${SHEPHERD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shepherd}
OUT="$CACHE/controlplane/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"

if [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/etcd" ]; then
  echo "$OUT"
  exit 0
fi

log() { echo "build-controlplane: $*" >&2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
mkdir -p "$OUT"

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
staging="v0.${K8S_VERSION#v1.}"

if [ ! -x "$OUT/kube-apiserver" ]; then
  log "building kube-apiserver $K8S_VERSION (first time only, several minutes)"
  mkdir -p "$work/kube-apiserver"
  cd "$work/kube-apiserver"
  cat > main.go <<'GO'
// Command kube-apiserver is the upstream API server, built as a library import.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() { os.Exit(cli.Run(app.NewAPIServerCommand())) }
GO
  go mod init shepherd.local/kube-apiserver >/dev/null 2>&1
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  # k8s.io/kubernetes points every staging module at ./staging; replace each
  # with the published module of the same minor, read from its own go.mod.
  for m in $(awk '$2 == "=>" && $3 ~ /^\.\/staging/ {print $1}' "$gomod"); do
    go mod edit -replace="$m=$m@$staging"
  done
  go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
  go mod tidy >/dev/null 2>&1 || go mod tidy
  pkg=k8s.io/component-base/version
  go build -trimpath -o "$OUT/kube-apiserver.tmp" -ldflags "-s -w \
    -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor \
    -X $pkg.gitTreeState=clean" .
  mv "$OUT/kube-apiserver.tmp" "$OUT/kube-apiserver"
fi

if [ ! -x "$OUT/etcd" ]; then
  log "building etcd $ETCD_VERSION"
  mkdir -p "$work/etcd"
  cd "$work/etcd"
  cat > main.go <<'GO'
// Command etcd is the upstream etcd server, built as a library import.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  go mod init shepherd.local/etcd >/dev/null 2>&1
  go mod edit -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  go mod tidy >/dev/null 2>&1 || go mod tidy
  go build -trimpath -o "$OUT/etcd.tmp" -ldflags "-s -w" .
  mv "$OUT/etcd.tmp" "$OUT/etcd"
fi

echo "$OUT"

// Package crds embeds shepherd's generated CustomResourceDefinitions (the
// YAML files beside this file, written by `make generate`) so the binary can
// type-check CEL rules against their structural schemas without a cluster.
package crds

import "embed"

// FS holds every generated CRD of this directory.
//
//go:embed *.yaml
var FS embed.FS

//go:build tools

// This file is never compiled: it only keeps the upstream modules whose CRDs
// are pinned in go.mod (and their sums in go.sum), so `go mod download`
// fetches exactly the versions shepherd is tested with.
package pinned

import (
	_ "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	_ "sigs.k8s.io/jobset/api/jobset/v1alpha2"
)

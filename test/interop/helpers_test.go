package interop

import (
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// timeout bounds every wait: the machine is small and shared.
const timeout = 60 * time.Second

func crdGK(crd *apiextensionsv1.CustomResourceDefinition) schema.GroupKind {
	return schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
}

// pruned picks the apiserver's warnings about unknown or duplicate fields
// out of a request's warnings (what Warn validation says it dropped).
func pruned(msgs []string) []string {
	var out []string
	for _, m := range msgs {
		if strings.Contains(m, "unknown field") || strings.Contains(m, "duplicate field") {
			out = append(out, m)
		}
	}
	return out
}

package interop

import (
	"context"
	"encoding/json"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestServeLeftUpstreamCRDsAlone runs last (file order): after every test
// above ran `shepherd serve` and its webhooks against the upstream CRDs,
// each is byte-for-byte as its project installed it.
func TestServeLeftUpstreamCRDsAlone(t *testing.T) {
	if len(upstream) != 7 {
		t.Fatalf("%d upstream CRDs recorded, want 7", len(upstream))
	}
	for name, before := range upstream {
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, live); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(before.Spec)
		a, _ := json.Marshal(live.Spec)
		if live.ResourceVersion != before.ResourceVersion || string(a) != string(b) {
			t.Errorf("CRD %s changed while shepherd served (resourceVersion %s -> %s)", name, before.ResourceVersion, live.ResourceVersion)
		}
	}
}

package native

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
)

// TestLongDelayCarrierDeniedWithItsMessage: the exported V-PCS-3 denies a
// shepherd.dev/termination-delay carrier over its bounds (64 pairs, 4096
// characters) with the message that names them, through the real
// apiserver, whatever its size up to what an annotation may hold. Without
// the bounds, the duplicate check's cost grows with the square of the
// pairs: a long carrier was denied only by the apiserver's cost limit
// ("could not be evaluated"), after seconds of CEL, or admitted when its
// pairs were few but many (65).
func TestLongDelayCarrierDeniedWithItsMessage(t *testing.T) {
	ns := env.Namespace(t)
	waitForPolicies(t, ns)
	pairs := func(n, distinct int) string {
		p := make([]string, n)
		for i := range p {
			p[i] = fmt.Sprintf("g%d=1s", i%distinct)
		}
		return strings.Join(p, ",")
	}
	for _, tc := range []struct {
		name    string
		carrier string
	}{
		{name: "65 distinct pairs", carrier: pairs(65, 65)},
		{name: "8,000 pairs of 50 groups", carrier: pairs(8000, 50)},
		// An annotation may hold 256 KiB in all (the apiserver's limit).
		{name: "200 KB", carrier: pairs(200_000/len("g10=1s,"), 50)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pcs := example(t, "valid", "podcliqueset-inference.yaml")
			pcs.SetNamespace(ns)
			a := pcs.GetAnnotations()
			a[api.AnnotationTerminationDelay] = tc.carrier
			pcs.SetAnnotations(a)
			start := time.Now()
			err := env.Client.Create(context.Background(), pcs, client.DryRunAll)
			t.Logf("%d characters: denied in %v", len(tc.carrier), time.Since(start))
			if err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'shepherd-v-pcs-3'") ||
				!strings.Contains(err.Error(), "at most 64 pairs in 4096 characters") {
				t.Fatalf("want V-PCS-3's denial naming the carrier's bounds, got %v", err)
			}
		})
	}
}

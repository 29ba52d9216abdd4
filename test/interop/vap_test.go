package interop

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// TestExportedVAPsTypeCheckAgainstServedSchemas: `shepherd export vap` with
// the pinned upstream schemas gives policies that the apiserver accepts and
// that its own type checker finds clean against the schemas it serves for
// the upstream CRDs: every built-in rule is live, none is dead.
func TestExportedVAPsTypeCheckAgainstServedSchemas(t *testing.T) {
	s, err := celrules.PinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	chain, err := webhook.NewChain(webhook.ChainOptions{Rules: celrules.Config{Schemas: s}})
	if err != nil {
		t.Fatal(err)
	}
	if inactive := chain.InactiveRules(); len(inactive) > 0 {
		t.Errorf("built-in rules inactive against the upstream schemas: %v", inactive)
	}
	vaps, bindings := chain.Engine().Export()
	if len(vaps) < 20 {
		t.Fatalf("%d policies exported, want every CEL rule (20+)", len(vaps))
	}
	ctx := context.Background()
	for i := range vaps {
		if err := env.Client.Create(ctx, vaps[i]); err != nil {
			t.Fatalf("%s: %v", vaps[i].Name, err)
		}
		// Bound in Audit only: this suite's other tests must see shepherd's
		// webhook verdicts, not the policies'.
		b := bindings[i].DeepCopy()
		b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}
		if err := env.Client.Create(ctx, b); err != nil {
			t.Fatalf("%s: %v", b.Name, err)
		}
		t.Cleanup(func() {
			_ = env.Client.Delete(context.Background(), b)
			_ = env.Client.Delete(context.Background(), vaps[i])
		})
	}
	env.TypeCheckVAPs(t, vaps)
}

package webhook

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A WorkloadPolicy whose cost stays within CEL's budget for longer than
// the webhook's timeout: a nested all() over a list of 150,000 strings
// (a 2 MB TrainJob; the time per step grows with the list, so the budget
// runs out only after tens of seconds — with 10,000 it ran out after 4 s
// on a quiet machine, too close to the deadline to tell them apart). The
// TrainJob created through the apiserver is denied by the rule, named,
// with the time it ran, within the webhook's 5 s timeout — not failed by
// the apiserver's failurePolicy after it, which would name no rule.
func TestAnExpensiveRuleIsStoppedWithinTheWebhookTimeout(t *testing.T) {
	ctx := context.Background()
	f := newPolicyFixture(t)
	name := "slow-" + f.id
	p := f.policy(t, name, "Deny", "Fail",
		"!has(object.spec.trainer.args) || object.spec.trainer.args.all(a, object.spec.trainer.args.all(b, a == b || a != b))",
		"unreachable")
	if err := k.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, name, metav1.ConditionTrue)

	tj := f.trainJob(3600)
	args := make([]any, 150000)
	for i := range args {
		args[i] = fmt.Sprintf("-a%06d", i)
	}
	if err := unstructured.SetNestedSlice(tj.Object, args, "spec", "trainer", "args"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := k.Create(ctx, tj)
	took := time.Since(start)
	t.Logf("create answered after %v: %v", took.Round(10*time.Millisecond), err)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want the rule's 422 Invalid, got %v", err)
	}
	for _, want := range []string{name, "ran out of time", "stopped after"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the denial does not say %q: %v", want, err)
		}
	}
	// The rule's 422 is the validating webhook's own answer, so it came
	// within that webhook's 5 s timeout (deploy/webhook); the create as a
	// whole also passed the mutating webhook and the apiserver's handling
	// of 2 MB, hence no tighter bound than both timeouts.
	if took >= 10*time.Second {
		t.Errorf("the create took %v, more than the two webhooks' timeouts", took)
	}
}

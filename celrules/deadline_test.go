package celrules

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// A rule whose cost stays within the CEL budget can still run for
// seconds on a large object (here a nested all() over 10,000 args: about
// 20 s to exhaust the budget on a loaded 2-core machine). Evaluated
// under a deadline it is stopped at the deadline and fails by its own
// failurePolicy, named with the time it took; a cheap rule evaluated
// after it still gives its own verdict.
func TestARuleOutOfTimeIsStoppedAtTheDeadlineAndNamed(t *testing.T) {
	const slow = "object.spec.trainer.args.all(a, object.spec.trainer.args.all(b, a == b || a != b))"
	args := make([]any, 10000)
	for i := range args {
		args[i] = fmt.Sprintf("arg-%d", i)
	}
	obj := trainJob(nil, map[string]any{"runtimeRef": map[string]any{"name": "torch"}, "trainer": map[string]any{"args": args}})
	for _, tc := range []struct {
		name       string
		policy     shepherdv1alpha1.FailurePolicy
		wantAction shepherdv1alpha1.Action
	}{
		{name: "fail", policy: shepherdv1alpha1.FailurePolicyFail, wantAction: shepherdv1alpha1.ActionDeny},
		{name: "ignore", policy: shepherdv1alpha1.FailurePolicyIgnore, wantAction: shepherdv1alpha1.ActionAudit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := policyEngine(t,
				policy("a-slow", func(s *shepherdv1alpha1.WorkloadPolicySpec) { s.FailurePolicy = tc.policy }, slow),
				policy("b-cheap", nil, "size(object.spec.trainer.args) < 10"))
			const budget = 300 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			start := time.Now()
			res := e.Evaluate(ctx, trainJobInput("CREATE", obj, nil))
			took := time.Since(start)
			// A stop is checked every 100 comprehension steps: far below
			// a second even on a loaded machine (without the deadline the
			// evaluation runs for many seconds).
			if took > budget+time.Second {
				t.Errorf("evaluation took %v under a %v deadline", took, budget)
			}
			if diff := cmp.Diff([]string{"a-slow/" + string(tc.wantAction), "b-cheap/Deny"}, rules(res)); diff != "" {
				t.Fatalf("results (-want +got):\n%s\n%+v", diff, res)
			}
			slowRes := res[0]
			if !slowRes.TimedOut || !slowRes.EvalError {
				t.Errorf("the slow rule's result is not marked timed out: %+v", slowRes)
			}
			for _, want := range []string{"rule a-slow ran out of time", "stopped after", "deadline"} {
				if !strings.Contains(slowRes.Message, want) {
					t.Errorf("message %q lacks %q", slowRes.Message, want)
				}
			}
			if res[1].TimedOut || res[1].EvalError {
				t.Errorf("the cheap rule's verdict did not stand: %+v", res[1])
			}
		})
	}
}

// Without a deadline nothing is marked timed out: a rule over its cost
// budget is an evaluation error of its own kind.
func TestACostLimitIsNotATimeout(t *testing.T) {
	args := make([]any, 2000)
	for i := range args {
		args[i] = "x"
	}
	e := policyEngine(t, policy("p", nil, "object.spec.trainer.args.all(a, object.spec.trainer.args.all(b, object.spec.trainer.args.all(c, a == b)))"))
	res := e.Evaluate(context.Background(), trainJobInput("CREATE", trainJob(nil, map[string]any{"runtimeRef": map[string]any{"name": "torch"}, "trainer": map[string]any{"args": args}}), nil))
	if len(res) != 1 || !res[0].EvalError || res[0].TimedOut || !strings.Contains(res[0].Message, "cost limit exceeded") {
		t.Fatalf("got %+v, want one cost-limit evaluation error, not a timeout", res)
	}
	// It says what to do.
	if !strings.HasSuffix(res[0].Message, "make its lists or strings shorter, or ask a platform admin to make the rule cheaper") {
		t.Errorf("message %q does not say what to do", res[0].Message)
	}
}

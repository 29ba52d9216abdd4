package webhook

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/corpus"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

// policyFixture is a namespace labelled for the test's policies and a
// runtime its TrainJobs can reference.
type policyFixture struct {
	id, ns, runtime string
}

func newPolicyFixture(t *testing.T) *policyFixture {
	t.Helper()
	f := &policyFixture{id: rand.String(6)}
	f.ns = namespace(t, map[string]string{"policy-test": f.id})
	f.runtime = "rt-" + f.id
	rt := testkit.ClusterTrainingRuntime(f.runtime, "pytorch/pytorch").
		Set(map[string]any{"numNodes": int64(1), "torch": map[string]any{}}, "spec", "mlPolicy").Obj()
	if err := k.Create(context.Background(), rt); err != nil {
		t.Fatalf("creating runtime: %v", err)
	}
	return f
}

func (f *policyFixture) createTrainJob(t *testing.T, deadline int64) error {
	t.Helper()
	return k.Create(context.Background(), f.trainJob(deadline))
}

// trainJob is a two-node TrainJob on the fixture's runtime with the given
// activeDeadlineSeconds, its name generated.
func (f *policyFixture) trainJob(deadline int64) *unstructured.Unstructured {
	return testkit.TrainJob(f.ns, "", f.runtime, 2).GenerateName("tj-").Image("docker.io/torch-run").
		Set(deadline, "spec", "activeDeadlineSeconds").Obj()
}

// policy builds a WorkloadPolicy on TrainJobs in the fixture's namespace.
func (f *policyFixture) policy(t *testing.T, name, action, failurePolicy, expression, message string) *shepherdv1alpha1.WorkloadPolicy {
	t.Helper()
	p := testkit.TrainJobPolicy(name).
		Action(shepherdv1alpha1.Action(action)).FailurePolicy(shepherdv1alpha1.FailurePolicy(failurePolicy)).
		NamespaceLabels(map[string]string{"policy-test": f.id}).
		Validation(expression, message).FieldPath("spec.activeDeadlineSeconds").
		Obj()
	t.Cleanup(func() { _ = k.Delete(context.Background(), p) })
	return p
}

// waitPolicy waits until the policy's status describes its current
// generation with Ready = want, and returns it.
func waitPolicy(t *testing.T, name string, want metav1.ConditionStatus) *shepherdv1alpha1.WorkloadPolicy {
	t.Helper()
	p := &shepherdv1alpha1.WorkloadPolicy{}
	testkit.Eventually(t, timeout, fmt.Sprintf("WorkloadPolicy %s Ready=%s", name, want), func() (bool, error) {
		if err := k.Get(context.Background(), client.ObjectKey{Name: name}, p); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, api.ConditionPolicyReady)
		return c != nil && c.Status == want && c.ObservedGeneration == p.Generation && p.Status.ObservedGeneration == p.Generation, nil
	})
	return p
}

const maxDayExpr = "object.spec.?activeDeadlineSeconds.orValue(0) > 0 && object.spec.activeDeadlineSeconds <= 86400"
const maxDayMsg = "research TrainJobs must set activeDeadlineSeconds of at most one day"

func TestWorkloadPolicyHotReload(t *testing.T) {
	ctx := context.Background()
	f := newPolicyFixture(t)
	deadlines := "deadlines-" + f.id
	labels := "warn-short-" + f.id

	// Before any policy: a week-long deadline is fine.
	if err := f.createTrainJob(t, 7*86400); err != nil {
		t.Fatalf("before the policy: %v", err)
	}

	// Create → enforced.
	p := f.policy(t, deadlines, "Deny", "Fail", maxDayExpr, maxDayMsg)
	if err := k.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, deadlines, metav1.ConditionTrue)
	causes := corpus.ShepherdCauses(t, f.createTrainJob(t, 7*86400))
	if !hasCause(causes, "spec.activeDeadlineSeconds", maxDayMsg+" (shepherd "+deadlines+")") {
		t.Errorf("denial causes %+v lack the policy's message, naming it, on spec.activeDeadlineSeconds", causes)
	}
	if err := f.createTrainJob(t, 3600); err != nil {
		t.Errorf("a compliant TrainJob is denied: %v", err)
	}

	// A second, Warn policy.
	w := f.policy(t, labels, "Warn", "Fail", "object.spec.activeDeadlineSeconds >= 600", "deadlines under ten minutes rarely finish")
	if err := k.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, labels, metav1.ConditionTrue)

	// Break the first policy. Admission refuses the update, with the
	// compile error as a cause on the expression's field, and the policy
	// stays as it was.
	if err := k.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Validations[0].Expression = "object.spec.noSuchField > 1"
	err := k.Update(ctx, p)
	if !apierrors.IsInvalid(err) || !strings.Contains(corpus.KubectlMessage(err), "spec.validations[0].expression: Invalid value: \"object.spec.noSuchField > 1\"") {
		t.Fatalf("an update that does not compile: want a 422 naming spec.validations[0].expression, got %v", err)
	}
	// Labelled apply-unchecked (as a policy applied ahead of its kind's
	// CRD) before the broken update — the apiserver sends an UPDATE when
	// the old or the new object matches the objectSelector — it is
	// stored: it reports every compile error and is no longer applied at
	// all; the Warn policy keeps working.
	if err := k.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	p.Labels = map[string]string{api.LabelApplyUnchecked: "true"}
	if err := k.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Validations[0].Expression = "object.spec.noSuchField > 1"
	if err := k.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	broken := waitPolicy(t, deadlines, metav1.ConditionFalse)
	c := meta.FindStatusCondition(broken.Status.Conditions, api.ConditionPolicyReady)
	if c.Reason != api.ReasonCompileError || !strings.Contains(c.Message, "noSuchField") {
		t.Errorf("Ready condition %+v: want reason CompileError naming the field", c)
	}
	if len(broken.Status.CompileErrors) != 1 || broken.Status.CompileErrors[0].FieldPath != "spec.validations[0].expression" {
		t.Errorf("compileErrors %+v: want one on spec.validations[0].expression", broken.Status.CompileErrors)
	}
	auditor, _ := tokens(t)
	if _, body := getMetrics(t, "/metrics", auditor); !strings.Contains(string(body), `shepherd_policy_compile_errors_total{policy="`+deadlines+`"} 1`) {
		t.Errorf("/metrics does not count the compile error of %s", deadlines)
	}
	warns.Take()
	if err := f.createTrainJob(t, 7*86400); err != nil {
		t.Errorf("a broken policy still denies: %v", err)
	}
	warns.Take()
	if err := f.createTrainJob(t, 60); err != nil {
		t.Errorf("create with a short deadline: %v", err)
	}
	if got := warns.Take(); !containsPart(got, "spec.activeDeadlineSeconds: deadlines under ten minutes rarely finish (shepherd "+labels+")") {
		t.Errorf("the Warn policy was disturbed by the broken one: warnings %q", got)
	}

	// Fix it → enforced again.
	if err := k.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Validations[0].Expression = maxDayExpr
	if err := k.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	fixed := waitPolicy(t, deadlines, metav1.ConditionTrue)
	if len(fixed.Status.CompileErrors) != 0 {
		t.Errorf("compileErrors left after the fix: %+v", fixed.Status.CompileErrors)
	}
	corpus.ShepherdCauses(t, f.createTrainJob(t, 7*86400))

	// Delete → no longer enforced.
	if err := k.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, timeout, "deleted policy no longer enforced", func() (bool, error) {
		err := f.createTrainJob(t, 7*86400)
		if err != nil && !apierrors.IsInvalid(err) {
			return false, err
		}
		return err == nil, nil
	})

	// Every verdict is counted by rule, action and kind.
	if _, body := getMetrics(t, "/metrics", auditor); !strings.Contains(string(body), `shepherd_policy_verdicts_total{action="Deny",kind="TrainJob",rule="`+deadlines+`"}`) {
		t.Errorf("/metrics does not count the verdicts of %s", deadlines)
	}

	// Every denial of the policy is in the audit trail.
	recs := auditRecords(t, "rule="+deadlines+"&namespace="+f.ns, func(rs []audit.Record) bool { return len(rs) >= 2 })
	for _, r := range recs {
		if r.Action != "Deny" || r.Kind != "TrainJob" || r.Field != "spec.activeDeadlineSeconds" || r.Message != maxDayMsg+" (shepherd "+deadlines+")" {
			t.Errorf("audit record %+v", r)
		}
	}
}

func TestCELRuntimeErrorAsTheAPIServerShowsIt(t *testing.T) {
	ctx := context.Background()
	f := newPolicyFixture(t)
	// Type-checks (int / int) but divides by zero at run time.
	const divByZero = "object.spec.trainer.numNodes / (object.spec.trainer.numNodes - object.spec.trainer.numNodes) > 0"

	failing := "div-fail-" + f.id
	p := f.policy(t, failing, "Deny", "Fail", divByZero, "unreachable")
	if err := k.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, failing, metav1.ConditionTrue)
	err := f.createTrainJob(t, 3600)
	corpus.ShepherdCauses(t, err)
	if !strings.Contains(err.Error(), failing) || !strings.Contains(strings.ToLower(err.Error()), "division by zero") {
		t.Errorf("the apiserver's error does not name the rule and the CEL error: %v", err)
	}
	if err := k.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}

	ignoring := "div-ignore-" + f.id
	q := f.policy(t, ignoring, "Deny", "Ignore", divByZero, "unreachable")
	if err := k.Create(ctx, q); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, ignoring, metav1.ConditionTrue)
	// The failing policy may take a moment to leave every code path; wait
	// for the Ignore one to be the only one that answers.
	testkit.Eventually(t, timeout, "failurePolicy Ignore admits", func() (bool, error) {
		warns.Take()
		err := f.createTrainJob(t, 3600)
		if err != nil && !apierrors.IsInvalid(err) {
			return false, err
		}
		return err == nil, nil
	})
	// As the exported ValidatingAdmissionPolicy does, the error is ignored
	// silently: no warning (the audit trail records it).
	if got := warns.Take(); containsPart(got, ignoring) {
		t.Errorf("failurePolicy Ignore: warnings %q name the rule; the apiserver gives none", got)
	}
}

func containsPart(list []string, part string) bool {
	for _, s := range list {
		if strings.Contains(s, part) {
			return true
		}
	}
	return false
}

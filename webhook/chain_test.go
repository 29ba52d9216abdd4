package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/seedcrds"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

var trainJobKind = metav1.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"}

func newChain(t testing.TB) *Chain {
	t.Helper()
	// No runtimes exist here: V-TJ-3 is off so that the TrainJobs of these
	// tests are judged by the rules under test alone.
	c, err := NewChain(ChainOptions{Rules: celrulesConfig("V-TJ-3")})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// trainJob is a research team's TrainJob with activeDeadlineSeconds
// deadline (0 is sent as 0), as a request carries it.
func trainJob(deadline int) []byte {
	return testkit.TrainJob("ns", "tj", "torch", 0).Labels("team=research").Set(deadline, "spec", "activeDeadlineSeconds").JSON()
}

// policy is a TrainJob policy of one validation on
// spec.activeDeadlineSeconds, at resourceVersion rv.
func policy(name, rv, expr string) *shepherdv1alpha1.WorkloadPolicy {
	p := testkit.TrainJobPolicy(name).
		Validation(expr, "research TrainJobs must set activeDeadlineSeconds of at most one day").
		FieldPath("spec.activeDeadlineSeconds").Obj()
	p.ResourceVersion = rv
	return p
}

func ruleViolations(v *Verdict, rule string) []Violation {
	var out []Violation
	for _, viol := range v.Violations {
		if viol.Rule == rule {
			out = append(out, viol)
		}
	}
	return out
}

func TestPolicyDeniesWithItsNameAndField(t *testing.T) {
	c := newChain(t)
	if errs := c.SetPolicy(policy("research-deadlines", "1", "object.spec.?activeDeadlineSeconds.orValue(0) <= 86400")); len(errs) > 0 {
		t.Fatalf("SetPolicy: %v", errs)
	}
	v := c.Admit(context.Background(), &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Object: trainJob(100000)})
	got := ruleViolations(v, "research-deadlines")
	if v.Allowed || len(got) != 1 || got[0].Field != "spec.activeDeadlineSeconds" || got[0].Action != ActionDeny {
		t.Fatalf("verdict %+v, want one Deny by research-deadlines on spec.activeDeadlineSeconds", v)
	}
	if v := c.Admit(context.Background(), &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Object: trainJob(3600)}); len(ruleViolations(v, "research-deadlines")) != 0 {
		t.Fatalf("a compliant TrainJob got %+v", v.Violations)
	}
}

func TestPolicyThatFailsToCompileIsNotAppliedAtAll(t *testing.T) {
	c := newChain(t)
	if errs := c.SetPolicy(policy("p", "1", "object.spec.?activeDeadlineSeconds.orValue(0) <= 86400")); len(errs) > 0 {
		t.Fatal(errs)
	}
	// The new version misspells a field: it must be rejected with the path
	// of the expression, and the old version must stop applying too.
	errs := c.SetPolicy(policy("p", "2", "object.spec.activeDeadlineSecond <= 86400"))
	if len(errs) != 1 || errs[0].Field != "spec.validations[0].expression" || !strings.Contains(errs[0].Detail, "undefined field 'activeDeadlineSecond'") {
		t.Fatalf("errors %v, want one type-check error on spec.validations[0].expression", errs)
	}
	v := c.Admit(context.Background(), &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Object: trainJob(100000)})
	if len(ruleViolations(v, "p")) != 0 {
		t.Fatalf("a policy that failed to compile still applies: %+v", v.Violations)
	}
	// The same failed version is answered from the cache, errors included.
	if again := c.SetPolicy(policy("p", "2", "object.spec.activeDeadlineSecond <= 86400")); len(again) != 1 {
		t.Fatalf("resync of the failed version returned %v", again)
	}
	c.DeletePolicy("p")
	for _, r := range c.Rules() {
		if r.ID == "p" {
			t.Fatal("deleted policy still listed")
		}
	}
}

func TestPolicyCompileErrorsAreReportedPerExpression(t *testing.T) {
	c := newChain(t)
	p := policy("p", "1", "object.spec.activeDeadlineSeconds")
	p.Spec.Validations = append(p.Spec.Validations, shepherdv1alpha1.Validation{Expression: "1 +"})
	errs := c.SetPolicy(p)
	if len(errs) != 2 || errs[0].Field != "spec.validations[0].expression" || errs[1].Field != "spec.validations[1].expression" {
		t.Fatalf("errors %v, want one for each validation", errs)
	}
	if !strings.Contains(errs[0].Detail, "must evaluate to bool") {
		t.Errorf("non-bool validation error %q does not say so", errs[0].Detail)
	}
}

// With failurePolicy Ignore the apiserver admits silently; shepherd admits
// too, without a warning (the exported policy gives none), and keeps an
// Audit violation for the audit trail.
func TestEvaluationErrorDeniesNamingTheRuleOrIsAuditedWhenIgnored(t *testing.T) {
	c := newChain(t)
	// spec.trainer is absent: a runtime "no such key" error.
	p := policy("needs-trainer", "1", "object.spec.trainer.numNodes > 0")
	if errs := c.SetPolicy(p); len(errs) > 0 {
		t.Fatal(errs)
	}
	v := c.Admit(context.Background(), &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Object: trainJob(60)})
	got := ruleViolations(v, "needs-trainer")
	if v.Allowed || len(got) != 1 || !strings.Contains(got[0].Message, "needs-trainer") {
		t.Fatalf("verdict %+v, want a Deny naming the rule", v)
	}
	p.ResourceVersion = "2"
	p.Spec.FailurePolicy = shepherdv1alpha1.FailurePolicyIgnore
	if errs := c.SetPolicy(p); len(errs) > 0 {
		t.Fatal(errs)
	}
	v = c.Admit(context.Background(), &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Object: trainJob(60)})
	got = ruleViolations(v, "needs-trainer")
	if !v.Allowed || len(v.Warnings) != 0 || len(got) != 1 || got[0].Action != ActionAudit || !strings.Contains(got[0].Message, "failurePolicy Ignore") {
		t.Fatalf("verdict %+v, want allowed, no warning, one Audit violation naming the rule", v)
	}
}

func TestCostLimitOverrunDeniesNamingTheRule(t *testing.T) {
	c := newChain(t)
	p := policy("expensive", "1", "[0,1,2,3,4,5,6,7,8,9].all(a, [0,1,2,3,4,5,6,7,8,9].all(b, [0,1,2,3,4,5,6,7,8,9].all(c, [0,1,2,3,4,5,6,7,8,9].all(d, [0,1,2,3,4,5,6,7,8,9].all(e, [0,1,2,3,4,5,6,7,8,9].all(f, [0,1,2,3,4,5,6,7,8,9].all(g, a+b+c+d+e+f+g >= 0)))))))")
	if errs := c.SetPolicy(p); len(errs) > 0 {
		t.Fatal(errs)
	}
	v := c.Admit(context.Background(), &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Object: trainJob(60)})
	got := ruleViolations(v, "expensive")
	if v.Allowed || len(got) != 1 || !strings.Contains(got[0].Message, "expensive") || !strings.Contains(got[0].Message, "cost") {
		t.Fatalf("verdict %+v, want a Deny naming the rule and the cost limit", v)
	}
}

func TestUndecodableObjectIsDeniedWithTheDecodeError(t *testing.T) {
	c := newChain(t)
	for _, raw := range []string{`{"spec":`, `[1,2]`, `null`} {
		v := c.Admit(context.Background(), &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Object: []byte(raw)})
		if v.Allowed || len(v.Violations) != 1 || v.Violations[0].Rule != RuleDecode || !strings.Contains(v.Violations[0].Message, "cannot decode") {
			t.Errorf("%s: verdict %+v, want one decode Deny", raw, v)
		}
	}
}

func TestDefaultPatchTouchesOnlyDefaultedPathsAndKeepsUnknownFields(t *testing.T) {
	c := newChain(t)
	raw := []byte(`{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"p","namespace":"ns"},"spec":{"replicas":1,"futureField":{"x":[1,2.5,"y"]},"template":{"cliques":[{"name":"a","spec":{"replicas":2,"podSpec":{"containers":[{"name":"c","image":"i"}]}}}]}}}`)
	v := c.Default(context.Background(), &Request{Operation: admissionv1.Create, Kind: metav1.GroupVersionKind{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"}, Namespace: "ns", Object: raw})
	if !v.Allowed {
		t.Fatalf("denied: %+v", v.Violations)
	}
	var paths []string
	for _, op := range v.Patch {
		if op.Operation != "add" {
			t.Errorf("patch op %v is not an add", op)
		}
		paths = append(paths, op.Path)
	}
	if want := "/spec/template/cliques/0/spec/minAvailable,/spec/workloadType"; strings.Join(paths, ",") != want {
		t.Errorf("patch paths %v, want %s", paths, want)
	}
	b, _ := json.Marshal(v.Object["spec"].(map[string]any)["futureField"])
	if string(b) != `{"x":[1,2.5,"y"]}` {
		t.Errorf("unknown field changed: %s", b)
	}
}

func TestDeleteIsNotDefaulted(t *testing.T) {
	c := newChain(t)
	v := c.Admit(context.Background(), &Request{Operation: admissionv1.Delete, Kind: trainJobKind, Namespace: "ns", OldObject: trainJob(0)})
	if !v.Allowed || len(v.Patch) != 0 {
		t.Fatalf("DELETE verdict %+v", v)
	}
}

func TestUnknownKindIsAllowedUntouched(t *testing.T) {
	c := newChain(t)
	v := c.Admit(context.Background(), &Request{Operation: admissionv1.Create, Kind: metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Namespace: "ns", Object: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`)})
	if !v.Allowed || len(v.Patch) != 0 || len(v.Violations) != 0 {
		t.Fatalf("verdict %+v", v)
	}
}

func TestDisabledRuleDoesNotFire(t *testing.T) {
	c, err := NewChain(ChainOptions{Rules: celrulesConfig("V-TJ-1", "V-TJ-3")})
	if err != nil {
		t.Fatal(err)
	}
	v := c.Admit(context.Background(), &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Object: trainJob(0)})
	if !v.Allowed {
		t.Fatalf("disabled rules still deny: %+v", v.Violations)
	}
	for _, r := range c.Rules() {
		if (r.ID == "V-TJ-1" || r.ID == "V-TJ-3") && r.Enabled {
			t.Errorf("%s listed as enabled", r.ID)
		}
	}
}

// TestConcurrentAdmissionAndPolicyUpdates runs admissions while policies
// are replaced; run with -race to check the chain's synchronisation.
func TestConcurrentAdmissionAndPolicyUpdates(t *testing.T) {
	c := newChain(t)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				v := c.Admit(context.Background(), &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Object: trainJob(0)})
				if v.Allowed {
					t.Error("V-TJ-1 did not deny during policy updates")
					return
				}
			}
		}()
	}
	for i := 0; i < 20; i++ {
		c.SetPolicy(policy("p", fmt.Sprint(i), "object.spec.?activeDeadlineSeconds.orValue(0) <= 86400"))
		if i%5 == 0 {
			c.DeletePolicy("p")
		}
	}
	wg.Wait()
}

func celrulesConfig(disabled ...string) celrules.Config {
	return seedcrds.Config(celrules.Config{DisabledRules: disabled})
}

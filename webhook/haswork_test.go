package webhook

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/celrules"
)

// trainerWebhooks is Trainer v2.3.0's TrainJob validator as its manifests
// register it.
func trainerWebhooks() []admissionregistrationv1.ValidatingWebhookConfiguration {
	return []admissionregistrationv1.ValidatingWebhookConfiguration{{
		ObjectMeta: metav1.ObjectMeta{Name: "validator.trainer.kubeflow.org"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:          "validator.trainjob.trainer.kubeflow.org",
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"trainer.kubeflow.org"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"trainjobs"}},
			}},
		}},
	}}
}

// Beside Trainer's CRD and webhook (issue 31), a TrainJob create leaves
// shepherd nothing to do: V-TJ-1 is the CRD's minimum and V-TJ-3 Trainer's
// validator; the chain says so, does not run V-TJ-3, and HasWork lets the
// configurations keep the apiserver from calling. Its UPDATEs still have
// work (V-TJ-2's addition and removal, V-TJ-4); a WorkloadPolicy on
// TrainJob creates brings the create back; Trainer's webhook gone, V-TJ-3
// stands up again.
func TestNothingToDoWhereUpstreamEnforcesEverything(t *testing.T) {
	c, err := NewChain(ChainOptions{Rules: celrules.Config{StandDown: true, OwnWebhooks: []string{"shepherd", "defaults.shepherd.dev"}}})
	if err != nil {
		t.Fatal(err)
	}
	trainjobs := schema.GroupResource{Group: "trainer.kubeflow.org", Resource: "trainjobs"}
	jobsets := schema.GroupResource{Group: "jobset.x-k8s.io", Resource: "jobsets"}
	type work struct{ TJCreate, TJUpdate, JSCreateMutating, JSCreateValidating bool }
	now := func() work {
		return work{c.HasWork(false, trainjobs, "CREATE"), c.HasWork(false, trainjobs, "UPDATE"), c.HasWork(true, jobsets, "CREATE"), c.HasWork(false, jobsets, "CREATE")}
	}
	if diff := cmp.Diff(work{true, true, true, true}, now()); diff != "" {
		t.Errorf("before Trainer's webhook is seen (-want +got):\n%s", diff)
	}
	v0 := c.Version()
	changed, err := c.SetUpstreamWebhooks(trainerWebhooks())
	if err != nil || !changed || c.Version() == v0 {
		t.Fatalf("Trainer's webhook registered: changed %v, version %d -> %d, err %v; want a change", changed, v0, c.Version(), err)
	}
	if diff := cmp.Diff(work{false, true, true, true}, now()); diff != "" {
		t.Errorf("beside Trainer's webhook (-want +got):\n%s", diff)
	}
	if why := c.InactiveRules()["V-TJ-3"]; why == "" {
		t.Errorf("V-TJ-3 not listed inactive: %v", c.InactiveRules())
	}
	var listed bool
	for _, r := range c.Rules() {
		listed = listed || (r.ID == "V-TJ-3" && r.Inactive != "" && r.EnforcedUpstream != "")
	}
	if !listed {
		t.Error("the rule listing does not say V-TJ-3 is enforced upstream")
	}
	// V-TJ-3 is not run: a TrainJob on a missing runtime draws no
	// violation of it from shepherd (Trainer denies it).
	tj := &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Name: "tj", Object: trainJob(0)}
	for _, viol := range c.Validate(context.Background(), tj).Violations {
		if viol.Rule == "V-TJ-3" || viol.Rule == "V-TJ-1" {
			t.Errorf("violation of %s, which upstream enforces: %+v", viol.Rule, viol)
		}
	}

	if errs := c.SetPolicy(policy("short-research", "1", "object.spec.activeDeadlineSeconds <= 86400")); len(errs) > 0 {
		t.Fatal(errs)
	}
	if !c.HasWork(false, trainjobs, "CREATE") {
		t.Error("a WorkloadPolicy on TrainJobs gives the create work again")
	}
	c.DeletePolicy("short-research")

	if changed, err := c.SetUpstreamWebhooks(nil); err != nil || !changed {
		t.Fatalf("Trainer's webhook removed: changed %v, err %v", changed, err)
	}
	if !c.HasWork(false, trainjobs, "CREATE") || c.InactiveRules()["V-TJ-3"] != "" {
		t.Errorf("Trainer's webhook gone: V-TJ-3 must stand up again (inactive %v)", c.InactiveRules())
	}
}

package celrules

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ruleOn is a compiled rule with only what the index reads: its ID and
// matchConstraints' resourceRules (groups × resources each).
func ruleOn(id string, rules ...[2][]string) *compiledRule {
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConstraints: &admissionregistrationv1.MatchResources{},
	}}
	for _, r := range rules {
		vap.Spec.MatchConstraints.ResourceRules = append(vap.Spec.MatchConstraints.ResourceRules, admissionregistrationv1.NamedRuleWithOperations{
			RuleWithOperations: admissionregistrationv1.RuleWithOperations{Rule: admissionregistrationv1.Rule{APIGroups: r[0], Resources: r[1]}},
		})
	}
	cr := &compiledRule{rule: Rule{ID: id}, policy: vap}
	cr.groupResources = cr.resources()
	return cr
}

func TestCandidatesKeepEveryRuleThatCanMatch(t *testing.T) {
	g := func(s ...string) []string { return s }
	ordered := []*compiledRule{
		ruleOn("tj", [2][]string{g("trainer.kubeflow.org"), g("trainjobs")}),
		ruleOn("runtimes", [2][]string{g("trainer.kubeflow.org"), g("trainingruntimes", "clustertrainingruntimes")}),
		ruleOn("pcs", [2][]string{g("grove.io"), g("podcliquesets")}),
		ruleOn("any-group-trainjobs", [2][]string{g("*"), g("trainjobs")}),
		ruleOn("all-of-grove", [2][]string{g("grove.io"), g("*")}),
		ruleOn("status-only", [2][]string{g("trainer.kubeflow.org"), g("trainjobs/status")}),
		ruleOn("everything"), // no resourceRules: the matcher matches every resource
		ruleOn("two-rules", [2][]string{g("jobset.x-k8s.io"), g("jobsets")}, [2][]string{g("grove.io"), g("podcliques")}),
	}
	c := newCandidates(ordered)
	for _, tc := range []struct {
		gr   schema.GroupResource
		want []string
	}{
		{schema.GroupResource{Group: "trainer.kubeflow.org", Resource: "trainjobs"}, []string{"tj", "any-group-trainjobs", "status-only", "everything"}},
		{schema.GroupResource{Group: "trainer.kubeflow.org", Resource: "clustertrainingruntimes"}, []string{"runtimes", "everything"}},
		{schema.GroupResource{Group: "grove.io", Resource: "podcliquesets"}, []string{"pcs", "all-of-grove", "everything"}},
		{schema.GroupResource{Group: "grove.io", Resource: "podcliques"}, []string{"all-of-grove", "everything", "two-rules"}},
		{schema.GroupResource{Group: "jobset.x-k8s.io", Resource: "jobsets"}, []string{"everything", "two-rules"}},
		// Named by no rule: filtered on the fly, wildcards included.
		{schema.GroupResource{Group: "example.com", Resource: "trainjobs"}, []string{"any-group-trainjobs", "everything"}},
		{schema.GroupResource{Group: "grove.io", Resource: "podcliquescalinggroups"}, []string{"all-of-grove", "everything"}},
		{schema.GroupResource{Group: "", Resource: "pods"}, []string{"everything"}},
	} {
		var got []string
		for _, cr := range c.of(tc.gr) {
			got = append(got, cr.rule.ID)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("candidates for %s (-want +got):\n%s", tc.gr, diff)
		}
	}
}

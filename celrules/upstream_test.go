package celrules

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

// trainerValidator is Trainer v2.3.0's TrainJob validating webhook as its
// manifests register it, in a configuration named cfg, changed by edit.
func trainerValidator(cfg string, edit func(*admissionregistrationv1.ValidatingWebhook)) admissionregistrationv1.ValidatingWebhookConfiguration {
	h := admissionregistrationv1.ValidatingWebhook{
		Name:          "validator.trainjob.trainer.kubeflow.org",
		FailurePolicy: ptr.To(admissionregistrationv1.Fail),
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"trainer.kubeflow.org"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"trainjobs"}},
		}},
		NamespaceSelector: &metav1.LabelSelector{}, // as the apiserver defaults it
	}
	if edit != nil {
		edit(&h)
	}
	return admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: cfg}, Webhooks: []admissionregistrationv1.ValidatingWebhook{h}}
}

// On the pinned upstream CRDs (Trainer v2.3.0, JobSet v0.12.0), serve
// (StandDown) leaves to the CRD exactly the rules the CRD enforces whole —
// V-TJ-1 (minimum 1), V-JS-1 (enum), V-JS-3 (its spec-level rule) — and
// keeps the ones it enforces only in part: V-TJ-2 forbids adding or
// removing activeDeadlineSeconds, which the CRD's transition rule (self ==
// oldSelf) never checks. check and export judge every rule and name the
// upstream layer.
func TestRulesStandDownWhereTheCRDEnforcesThem(t *testing.T) {
	wantUpstream := []string{"V-JS-1", "V-JS-3", "V-TJ-1"}
	for _, standDown := range []bool{false, true} {
		e, err := NewEngine(Config{StandDown: standDown})
		if err != nil {
			t.Fatal(err)
		}
		var upstream, inactive []string
		for _, r := range e.Rules() {
			if r.EnforcedUpstream != "" {
				upstream = append(upstream, r.ID)
			}
			if strings.HasPrefix(r.Inactive, "enforced by ") {
				inactive = append(inactive, r.ID)
			}
		}
		slices.Sort(upstream)
		slices.Sort(inactive)
		if diff := cmp.Diff(wantUpstream, upstream); diff != "" {
			t.Errorf("StandDown %v: rules enforced upstream (-want +got):\n%s", standDown, diff)
		}
		var wantInactive []string
		if standDown {
			wantInactive = wantUpstream
		}
		if diff := cmp.Diff(wantInactive, inactive); diff != "" {
			t.Errorf("StandDown %v: rules inactive as enforced upstream (-want +got):\n%s", standDown, diff)
		}
		if why := e.Inactive()["V-TJ-1"]; standDown && !strings.Contains(why, "TrainJob CRD (minimum 1 on spec.activeDeadlineSeconds") {
			t.Errorf("V-TJ-1 inactive because %q, want it to name the CRD's minimum", why)
		}
		// No rule left on a TrainJob create where the CRD stands in.
		trainjobs := schema.GroupResource{Group: "trainer.kubeflow.org", Resource: "trainjobs"}
		if got := e.Judges(trainjobs, "CREATE"); got == standDown {
			t.Errorf("StandDown %v: Judges(trainjobs, CREATE) = %v", standDown, got)
		}
		if !e.Judges(trainjobs, "UPDATE") {
			t.Errorf("StandDown %v: V-TJ-2 judges TrainJob UPDATEs (addition and removal are shepherd's)", standDown)
		}
	}
}

func TestUpstreamWebhookEvidence(t *testing.T) {
	s, err := PinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	tj := schema.GroupKind{Group: "trainer.kubeflow.org", Kind: "TrainJob"}
	ev := []Upstream{{Webhook: &WebhookEvidence{Name: "validator.trainjob.trainer.kubeflow.org", Operation: "CREATE"}}}
	for _, tc := range []struct {
		name  string
		hooks []admissionregistrationv1.ValidatingWebhookConfiguration
		want  bool
	}{
		{"registered", []admissionregistrationv1.ValidatingWebhookConfiguration{trainerValidator("validator.trainer.kubeflow.org", nil)}, true},
		{"none registered (offline)", nil, false},
		{"failurePolicy Ignore lets requests through when it is down", []admissionregistrationv1.ValidatingWebhookConfiguration{trainerValidator("v", func(h *admissionregistrationv1.ValidatingWebhook) {
			h.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		})}, false},
		{"an objectSelector leaves objects out", []admissionregistrationv1.ValidatingWebhookConfiguration{trainerValidator("v", func(h *admissionregistrationv1.ValidatingWebhook) {
			h.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"validate": "yes"}}
		})}, false},
		{"a matchCondition leaves requests out", []admissionregistrationv1.ValidatingWebhookConfiguration{trainerValidator("v", func(h *admissionregistrationv1.ValidatingWebhook) {
			h.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "x", Expression: "true"}}
		})}, false},
		{"UPDATE only", []admissionregistrationv1.ValidatingWebhookConfiguration{trainerValidator("v", func(h *admissionregistrationv1.ValidatingWebhook) {
			h.Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Update}
		})}, false},
		{"wildcards cover it", []admissionregistrationv1.ValidatingWebhookConfiguration{trainerValidator("v", func(h *admissionregistrationv1.ValidatingWebhook) {
			h.Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
			h.Rules[0].Resources = []string{"*"}
		})}, true},
		{"a webhook of that name in shepherd's own configuration is no evidence", []admissionregistrationv1.ValidatingWebhookConfiguration{trainerValidator("shepherd", nil)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, got := UpstreamState{Schemas: s, Webhooks: tc.hooks, Own: []string{"shepherd"}}.Enforced(tj, ev)
			if got != tc.want {
				t.Errorf("enforced = %v (%s), want %v", got, why, tc.want)
			}
			if got && !strings.Contains(why, "validator.trainjob.trainer.kubeflow.org") {
				t.Errorf("reason %q does not name the webhook", why)
			}
		})
	}
}

// A change of the upstream webhooks that moves no rule does not change the
// rule set's version (the background audit would judge everything again).
func TestSetUpstreamWebhooksVersion(t *testing.T) {
	e, err := NewEngine(Config{StandDown: true})
	if err != nil {
		t.Fatal(err)
	}
	v := e.Version()
	changed, err := e.SetUpstreamWebhooks([]admissionregistrationv1.ValidatingWebhookConfiguration{trainerValidator("trainer", nil)})
	if err != nil || changed || e.Version() != v {
		t.Errorf("no CEL rule carries webhook evidence: changed %v, version %d -> %d, err %v", changed, v, e.Version(), err)
	}
}

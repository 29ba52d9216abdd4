package offline

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
)

// TestImpactReportsWhatAPolicyWouldDo: of two stored TrainJobs, the one
// without a team label would be denied by the policy, unless an exception
// exempts its namespace; an object of a kind the policy does not name is
// not judged.
func TestImpactReportsWhatAPolicyWouldDo(t *testing.T) {
	schemas, err := celrules.PinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	policy := &shepherdv1alpha1.WorkloadPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "team-label"},
		Spec: shepherdv1alpha1.WorkloadPolicySpec{
			Match: shepherdv1alpha1.Match{Resources: []shepherdv1alpha1.ResourceRule{{APIGroups: []string{"trainer.kubeflow.org"}, Kinds: []string{"TrainJob"}}}},
			Validations: []shepherdv1alpha1.Validation{{
				Expression: "object.metadata.?labels.?team.orValue('') != ''", Message: "name a team", FieldPath: "metadata.labels",
			}},
		},
	}
	obj := func(kind, ns, name string, labels map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind, "spec": map[string]any{}}}
		u.SetNamespace(ns)
		u.SetName(name)
		u.SetLabels(labels)
		return u
	}
	in := ImpactInput{
		Config:   celrules.Config{Schemas: schemas},
		Policies: []*shepherdv1alpha1.WorkloadPolicy{policy},
		Objects: []*unstructured.Unstructured{
			obj("TrainJob", "a", "labelled", map[string]string{"team": "nlp"}),
			obj("TrainJob", "a", "bare", nil),
			obj("TrainJob", "legacy", "old", nil),
			obj("TrainingRuntime", "a", "rt", nil),
		},
		WorkloadAPI: true, Source: "test", Timeout: 10 * time.Second,
		Exceptions: []*shepherdv1alpha1.PolicyException{{
			ObjectMeta: metav1.ObjectMeta{Name: "legacy"},
			Spec: shepherdv1alpha1.PolicyExceptionSpec{Rules: []string{"team-label"},
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "legacy"}}},
		}},
	}
	rep, err := Impact(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	want := &ImpactReport{
		Source: "test", Evaluated: 3, WouldDeny: 1,
		Rules: []ImpactPolicy{{Rule: "team-label", Action: "Deny", ViolatingObjects: 1}},
		Objects: []ImpactObject{
			{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Namespace: "a", Name: "bare", Violations: []ImpactViolation{
				{Rule: "team-label", Action: "Deny", Field: "metadata.labels", Message: "name a team (shepherd team-label)"}}},
			{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Namespace: "legacy", Name: "old", Violations: []ImpactViolation{
				{Rule: "team-label", Action: "Exempt", Field: "metadata.labels", Message: "name a team (shepherd team-label)", Exception: "legacy"}}},
		},
	}
	if diff := cmp.Diff(want, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
}

package testkit

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// PolicyBuilder builds a WorkloadPolicy: Deny, on CREATE and UPDATE of one
// kind, unless told otherwise.
type PolicyBuilder struct {
	p *shepherdv1alpha1.WorkloadPolicy
}

// Policy starts a WorkloadPolicy named name that denies CREATE and UPDATE
// of kind in group.
func Policy(name, group, kind string) *PolicyBuilder {
	return &PolicyBuilder{p: &shepherdv1alpha1.WorkloadPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: shepherdv1alpha1.GroupVersion.String(), Kind: api.KindWorkloadPolicy},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: shepherdv1alpha1.WorkloadPolicySpec{
			Action: shepherdv1alpha1.ActionDeny,
			Match: shepherdv1alpha1.Match{Resources: []shepherdv1alpha1.ResourceRule{{
				APIGroups: []string{group}, Kinds: []string{kind}, Operations: []string{"CREATE", "UPDATE"},
			}}},
		},
	}}
}

// TrainJobPolicy is Policy on TrainJobs.
func TrainJobPolicy(name string) *PolicyBuilder {
	return Policy(name, api.TrainerGroup, api.KindTrainJob)
}

// Validation adds a validation.
func (b *PolicyBuilder) Validation(expression, message string) *PolicyBuilder {
	b.p.Spec.Validations = append(b.p.Spec.Validations, shepherdv1alpha1.Validation{Expression: expression, Message: message})
	return b
}

// FieldPath sets the last validation's fieldPath.
func (b *PolicyBuilder) FieldPath(path string) *PolicyBuilder {
	b.p.Spec.Validations[len(b.p.Spec.Validations)-1].FieldPath = path
	return b
}

// Action sets the action (Deny, Warn, Audit).
func (b *PolicyBuilder) Action(a shepherdv1alpha1.Action) *PolicyBuilder {
	b.p.Spec.Action = a
	return b
}

// FailurePolicy sets the failure policy.
func (b *PolicyBuilder) FailurePolicy(fp shepherdv1alpha1.FailurePolicy) *PolicyBuilder {
	b.p.Spec.FailurePolicy = fp
	return b
}

// Operations replaces the operations matched.
func (b *PolicyBuilder) Operations(ops ...string) *PolicyBuilder {
	b.p.Spec.Match.Resources[0].Operations = ops
	return b
}

// NamespaceLabels matches only namespaces with these labels.
func (b *PolicyBuilder) NamespaceLabels(labels map[string]string) *PolicyBuilder {
	b.p.Spec.Match.NamespaceSelector = &metav1.LabelSelector{MatchLabels: labels}
	return b
}

// Labels sets the policy's own labels.
func (b *PolicyBuilder) Labels(labels map[string]string) *PolicyBuilder {
	b.p.Labels = labels
	return b
}

// YAML is the policy as a manifest.
func (b *PolicyBuilder) YAML() string {
	out, err := yaml.Marshal(b.p)
	if err != nil {
		panic(fmt.Sprintf("testkit: %v", err))
	}
	return string(out)
}

// Obj returns a copy of the policy built so far.
func (b *PolicyBuilder) Obj() *shepherdv1alpha1.WorkloadPolicy { return b.p.DeepCopy() }

package background

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// auditStatus is the part of a WorkloadPolicy's status the audit owns.
// Every field is written, null included, so a merge patch of it replaces
// exactly these and nothing else (the conditions and compile errors every
// replica writes stay as they are).
type auditStatus struct {
	Violations        *int32                             `json:"violations"`
	ViolationSamples  []shepherdv1alpha1.ViolationSample `json:"violationSamples"`
	AuditedGeneration *int64                             `json:"auditedGeneration"`
	LastAuditTime     *metav1.Time                       `json:"lastAuditTime"`
}

// StatusPatch is the merge patch of p's status after a pass that found res
// at now, and whether p needs it. enforced says the chain enforces p (it
// compiled): it then gets its count (0 included) and samples; a policy not
// enforced gets its audit fields cleared. A pass that changes nothing is
// not written, unless refresh (the interval's pass) asks for lastAuditTime
// to move on.
func StatusPatch(p *shepherdv1alpha1.WorkloadPolicy, res *Results, enforced, refresh bool, now metav1.Time) ([]byte, bool, error) {
	var want auditStatus
	if enforced {
		n, samples := int32(0), []shepherdv1alpha1.ViolationSample(nil)
		if rr := res.Rules[p.Name]; rr != nil {
			n = int32(min(rr.Objects, int(^uint32(0)>>1)))
			for _, s := range rr.Samples {
				samples = append(samples, shepherdv1alpha1.ViolationSample{
					APIVersion: s.APIVersion, Kind: s.Kind, Namespace: s.Namespace, Name: s.Name, Field: s.Field, Message: s.Message,
				})
			}
		}
		want = auditStatus{Violations: &n, ViolationSamples: samples, AuditedGeneration: ptr.To(compiledGeneration(p)), LastAuditTime: &now}
	}
	have := p.Status
	same := equality.Semantic.DeepEqual(want.Violations, have.Violations) &&
		equality.Semantic.DeepEqual(want.ViolationSamples, have.ViolationSamples) &&
		ptr.Deref(want.AuditedGeneration, 0) == have.AuditedGeneration
	switch {
	case !enforced && have.Violations == nil && have.ViolationSamples == nil && have.AuditedGeneration == 0 && have.LastAuditTime == nil:
		return nil, false, nil // nothing to clear
	case enforced && same && !refresh:
		return nil, false, nil
	}
	b, err := json.Marshal(map[string]auditStatus{"status": want})
	if err != nil {
		return nil, false, fmt.Errorf("encoding the audit status of WorkloadPolicy %s: %w", p.Name, err)
	}
	return b, true, nil
}

// compiledGeneration is the generation of p the chain enforces, as its
// Ready condition reports it (every replica compiles the same generation);
// its current generation when the condition is not written yet.
func compiledGeneration(p *shepherdv1alpha1.WorkloadPolicy) int64 {
	if c := meta.FindStatusCondition(p.Status.Conditions, api.ConditionPolicyReady); c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration > 0 {
		return c.ObservedGeneration
	}
	return p.Generation
}

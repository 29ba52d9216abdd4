package policies

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/events"
)

// maxConditionMessage keeps the Ready message well under metav1.Condition's
// 32 KiB limit; compileErrors carries every error in full.
const maxConditionMessage = 4096

// DesiredStatus is the status of policy p after compiling its current
// generation gave errs (empty: it compiled). The Ready condition keeps its
// lastTransitionTime while its status does not change. The background
// audit's fields (violations, violationSamples, auditedGeneration,
// lastAuditTime) are the leader's to write: they are carried over as they
// are, so this replica's patch never clears them.
func DesiredStatus(p *shepherdv1alpha1.WorkloadPolicy, errs field.ErrorList, now metav1.Time) shepherdv1alpha1.WorkloadPolicyStatus {
	old := p.Status.DeepCopy()
	st := shepherdv1alpha1.WorkloadPolicyStatus{
		ObservedGeneration: p.Generation,
		Conditions:         old.Conditions,
		Violations:         old.Violations,
		ViolationSamples:   old.ViolationSamples,
		AuditedGeneration:  old.AuditedGeneration,
		LastAuditTime:      old.LastAuditTime,
	}
	cond := metav1.Condition{
		Type:               api.ConditionPolicyReady,
		Status:             metav1.ConditionTrue,
		Reason:             api.ReasonPolicyCompiled,
		Message:            "the policy compiled and is enforced",
		ObservedGeneration: p.Generation,
		LastTransitionTime: now,
	}
	if len(errs) > 0 {
		msgs := make([]string, 0, len(errs))
		for _, e := range errs {
			st.CompileErrors = append(st.CompileErrors, shepherdv1alpha1.CompileError{FieldPath: e.Field, Message: e.ErrorBody()})
			msgs = append(msgs, e.Error())
		}
		cond.Status = metav1.ConditionFalse
		cond.Reason = api.ReasonCompileError
		cond.Message = events.Truncate(fmt.Sprintf("the policy is not applied: %d expression(s) failed to compile: %s", len(errs), strings.Join(msgs, "; ")), maxConditionMessage)
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	return st
}

// OverCapStatus is the status of a policy held back because the replica
// compiles at most max WorkloadPolicies (--max-workload-policies): Ready
// False, reason TooManyPolicies, saying what to do.
func OverCapStatus(p *shepherdv1alpha1.WorkloadPolicy, max int, now metav1.Time) shepherdv1alpha1.WorkloadPolicyStatus {
	st := DesiredStatus(p, nil, now)
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type:               api.ConditionPolicyReady,
		Status:             metav1.ConditionFalse,
		Reason:             api.ReasonTooManyPolicies,
		Message:            fmt.Sprintf("the policy is not applied: shepherd compiles at most %d WorkloadPolicies (--max-workload-policies) and holds that many; delete unused policies, or raise the flag together with the replicas' memory limit", max),
		ObservedGeneration: p.Generation,
		LastTransitionTime: now,
	})
	return st
}

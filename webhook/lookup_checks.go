package webhook

// The validation rules CEL cannot express because they need other objects
// or discovery. They are NOT exportable as ValidatingAdmissionPolicy (a
// policy sees only the request); `shepherd export` lists them with that
// reason. They run after the CEL rules and report in the same Violation
// shape.

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
)

func (c *Chain) goChecks(ctx context.Context, req *Request, o, old map[string]any) []Violation {
	if o == nil {
		return nil
	}
	var out []Violation
	down := c.goStandDowns()
	add := func(id string, check func() []Violation) {
		if _, upstream := down[id]; c.cfg.Enabled(id) && !upstream {
			out = append(out, check()...)
		}
	}
	switch (schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}) {
	case schema.GroupKind{Group: api.TrainerGroup, Kind: api.KindTrainJob}:
		if req.Operation == admissionv1.Create {
			add("V-TJ-3", func() []Violation { return c.checkRuntimeRef(ctx, req.Namespace, o) })
		}
		if req.Operation == admissionv1.Update && old != nil {
			add("V-TJ-4", func() []Violation { return c.checkNumNodes(ctx, req.Namespace, o, old) })
		}
	case schema.GroupKind{Group: api.TrainerGroup, Kind: api.KindTrainingRuntime},
		schema.GroupKind{Group: api.TrainerGroup, Kind: api.KindClusterTrainingRuntime}:
		if req.Operation == admissionv1.Create || req.Operation == admissionv1.Update {
			add("V-TR-7", func() []Violation { return c.checkWorkloadAPI(o) })
		}
	case schema.GroupKind{Group: api.GroveGroup, Kind: api.KindPodClique},
		schema.GroupKind{Group: api.GroveGroup, Kind: api.KindPodCliqueScalingGroup}:
		if req.Operation == admissionv1.Create || req.Operation == admissionv1.Update {
			add("V-PCLQ-1", func() []Violation { return c.checkTrainingChild(ctx, req, o, old) })
		}
	}
	return out
}

// runtimeRef reads spec.runtimeRef with the CRD's defaults applied.
func runtimeRef(o map[string]any) trainerv1alpha1.RuntimeRef {
	rr := path(o, "spec", "runtimeRef")
	ref := trainerv1alpha1.RuntimeRef{Name: str(rr, "name")}
	if g := str(rr, "apiGroup"); g != "" {
		ref.APIGroup = &g
	}
	if k := str(rr, "kind"); k != "" {
		ref.Kind = &k
	}
	return ref
}

// checkRuntimeRef is V-TJ-3: the runtime must exist.
func (c *Chain) checkRuntimeRef(ctx context.Context, namespace string, o map[string]any) []Violation {
	ref := runtimeRef(o)
	if !ref.IsTrainerRuntime() {
		return []Violation{{Rule: "V-TJ-3", Action: ActionDeny, Field: "spec.runtimeRef.apiGroup",
			Message: fmt.Sprintf("runtimeRef.apiGroup must be %s, got %q", api.TrainerGroup, derefString(ref.APIGroup)), Reason: "FieldValueNotSupported"}}
	}
	_, err := c.lookupRuntime(ctx, ref, namespace)
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		where := fmt.Sprintf("ClusterTrainingRuntime %q not found", ref.Name)
		if ref.EffectiveKind() == api.KindTrainingRuntime {
			where = fmt.Sprintf("TrainingRuntime %q not found in namespace %q", ref.Name, namespace)
		} else if ref.EffectiveKind() != api.KindClusterTrainingRuntime {
			where = fmt.Sprintf("runtimeRef.kind must be TrainingRuntime or ClusterTrainingRuntime, got %q", ref.EffectiveKind())
		}
		return []Violation{{Rule: "V-TJ-3", Action: ActionDeny, Field: "spec.runtimeRef", Message: where + ": create the runtime first or fix spec.runtimeRef", Reason: "FieldValueNotFound"}}
	default:
		return []Violation{{Rule: "V-TJ-3", Action: ActionDeny, Field: "spec.runtimeRef",
			Message: fmt.Sprintf("rule V-TJ-3 could not look up the runtime %q: %v", ref.Name, err)}}
	}
}

// checkNumNodes is V-TJ-4: trainer.numNodes is the gang's minCount when the
// runtime uses podGroupPolicy.workload (field or carrier), so it cannot
// change.
func (c *Chain) checkNumNodes(ctx context.Context, namespace string, o, old map[string]any) []Violation {
	n, hasN := integer(obj(obj(o, "spec"), "trainer"), "numNodes")
	on, hasOn := integer(obj(obj(old, "spec"), "trainer"), "numNodes")
	if hasN == hasOn && n == on {
		return nil
	}
	rt, err := c.lookupRuntime(ctx, runtimeRef(old), namespace)
	if apierrors.IsNotFound(err) {
		// Without its runtime the job has no gang to protect.
		return nil
	}
	if err != nil {
		return []Violation{{Rule: "V-TJ-4", Action: ActionDeny, Field: "spec.trainer.numNodes",
			Message: fmt.Sprintf("rule V-TJ-4 could not look up the runtime: %v", err)}}
	}
	if !trainer.UsesWorkload(rt) {
		return nil
	}
	return []Violation{{Rule: "V-TJ-4", Action: ActionDeny, Field: "spec.trainer.numNodes",
		Message: "field is immutable: the runtime uses podGroupPolicy.workload and the gang's minCount is derived from numNodes"}}
}

// checkWorkloadAPI is V-TR-7: podGroupPolicy.workload needs the Workload
// API (GenericWorkload feature gate), found by discovery. The violation
// names the form the runtime uses: the seed field, or its carrier.
func (c *Chain) checkWorkloadAPI(o map[string]any) []Violation {
	if !trainer.RuntimeWorkload.Present(o) || c.lookups.WorkloadAPIServed() {
		return nil
	}
	raw, _ := trainer.RuntimeWorkload.Lookup(o)
	return []Violation{{Rule: "V-TR-7", Action: ActionDeny, Field: trainer.RuntimeWorkload.FieldPath(raw.Form),
		Message: "this cluster does not serve the Workload API (scheduling.k8s.io Workload and PodGroup, GenericWorkload feature gate): use coscheduling or volcano, or enable the API"}}
}

// checkTrainingChild is V-PCLQ-1: PodCliques and PodCliqueScalingGroups of
// a Training PodCliqueSet keep their replicas and have no autoscaling —
// except a scale to 0, which stops the gang rather than resizing it: that
// is how shepherd ends a failed Training set through its owner (Grove
// keeps an existing PodClique's replicas; see package training). The
// owner is the controller ownerReference to a PodCliqueSet, else (for a
// PodClique owned by its scaling group) Grove's part-of label.
func (c *Chain) checkTrainingChild(ctx context.Context, req *Request, o, old map[string]any) []Violation {
	pcsName := ""
	refs, _ := obj(o, "metadata")["ownerReferences"].([]any)
	for _, r := range refs {
		m, _ := r.(map[string]any)
		gv, _ := schema.ParseGroupVersion(str(m, "apiVersion"))
		if gv.Group == api.GroveGroup && str(m, "kind") == api.KindPodCliqueSet {
			pcsName = str(m, "name")
		}
	}
	if pcsName == "" {
		pcsName = str(path(o, "metadata", "labels"), api.LabelPartOf)
	}
	if pcsName == "" {
		return nil
	}
	pcs, err := c.lookups.Get(ctx, grovev1alpha1.GroupVersion.WithKind(api.KindPodCliqueSet), req.Namespace, pcsName)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return []Violation{{Rule: "V-PCLQ-1", Action: ActionDeny, Field: "metadata.ownerReferences",
			Message: fmt.Sprintf("rule V-PCLQ-1 could not look up the owning PodCliqueSet %q: %v", pcsName, err)}}
	}
	if set, ok := pcs.(*grovev1alpha1.PodCliqueSet); !ok || !grove.IsTrainingSet(set) {
		return nil
	}
	var out []Violation
	spec := obj(o, "spec")
	if req.Operation == admissionv1.Update && old != nil {
		r, _ := integer(spec, "replicas")
		or, _ := integer(obj(old, "spec"), "replicas")
		if r != or && r != 0 {
			out = append(out, Violation{Rule: "V-PCLQ-1", Action: ActionDeny, Field: "spec.replicas",
				Message: fmt.Sprintf("field is immutable: the owning PodCliqueSet %q is a Training workload (only a scale to 0, which stops it, is allowed)", pcsName)})
		}
	}
	scaleField := "autoScalingConfig"
	if req.Kind.Kind == api.KindPodCliqueScalingGroup {
		scaleField = "scaleConfig"
	}
	if !unset(spec, scaleField) {
		out = append(out, Violation{Rule: "V-PCLQ-1", Action: ActionDeny, Field: "spec." + scaleField, Reason: "FieldValueForbidden",
			Message: fmt.Sprintf("autoscaling is not allowed: the owning PodCliqueSet %q is a Training workload", pcsName)})
	}
	return out
}

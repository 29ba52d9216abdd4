package trainer

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/gocheck"
)

// Why no admission policy can express a check.
const (
	reasonLookup    = "needs a lookup of another object; a ValidatingAdmissionPolicy sees only the request"
	reasonDiscovery = "needs API discovery; a ValidatingAdmissionPolicy sees only the request"
)

// Checks are Trainer's rules written in Go (gocheck): the runtime a
// TrainJob names must exist (V-TJ-3), numNodes of a TrainJob whose runtime
// uses the Workload API is immutable (V-TJ-4), a runtime using the
// Workload API needs a cluster serving it (V-TR-7), and the JobSet of such
// a TrainJob joins its PodGroups (D-WL-1).
var Checks = []gocheck.Check{
	{ID: "D-WL-1", Group: api.JobSetGroup, Kinds: []string{api.KindJobSet}, Operations: []string{"CREATE", "UPDATE"},
		Reason:      "needs lookups of the owning TrainJob and its runtime; an admission policy (ValidatingAdmissionPolicy or MutatingAdmissionPolicy) sees only the request",
		Description: "JobSet of a TrainJob whose runtime uses podGroupPolicy.workload: inject spec.schedulingGroup.podGroupName into pod templates",
		Default:     defaultSchedulingGroup},
	// Trainer's validating webhook (v2.3.0 pkg/webhooks/trainjob_webhook.go,
	// through the runtime's ValidateObjects) gets the runtime a TrainJob
	// names and denies the create when it is missing or of a kind Trainer
	// does not know; it is called with shepherd's, so the user sees its
	// denial or shepherd's, never anything new from shepherd.
	{ID: "V-TJ-3", Group: api.TrainerGroup, Kinds: []string{api.KindTrainJob}, Operations: []string{"CREATE"}, Reason: reasonLookup,
		Description:     "runtimeRef resolves to an existing TrainingRuntime (same namespace) or ClusterTrainingRuntime (CREATE)",
		UpstreamWebhook: "validator.trainjob.trainer.kubeflow.org", UpstreamOperation: "CREATE",
		Validate: checkRuntimeRef},
	{ID: "V-TJ-4", Group: api.TrainerGroup, Kinds: []string{api.KindTrainJob}, Operations: []string{"UPDATE"}, Reason: reasonLookup,
		Description: "trainer.numNodes is immutable when the runtime uses podGroupPolicy.workload",
		Validate:    checkNumNodes},
	{ID: "V-TR-7", Group: api.TrainerGroup, Kinds: []string{api.KindTrainingRuntime, api.KindClusterTrainingRuntime}, Operations: []string{"CREATE", "UPDATE"}, Reason: reasonDiscovery,
		Description: "podGroupPolicy.workload needs a cluster that serves the Workload API",
		Validate:    checkWorkloadAPI},
}

// defaultSchedulingGroup applies D-WL-1: the JobSet of a TrainJob whose
// runtime uses podGroupPolicy.workload (the seed field, or on Trainer's
// upstream runtime CRD its carrier annotation) gets spec.schedulingGroup.podGroupName
// on every pod template, named by api.PodGroupName exactly as the
// reconciler names the PodGroups. A TrainJob or runtime that cannot be
// found, or a cluster that does not serve the Workload API, skips the
// injection with a warning; any other lookup error denies so the
// JobSet's creator retries rather than running pods outside their gang.
func defaultSchedulingGroup(ctx context.Context, l gocheck.Lookups, r *gocheck.Request) (bool, []string, *gocheck.Finding) {
	o, namespace := r.Object, r.Namespace
	owner := trainJobOwner(o)
	if owner == nil {
		return false, nil, nil
	}
	tj, err := lookup[*trainerv1alpha1.TrainJob](ctx, l, trainerv1alpha1.GroupVersion.WithKind(api.KindTrainJob), namespace, owner.name)
	if apierrors.IsNotFound(err) {
		return false, []string{fmt.Sprintf("spec.replicatedJobs: the owning TrainJob %q was not found: no scheduling group injected", owner.name)}, nil
	}
	if err != nil {
		return false, nil, &gocheck.Finding{Field: "metadata.ownerReferences",
			Message: fmt.Sprintf("could not look up the owning TrainJob %q: %v", owner.name, err)}
	}
	rt, err := lookupRuntime(ctx, l, tj.Spec.RuntimeRef, namespace)
	if apierrors.IsNotFound(err) {
		return false, []string{fmt.Sprintf("spec.replicatedJobs: the runtime of TrainJob %q was not found: no scheduling group injected", owner.name)}, nil
	}
	if err != nil {
		return false, nil, &gocheck.Finding{Field: "metadata.ownerReferences",
			Message: fmt.Sprintf("could not look up the runtime of TrainJob %q: %v", owner.name, err)}
	}
	if !UsesWorkload(rt) {
		return false, nil, nil
	}
	// Without the Workload API no PodGroup will exist to join (the
	// TrainJob's record says WorkloadAPIUnavailable): a name injected now
	// would leave the pods waiting for a PodGroup that never comes once
	// the API is turned on. Found on the test bed (test/workload).
	if !l.WorkloadAPIServed() {
		return false, []string{fmt.Sprintf("spec.replicatedJobs: the runtime of TrainJob %q asks for the Workload API, which this cluster does not serve: no scheduling group injected", owner.name)}, nil
	}
	uid := owner.uid
	if uid == "" {
		uid = tj.UID
	}
	changed := false
	for _, rj := range gocheck.Items(gocheck.Obj(o, "spec"), "replicatedJobs") {
		jobTemplate := gocheck.Obj(rj, "template")
		if jobTemplate == nil {
			continue
		}
		var labels map[string]string
		if l := gocheck.Path(jobTemplate, "metadata", "labels"); l != nil {
			labels = map[string]string{}
			for k, v := range l {
				if s, ok := v.(string); ok {
					labels[k] = s
				}
			}
		}
		name := api.PodGroupName(owner.name, uid, api.PodGroupTemplateFor(gocheck.Str(rj, "name"), labels))
		// spec.template.spec.schedulingGroup of the Job template, created
		// as needed; a field on the way that is not an object is left for
		// validation to report.
		sg := jobTemplate
		for _, k := range []string{"spec", "template", "spec", "schedulingGroup"} {
			if sg = gocheck.Ensure(sg, k); sg == nil {
				break
			}
		}
		if sg == nil {
			continue
		}
		if gocheck.Str(sg, "podGroupName") != name {
			sg["podGroupName"] = name
			changed = true
		}
	}
	return changed, nil, nil
}

type ownerRef struct {
	name string
	uid  types.UID
}

// trainJobOwner returns the controller ownerReference to a TrainJob.
func trainJobOwner(o map[string]any) *ownerRef {
	refs, _ := gocheck.Obj(o, "metadata")["ownerReferences"].([]any)
	for _, r := range refs {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		gv, _ := schema.ParseGroupVersion(gocheck.Str(m, "apiVersion"))
		ctrl, _ := m["controller"].(bool)
		if ctrl && gv.Group == api.TrainerGroup && gocheck.Str(m, "kind") == api.KindTrainJob {
			return &ownerRef{name: gocheck.Str(m, "name"), uid: types.UID(gocheck.Str(m, "uid"))}
		}
	}
	return nil
}

// lookupRuntime looks up the runtime a TrainJob references: a
// *TrainingRuntime or *ClusterTrainingRuntime, whose knobs
// integrations/trainer reads in either form (seed field or carrier).
func lookupRuntime(ctx context.Context, l gocheck.Lookups, ref trainerv1alpha1.RuntimeRef, namespace string) (client.Object, error) {
	if !ref.IsTrainerRuntime() {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: derefString(ref.APIGroup)}, ref.Name)
	}
	switch kind := ref.EffectiveKind(); kind {
	case api.KindTrainingRuntime:
		return l.Get(ctx, trainerv1alpha1.GroupVersion.WithKind(kind), namespace, ref.Name)
	case api.KindClusterTrainingRuntime:
		return l.Get(ctx, trainerv1alpha1.GroupVersion.WithKind(kind), "", ref.Name)
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: api.TrainerGroup, Resource: ref.EffectiveKind()}, ref.Name)
}

func derefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// lookup gets an object of a kind the scheme knows, typed as T.
func lookup[T client.Object](ctx context.Context, l gocheck.Lookups, gvk schema.GroupVersionKind, namespace, name string) (T, error) {
	var zero T
	o, err := l.Get(ctx, gvk, namespace, name)
	if err != nil {
		return zero, err
	}
	t, ok := o.(T)
	if !ok {
		return zero, fmt.Errorf("looking up %v %s/%s: got a %T", gvk, namespace, name, o)
	}
	return t, nil
}

// runtimeRef reads spec.runtimeRef with the CRD's defaults applied.
func runtimeRef(o map[string]any) trainerv1alpha1.RuntimeRef {
	rr := gocheck.Path(o, "spec", "runtimeRef")
	ref := trainerv1alpha1.RuntimeRef{Name: gocheck.Str(rr, "name")}
	if g := gocheck.Str(rr, "apiGroup"); g != "" {
		ref.APIGroup = &g
	}
	if k := gocheck.Str(rr, "kind"); k != "" {
		ref.Kind = &k
	}
	return ref
}

// checkRuntimeRef is V-TJ-3: the runtime must exist.
func checkRuntimeRef(ctx context.Context, l gocheck.Lookups, r *gocheck.Request) []gocheck.Finding {
	namespace, o := r.Namespace, r.Object
	ref := runtimeRef(o)
	if !ref.IsTrainerRuntime() {
		return []gocheck.Finding{{Field: "spec.runtimeRef.apiGroup",
			Message: fmt.Sprintf("runtimeRef.apiGroup must be %s, got %q", api.TrainerGroup, derefString(ref.APIGroup)), Reason: "FieldValueNotSupported"}}
	}
	_, err := lookupRuntime(ctx, l, ref, namespace)
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
		return []gocheck.Finding{{Field: "spec.runtimeRef", Message: where + ": create the runtime first or fix spec.runtimeRef", Reason: "FieldValueNotFound"}}
	default:
		return []gocheck.Finding{{Field: "spec.runtimeRef",
			Message: fmt.Sprintf("rule V-TJ-3 could not look up the runtime %q: %v", ref.Name, err)}}
	}
}

// checkNumNodes is V-TJ-4: trainer.numNodes is the gang's minCount when the
// runtime uses podGroupPolicy.workload (field or carrier), so it cannot
// change.
func checkNumNodes(ctx context.Context, l gocheck.Lookups, r *gocheck.Request) []gocheck.Finding {
	namespace, o, old := r.Namespace, r.Object, r.OldObject
	if old == nil {
		return nil
	}
	n, hasN := gocheck.Int(gocheck.Obj(gocheck.Obj(o, "spec"), "trainer"), "numNodes")
	on, hasOn := gocheck.Int(gocheck.Obj(gocheck.Obj(old, "spec"), "trainer"), "numNodes")
	if hasN == hasOn && n == on {
		return nil
	}
	rt, err := lookupRuntime(ctx, l, runtimeRef(old), namespace)
	if apierrors.IsNotFound(err) {
		// Without its runtime the job has no gang to protect.
		return nil
	}
	if err != nil {
		return []gocheck.Finding{{Field: "spec.trainer.numNodes",
			Message: fmt.Sprintf("rule V-TJ-4 could not look up the runtime: %v", err)}}
	}
	if !UsesWorkload(rt) {
		return nil
	}
	return []gocheck.Finding{{Field: "spec.trainer.numNodes",
		Message: "field is immutable: the runtime uses podGroupPolicy.workload and the gang's minCount is derived from numNodes"}}
}

// checkWorkloadAPI is V-TR-7: podGroupPolicy.workload needs the Workload
// API (GenericWorkload feature gate), found by discovery. The violation
// names the form the runtime uses: the seed field, or its carrier.
func checkWorkloadAPI(_ context.Context, l gocheck.Lookups, r *gocheck.Request) []gocheck.Finding {
	o := r.Object
	if !RuntimeWorkload.Present(o) || l.WorkloadAPIServed() {
		return nil
	}
	raw, _ := RuntimeWorkload.Lookup(o)
	return []gocheck.Finding{{Field: RuntimeWorkload.FieldPath(raw.Form),
		Message: "this cluster does not serve the Workload API (scheduling.k8s.io Workload and PodGroup, GenericWorkload feature gate): use coscheduling or volcano, or enable the API"}}
}

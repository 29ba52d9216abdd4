package webhook

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
)

// defaultSchedulingGroup applies D-WL-1: the JobSet of a TrainJob whose
// runtime uses podGroupPolicy.workload (the seed field, or on Trainer's
// upstream runtime CRD its carrier annotation) gets spec.schedulingGroup.podGroupName
// on every pod template, named by api.PodGroupName exactly as the
// reconciler names the PodGroups. A TrainJob or runtime that cannot be
// found, or a cluster that does not serve the Workload API, skips the
// injection with a warning; any other lookup error denies so the
// JobSet's creator retries rather than running pods outside their gang.
func (c *Chain) defaultSchedulingGroup(ctx context.Context, o map[string]any, namespace string) (bool, []string, *Violation) {
	if !c.cfg.Enabled("D-WL-1") {
		return false, nil, nil
	}
	owner := trainJobOwner(o)
	if owner == nil {
		return false, nil, nil
	}
	tj, err := lookup[*trainerv1alpha1.TrainJob](ctx, c.lookups, trainerv1alpha1.GroupVersion.WithKind(api.KindTrainJob), namespace, owner.name)
	if apierrors.IsNotFound(err) {
		return false, []string{fmt.Sprintf("spec.replicatedJobs: the owning TrainJob %q was not found: no scheduling group injected", owner.name)}, nil
	}
	if err != nil {
		return false, nil, &Violation{Rule: "D-WL-1", Action: ActionDeny, Field: "metadata.ownerReferences",
			Message: fmt.Sprintf("could not look up the owning TrainJob %q: %v", owner.name, err)}
	}
	rt, err := c.lookupRuntime(ctx, tj.Spec.RuntimeRef, namespace)
	if apierrors.IsNotFound(err) {
		return false, []string{fmt.Sprintf("spec.replicatedJobs: the runtime of TrainJob %q was not found: no scheduling group injected", owner.name)}, nil
	}
	if err != nil {
		return false, nil, &Violation{Rule: "D-WL-1", Action: ActionDeny, Field: "metadata.ownerReferences",
			Message: fmt.Sprintf("could not look up the runtime of TrainJob %q: %v", owner.name, err)}
	}
	if !trainer.UsesWorkload(rt) {
		return false, nil, nil
	}
	// Without the Workload API no PodGroup will exist to join (the
	// TrainJob's record says WorkloadAPIUnavailable): a name injected now
	// would leave the pods waiting for a PodGroup that never comes once
	// the API is turned on. Found on the test bed (test/workload).
	if !c.lookups.WorkloadAPIServed() {
		return false, []string{fmt.Sprintf("spec.replicatedJobs: the runtime of TrainJob %q asks for the Workload API, which this cluster does not serve: no scheduling group injected", owner.name)}, nil
	}
	uid := owner.uid
	if uid == "" {
		uid = tj.UID
	}
	changed := false
	for _, rj := range items(obj(o, "spec"), "replicatedJobs") {
		jobTemplate := obj(rj, "template")
		if jobTemplate == nil {
			continue
		}
		var labels map[string]string
		if l := path(jobTemplate, "metadata", "labels"); l != nil {
			labels = map[string]string{}
			for k, v := range l {
				if s, ok := v.(string); ok {
					labels[k] = s
				}
			}
		}
		name := api.PodGroupName(owner.name, uid, api.PodGroupTemplateFor(str(rj, "name"), labels))
		js := ensure(jobTemplate, "spec")
		if js == nil {
			continue
		}
		pt := ensure(js, "template")
		if pt == nil {
			continue
		}
		ps := ensure(pt, "spec")
		if ps == nil {
			continue
		}
		sg := ensure(ps, "schedulingGroup")
		if sg == nil {
			continue
		}
		if str(sg, "podGroupName") != name {
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
	refs, _ := obj(o, "metadata")["ownerReferences"].([]any)
	for _, r := range refs {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		gv, _ := schema.ParseGroupVersion(str(m, "apiVersion"))
		ctrl, _ := m["controller"].(bool)
		if ctrl && gv.Group == api.TrainerGroup && str(m, "kind") == api.KindTrainJob {
			return &ownerRef{name: str(m, "name"), uid: types.UID(str(m, "uid"))}
		}
	}
	return nil
}

// lookupRuntime looks up the runtime a TrainJob references: a
// *TrainingRuntime or *ClusterTrainingRuntime, whose knobs
// integrations/trainer reads in either form (seed field or carrier).
func (c *Chain) lookupRuntime(ctx context.Context, ref trainerv1alpha1.RuntimeRef, namespace string) (client.Object, error) {
	if !ref.IsTrainerRuntime() {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: derefString(ref.APIGroup)}, ref.Name)
	}
	switch kind := ref.EffectiveKind(); kind {
	case api.KindTrainingRuntime:
		return c.lookups.Get(ctx, trainerv1alpha1.GroupVersion.WithKind(kind), namespace, ref.Name)
	case api.KindClusterTrainingRuntime:
		return c.lookups.Get(ctx, trainerv1alpha1.GroupVersion.WithKind(kind), "", ref.Name)
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
func lookup[T client.Object](ctx context.Context, l Lookups, gvk schema.GroupVersionKind, namespace, name string) (T, error) {
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

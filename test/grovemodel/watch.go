package grovemodel

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/dump"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	grove "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
)

// The predicates are those of each controller's register.go.

// pcsPredicates: a PodCliqueSet's create and delete, and an update of its
// spec or of its grove.io/reconcile-trigger annotation.
func pcsPredicates() builder.Predicates {
	return builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
			e.ObjectOld.GetAnnotations()[annotationTrigger] != e.ObjectNew.GetAnnotations()[annotationTrigger]
	}})
}

// pclqToPCSPredicates: a set's PodClique deleted, or updated in its spec, a
// replica count, a hash, its updateProgress or its MinAvailableBreached
// status — not in its metadata, so an annotation someone adds lives until
// the next reconcile something else causes.
func pclqToPCSPredicates() builder.Predicates {
	return builder.WithPredicates(predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		DeleteFunc:  func(e event.DeleteEvent) bool { return managed(e.Object, "PodCliqueSet") },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*unstructured.Unstructured), e.ObjectNew.(*unstructured.Unstructured)
			return managed(o, "PodCliqueSet", "PodCliqueScalingGroup") && (o.GetGeneration() != n.GetGeneration() ||
				statusDiffers(o, n, "replicas", "readyReplicas", "scheduleGatedReplicas", "updatedReplicas",
					"currentPodTemplateHash", "currentPodCliqueSetGenerationHash", "updateProgress"))
		},
	})
}

// pcsgToPCSPredicates: a group's MinAvailableBreached status, available or
// updated replicas, hash or updateProgress changed.
func pcsgToPCSPredicates() builder.Predicates {
	return builder.WithPredicates(predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return statusDiffers(e.ObjectOld.(*unstructured.Unstructured), e.ObjectNew.(*unstructured.Unstructured),
				"availableReplicas", "updatedReplicas", "currentPodCliqueSetGenerationHash", "updateProgress")
		},
	})
}

// pcsgPredicates: a set's group created or updated.
func pcsgPredicates() builder.Predicates {
	return builder.WithPredicates(predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return managed(e.Object, "PodCliqueSet") },
		UpdateFunc:  func(e event.UpdateEvent) bool { return managed(e.ObjectOld, "PodCliqueSet") },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	})
}

// pclqToPCSGPredicates: any PodClique created, a group's updated or deleted.
func pclqToPCSGPredicates() builder.Predicates {
	return builder.WithPredicates(predicate.Funcs{
		DeleteFunc: func(e event.DeleteEvent) bool { return managed(e.Object, "PodCliqueScalingGroup") },
		UpdateFunc: func(e event.UpdateEvent) bool { return managed(e.ObjectOld, "PodCliqueScalingGroup") },
	})
}

// pclqPredicates: a PodClique of a set or group created, deleted, or its
// generation changed (GenerationChangedPredicate: not metadata or status).
func pclqPredicates() builder.Predicates {
	return builder.WithPredicates(predicate.GenerationChangedPredicate{}, predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return managed(e.Object, "PodCliqueSet", "PodCliqueScalingGroup") },
		DeleteFunc:  func(e event.DeleteEvent) bool { return managed(e.Object, "PodCliqueSet", "PodCliqueScalingGroup") },
		UpdateFunc:  func(e event.UpdateEvent) bool { return managed(e.ObjectOld, "PodCliqueSet", "PodCliqueScalingGroup") },
		GenericFunc: func(event.GenericEvent) bool { return false },
	})
}

// podPredicates: a PodClique's pod deleted, marked for deletion or, its spec
// unchanged, changed in readiness, in a container's started or ready, or in
// a non-zero last termination. A pod being scheduled alone wakes nothing.
func podPredicates() builder.Predicates {
	flags := func(p *corev1.Pod) map[string][3]bool {
		out := map[string][3]bool{"": {podCond(p, corev1.PodReady), exitedNonZero(p.Status.InitContainerStatuses), exitedNonZero(p.Status.ContainerStatuses)}}
		for _, s := range p.Status.ContainerStatuses {
			out[s.Name] = [3]bool{true, s.Ready, s.Started != nil && *s.Started}
		}
		return out
	}
	return builder.WithPredicates(predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		DeleteFunc:  func(e event.DeleteEvent) bool { return managed(e.Object, "PodClique") },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*corev1.Pod), e.ObjectNew.(*corev1.Pod)
			return managed(o, "PodClique") && o.Generation == n.Generation &&
				(!reflect.DeepEqual(flags(o), flags(n)) || o.DeletionTimestamp == nil && n.DeletionTimestamp != nil)
		},
	})
}

// managed is IsManagedByGrove and HasExpectedOwner (controller/utils/managedresource.go):
// the managed-by label and exactly one owner reference, of one of kinds.
func managed(o client.Object, kinds ...string) bool {
	refs := o.GetOwnerReferences()
	return o.GetLabels()[labelManagedBy] == User && len(refs) == 1 && slices.Contains(kinds, refs[0].Kind)
}

// statusDiffers compares status fields, and MinAvailableBreached's status.
// Grove compares typed objects, where an absent counter is 0.
func statusDiffers(o, n *unstructured.Unstructured, fields ...string) bool {
	field := func(u *unstructured.Unstructured, f string) any {
		if v, _, _ := unstructured.NestedFieldNoCopy(u.Object, "status", f); v != nil {
			return v
		}
		return int64(0)
	}
	breach := func(u *unstructured.Unstructured) any {
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if c, ok := c.(map[string]any); ok && c["type"] == CondMinAvailableBreached {
				return c["status"]
			}
		}
		return nil
	}
	for _, f := range fields {
		if !reflect.DeepEqual(field(o, f), field(n, f)) {
			return true
		}
	}
	return breach(o) != breach(n)
}

// mapByLabel enqueues the object of the same namespace a label names.
func mapByLabel(label string) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if name := o.GetLabels()[label]; name != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
		}
		return nil
	})
}

// listOwned lists the objects of kind matching selector that owner controls.
func (m *model) listOwned(ctx context.Context, kind string, owner *unstructured.Unstructured, selector map[string]string) ([]unstructured.Unstructured, error) {
	list := newList(kind)
	if err := m.c.List(ctx, list, client.InNamespace(owner.GetNamespace()), client.MatchingLabels(selector)); err != nil {
		return nil, fmt.Errorf("listing %ss: %w", kind, err)
	}
	return slices.DeleteFunc(list.Items, func(i unstructured.Unstructured) bool { return !metav1.IsControlledBy(&i, owner) }), nil
}

// groveLabels is the labels of everything Grove makes for a set
// (GetDefaultLabelsForPodCliqueSetManagedResources) and key-value pairs.
func groveLabels(pcs string, kv ...string) map[string]string {
	l := map[string]string{labelManagedBy: User, labelPartOf: pcs}
	for i := 0; i+1 < len(kv); i += 2 {
		l[kv[i]] = kv[i+1]
	}
	return l
}

// convert copies from into to through JSON (the pinned types have no DeepCopy).
func convert(from, to any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, to)
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// patchFinalizer adds (or removes) a finalizer with an optimistic-lock
// merge patch (controller/utils/finalizer.go).
// getLive reads an object of kind and settles its finalizer f as Grove's
// reconcilers do first: removed from an object being deleted (then nil is
// returned: nothing else to do), added to a live one. nil without error
// when the object is gone.
func (m *model) getLive(ctx context.Context, kind string, key client.ObjectKey, f string) (*unstructured.Unstructured, error) {
	u := newObj(kind)
	if err := m.c.Get(ctx, key, u); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if u.GetDeletionTimestamp() != nil {
		return nil, m.patchFinalizer(ctx, u, f, false)
	}
	if err := m.patchFinalizer(ctx, u, f, true); err != nil {
		return nil, err
	}
	return u, nil
}

func (m *model) patchFinalizer(ctx context.Context, u *unstructured.Unstructured, f string, add bool) error {
	before := u.DeepCopy()
	if add && !controllerutil.AddFinalizer(u, f) || !add && !controllerutil.RemoveFinalizer(u, f) {
		return nil
	}
	return client.IgnoreNotFound(m.c.Patch(ctx, u, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})))
}

// patchObservedGeneration merge-patches status.observedGeneration to the generation.
func (m *model) patchObservedGeneration(ctx context.Context, u *unstructured.Unstructured) error {
	if g, ok, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); ok && g == u.GetGeneration() {
		return nil
	}
	before := u.DeepCopy()
	if err := unstructured.SetNestedField(u.Object, u.GetGeneration(), "status", "observedGeneration"); err != nil {
		return err
	}
	return m.c.Status().Patch(ctx, u, client.MergeFrom(before))
}

// templateHash is ComputePCLQPodTemplateHash (controller/common/component/utils/podclique.go):
// FNV-64a of the dumped pod template — the clique's labels, annotations and
// pod spec with the set's priority class. The dump spells out every field
// of the k8s.io/api types, so the value equals the real operator's only
// when both build with the same k8s.io/api.
func templateHash(t *grove.PodCliqueTemplateSpec, priorityClass string) string {
	pts := &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: t.Labels, Annotations: t.Annotations}, Spec: t.Spec.PodSpec}
	pts.Spec.PriorityClassName = priorityClass
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%v", dump.ForHash(pts))
	return rand.SafeEncodeString(fmt.Sprint(h.Sum64()))
}

// Package record keeps shepherd's WorkloadRecords (shepherd.dev/v1alpha1):
// one per governed workload, controlled by it, holding what shepherd derives
// about it. The workloads' own objects — and the PodCliques, scaling groups
// and JobSets that their operators rewrite — carry only the knobs users set;
// Grove replaces a PodClique's annotations with its template's on every
// reconcile, and Trainer shows a TrainJob's last condition as its state, so
// state kept there is lost or misread (issue 30).
//
// Two ways to write, by how many controllers share a record:
//
//   - Put: the one controller that owns the whole record (a Training
//     PodCliqueSet's lifecycle) creates it, or replaces it guarded by the
//     resourceVersion its decision read (a merge patch with an optimistic
//     lock), so a decision made on a stale cache never lands;
//   - Apply: controllers that each own a disjoint part (a TrainJob's
//     lifecycle: phase, deadline, TTL; its Workload controller: PodGroups)
//     server-side apply their part under their own field manager.
package record

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// Kind is the record kind.
const Kind = "WorkloadRecord"

// Name is the name of the record of the workload kind/name: the kind in
// lower case, a dash, the name. The kind keeps a TrainJob and a
// PodCliqueSet of one name apart.
func Name(kind, name string) string { return strings.ToLower(kind) + "-" + name }

// For is the skeleton of the record of owner (of gvk): its name and
// namespace, owner as its controller (so garbage collection deletes it with
// the workload, and a record of an earlier workload of the same name is
// never mistaken for this one's), and the workload reference. Status is
// empty.
func For(owner client.Object, gvk schema.GroupVersionKind) *shepherdv1alpha1.WorkloadRecord {
	return &shepherdv1alpha1.WorkloadRecord{
		TypeMeta: metav1.TypeMeta{APIVersion: shepherdv1alpha1.GroupVersion.String(), Kind: Kind},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: owner.GetNamespace(),
			Name:      Name(gvk.Kind, owner.GetName()),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: owner.GetName(), UID: owner.GetUID(),
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false),
			}},
		},
		Spec: shepherdv1alpha1.WorkloadRecordSpec{WorkloadRef: shepherdv1alpha1.WorkloadRef{
			APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: owner.GetName(), UID: owner.GetUID(),
		}},
	}
}

// Get reads the record of owner (of kind) from c; nil when there is none,
// or when the record there belongs to another incarnation of the name (its
// workload was deleted and garbage collection has not caught up): that
// record is not owner's, and its state must not be carried over.
func Get(ctx context.Context, c client.Reader, kind string, owner client.Object) (*shepherdv1alpha1.WorkloadRecord, error) {
	var rec shepherdv1alpha1.WorkloadRecord
	key := types.NamespacedName{Namespace: owner.GetNamespace(), Name: Name(kind, owner.GetName())}
	if err := c.Get(ctx, key, &rec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading WorkloadRecord %s: %w", key, err)
	}
	if rec.Spec.WorkloadRef.UID != owner.GetUID() {
		return nil, nil
	}
	return &rec, nil
}

// Put writes want, the whole record, as the one controller that owns it:
// created when read is nil (the decision saw none; AlreadyExists means it
// read a stale cache), else replaced under read's resourceVersion (Conflict
// means the same). A stale record of an earlier incarnation of the name
// (Get returned nil for it) makes the create fail with AlreadyExists until
// garbage collection removes it.
func Put(ctx context.Context, c client.Client, want *shepherdv1alpha1.WorkloadRecord, read *shepherdv1alpha1.WorkloadRecord, manager string) error {
	obj := want.DeepCopy()
	if read == nil {
		obj.ResourceVersion = ""
		if err := c.Create(ctx, obj, client.FieldOwner(manager)); err != nil {
			return fmt.Errorf("creating WorkloadRecord %s/%s: %w", obj.Namespace, obj.Name, err)
		}
		return nil
	}
	obj.ObjectMeta = *read.ObjectMeta.DeepCopy()
	// A merge patch of the difference, carrying read's resourceVersion.
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(read, client.MergeFromWithOptimisticLock{}), client.FieldOwner(manager)); err != nil {
		return fmt.Errorf("updating WorkloadRecord %s/%s: %w", obj.Namespace, obj.Name, err)
	}
	return nil
}

// Apply server-side applies part — the skeleton of For with the status
// fields this manager owns — under manager, taking those fields over from
// anyone. Fields manager applied before and leaves out now are removed.
func Apply(ctx context.Context, c client.Client, part *shepherdv1alpha1.WorkloadRecord, manager string) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(part)
	if err != nil {
		return fmt.Errorf("encoding WorkloadRecord %s/%s: %w", part.Namespace, part.Name, err)
	}
	u := &unstructured.Unstructured{Object: m}
	// The typed metadata encodes an unset creationTimestamp as null; an
	// apply must not claim it.
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(manager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying WorkloadRecord %s/%s: %w", part.Namespace, part.Name, err)
	}
	return nil
}

// DeletedOnly passes only the deletion of a record: for a controller that
// owns a part of records and decides nothing from them, a record deleted
// behind shepherd's back is the one change worth a reconcile (the others
// are its own writes).
func DeletedOnly() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

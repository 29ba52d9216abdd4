package background

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	toolscache "k8s.io/client-go/tools/cache"
)

// Object is a stored object as the audit keeps it: what decides whether
// its verdict still holds, and the object itself as JSON, which a pass
// hands to the chain as the request's raw object, as the apiserver hands
// it to the webhook. Decoded into an unstructured map an object takes
// about four times the memory of its JSON; kept decoded, 10,000 TrainJobs
// and 2,000 PodCliqueSets were a quarter of shepherd's live heap, for a
// decode per judged object that costs a few percent of judging it.
//
// ObjectMeta holds the name, namespace, UID, resourceVersion, generation
// and deletionTimestamp only (the informer's store keys by it); labels
// and annotations are in raw and in the fingerprint.
type Object struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	// meta is metaFingerprint of the labels and annotations.
	meta uint64
	// raw is the object as stored, without managedFields: never changed,
	// so copies share it.
	raw []byte
}

// NewObject is u as the audit keeps it. u's managedFields are left out,
// as the audit has always judged objects without them: they are often
// the largest part of a small object and no rule has a reason to read
// them.
func NewObject(u *unstructured.Unstructured) (*Object, error) {
	content := u.Object
	if md, ok := content["metadata"].(map[string]any); ok {
		if _, ok := md["managedFields"]; ok {
			// A shallow copy of the two levels changed: u stays as it is.
			md = maps.Clone(md)
			delete(md, "managedFields")
			content = maps.Clone(content)
			content["metadata"] = md
		}
	}
	raw, err := json.Marshal(content)
	if err != nil {
		return nil, fmt.Errorf("encoding %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	o := &Object{
		TypeMeta: metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()},
		ObjectMeta: metav1.ObjectMeta{
			Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(),
			ResourceVersion: u.GetResourceVersion(), Generation: u.GetGeneration(),
			DeletionTimestamp: u.GetDeletionTimestamp(),
		},
		meta: metaFingerprint(u.GetLabels(), u.GetAnnotations()),
		raw:  raw,
	}
	return o, nil
}

// Raw is the object as stored, JSON; it must not be changed.
func (o *Object) Raw() []byte { return o.raw }

// DeepCopyObject copies o; the copies share raw, which is never changed.
func (o *Object) DeepCopyObject() runtime.Object {
	c := &Object{TypeMeta: o.TypeMeta, meta: o.meta, raw: o.raw}
	o.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return c
}

// toObject is the audit informers' transform: the store keeps Objects.
// An Object already (an informer may hand back what it stored) stays as
// it is.
func toObject(in any) (any, error) {
	if u, ok := in.(*unstructured.Unstructured); ok {
		return NewObject(u)
	}
	return in, nil
}

// newInformer is an informer of every object of gvk (served as gvr),
// keeping Objects. The audit runs its own informers rather than the
// manager cache's: a cache informer keeps the decoded objects, and the
// typed informers of the reconcilers and lookups cannot stand in for them
// (their types know only the fields shepherd reads, rules may read any).
// They run as long as the leadership term, so a standby keeps nothing.
func newInformer(dyn dynamic.Interface, gvk schema.GroupVersionKind, gvr schema.GroupVersionResource) (toolscache.SharedIndexInformer, error) {
	res := dyn.Resource(gvr)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return res.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return res.Watch(ctx, opts)
		},
	}
	example := &unstructured.Unstructured{}
	example.SetGroupVersionKind(gvk)
	inf := toolscache.NewSharedIndexInformerWithOptions(lw, example, toolscache.SharedIndexInformerOptions{
		ObjectDescription: "audited " + gvk.String(),
	})
	if err := inf.SetTransform(toObject); err != nil {
		return nil, err
	}
	return inf, nil
}

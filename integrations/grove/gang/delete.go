package gang

import (
	"context"
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/metadata"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Deleter deletes the PodCliques and Pods a gang termination or a training
// restart removes. It goes through the metadata API rather than the
// manager's client: the apiserver then answers each delete with the deleted
// object's metadata (protobuf) instead of encoding the whole object back,
// and nothing here decodes it — controller-runtime's typed client decodes the
// full answer and converts it to unstructured, three passes over a large
// PodClique per delete, paid hundreds of times in a burst of terminations
// (measured by BenchmarkGangTermination in test/grove).
type Deleter struct {
	meta   metadata.Interface
	mapper meta.RESTMapper
	scheme *runtime.Scheme
}

// NewDeleter builds a Deleter on the manager's connection, REST mapper and
// scheme.
func NewDeleter(mgr ctrl.Manager) (*Deleter, error) {
	m, err := metadata.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("building the metadata client for deletes: %w", err)
	}
	return &Deleter{meta: m, mapper: mgr.GetRESTMapper(), scheme: mgr.GetScheme()}, nil
}

// Exact deletes o only if it is still the object with o's UID, in the
// background, and reports whether this call deleted it. An object already
// gone, or replaced by a new one of the same name, is not an error.
func (d *Deleter) Exact(ctx context.Context, o client.Object) (bool, error) {
	fail := func(err error) (bool, error) {
		return false, fmt.Errorf("deleting %T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
	}
	gvk, err := apiutil.GVKForObject(o, d.scheme)
	if err != nil {
		return fail(err)
	}
	m, err := d.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fail(err)
	}
	uid := o.GetUID()
	background := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &background}
	err = d.meta.Resource(m.Resource).Namespace(o.GetNamespace()).Delete(ctx, o.GetName(), opts)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return false, nil
	}
	return fail(err)
}

// DeleteAllExact deletes every object with Exact at once — a gang goes as
// one, in one round trip rather than one per object — and returns how many
// this call deleted: a reconcile working from a cache that has not yet seen
// an earlier deletion deletes nothing and so counts and reports nothing.
func DeleteAllExact[T client.Object](ctx context.Context, d *Deleter, objs []T) (int, error) {
	errs := make([]error, len(objs))
	done := make([]bool, len(objs))
	var wg sync.WaitGroup
	for i, o := range objs {
		wg.Go(func() { done[i], errs[i] = d.Exact(ctx, o) })
	}
	wg.Wait()
	n := 0
	for _, ok := range done {
		if ok {
			n++
		}
	}
	return n, errors.Join(errs...)
}

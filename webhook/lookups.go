package webhook

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/shepherd-k8s/shepherd/integrations/gocheck"
)

// Lookups is everything the Go checks need beyond the request: other
// objects and discovery (gocheck.Lookups).
type Lookups = gocheck.Lookups

// NamespaceLookup is implemented by Lookups that can also return the
// request's Namespace, for WorkloadPolicies with a namespaceSelector or that
// read namespaceObject. Without it such a policy sees a namespace without
// labels.
type NamespaceLookup interface {
	Namespace(ctx context.Context, name string) (*corev1.Namespace, error)
}

// NewClientLookups reads through a controller-runtime reader (the server's
// cache); workloadAPIServed reports the current discovery result. live, when
// not nil, is asked whenever the cache says an object is absent: a cache
// lags the apiserver, and a runtime created a moment before its TrainJob
// (kubectl apply of both), or the TrainJob Trainer creates a JobSet for at
// once, must not be judged missing because this replica has not seen it
// yet. Only misses go to the apiserver, so the common case stays cached.
//
// The reads a miss makes are bounded (liveReadsPerSecond, liveReadsBurst):
// a flood of TrainJobs naming a runtime that does not exist must not spend
// the client's apiserver budget the reconcilers share. Over the bound, a
// miss is the cache's answer.
func NewClientLookups(cached, live client.Reader, workloadAPIServed func() bool) Lookups {
	return &clientLookups{r: cached, live: live, served: workloadAPIServed,
		limit: rate.NewLimiter(liveReadsPerSecond, liveReadsBurst)}
}

// The bound on the apiserver reads cache misses make: a quarter of serve's
// default --kube-api-qps, far above what objects created a moment before
// their dependants need.
const (
	liveReadsPerSecond = 50
	liveReadsBurst     = 100
)

type clientLookups struct {
	r      client.Reader
	live   client.Reader
	served func() bool
	limit  *rate.Limiter
}

// cachedOnlyKey marks a context whose lookups stay in the cache.
type cachedOnlyKey struct{}

// WithCachedLookups marks ctx so that the client lookups answer a miss from
// the cache alone. The background audit judges objects from informers that
// lag as the cache does, and judges them again on the next pass; a live read
// per object whose runtime is gone would put a GET per TrainJob on the
// apiserver every pass.
func WithCachedLookups(ctx context.Context) context.Context {
	return context.WithValue(ctx, cachedOnlyKey{}, true)
}

// get reads key into o from the cache and, on a miss, from the apiserver.
func (l *clientLookups) get(ctx context.Context, key client.ObjectKey, o client.Object) error {
	// Without a copy: the chain only reads what it looks up, and a
	// runtime's copy was 7 % of a TrainJob's admission work.
	err := l.r.Get(ctx, key, o, client.UnsafeDisableDeepCopy)
	if l.live == nil || !apierrors.IsNotFound(err) || ctx.Value(cachedOnlyKey{}) != nil {
		return err
	}
	if !l.limit.Allow() {
		liveReads.WithLabelValues(liveReadLimited).Inc()
		return err
	}
	err = l.live.Get(ctx, key, o)
	switch {
	case err == nil:
		liveReads.WithLabelValues(liveReadFound).Inc()
	case apierrors.IsNotFound(err):
		liveReads.WithLabelValues(liveReadNotFound).Inc()
	default:
		liveReads.WithLabelValues(liveReadError).Inc()
	}
	return err
}

// Values of liveReads' result label.
const (
	liveReadFound    = "found"
	liveReadNotFound = "not_found"
	liveReadError    = "error"
	liveReadLimited  = "limited"
)

var liveReads = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "shepherd_lookup_apiserver_reads_total",
	Help: "Reads of the apiserver the admission lookups made because the informer cache did not hold the object (yet), by result: found (the cache lagged), not_found, error, limited (over the bound on such reads, answered from the cache).",
}, []string{"result"})

func init() {
	metrics.Registry.MustRegister(liveReads)
}

func (l *clientLookups) Get(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (client.Object, error) {
	o, err := newObject(gvk)
	if err != nil {
		return nil, err
	}
	return o, l.get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, o)
}

// newObject is an empty object of kind gvk: typed when the scheme knows the
// kind (the informer cache holds typed objects), else unstructured.
func newObject(gvk schema.GroupVersionKind) (client.Object, error) {
	if !scheme.Recognizes(gvk) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		return u, nil
	}
	o, err := scheme.New(gvk)
	if err != nil {
		return nil, err
	}
	co, ok := o.(client.Object)
	if !ok {
		return nil, fmt.Errorf("%v is not an object", gvk)
	}
	return co, nil
}

func (l *clientLookups) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	var o corev1.Namespace
	return &o, l.get(ctx, client.ObjectKey{Name: name}, &o)
}

func (l *clientLookups) WorkloadAPIServed() bool { return l.served != nil && l.served() }

// NewObjectLookups answers lookups from a fixed set of objects, typed or
// unstructured — the --context manifests of `shepherd check`. Objects of
// other kinds are ignored.
func NewObjectLookups(objs []runtime.Object, workloadAPIServed bool) Lookups {
	l := &objectLookups{objs: map[objectKey]*unstructured.Unstructured{}, served: workloadAPIServed}
	for _, o := range objs {
		u, err := toUnstructured(o)
		if err != nil {
			continue
		}
		gvk := u.GroupVersionKind()
		l.objs[objectKey{gk: gvk.GroupKind(), namespace: u.GetNamespace(), name: u.GetName()}] = u
	}
	return l
}

type objectKey struct {
	gk              schema.GroupKind
	namespace, name string
}

type objectLookups struct {
	objs   map[objectKey]*unstructured.Unstructured
	served bool
}

func toUnstructured(o runtime.Object) (*unstructured.Unstructured, error) {
	if u, ok := o.(*unstructured.Unstructured); ok {
		return u, nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	if u.GetKind() == "" {
		gvks, _, err := scheme.ObjectKinds(o)
		if err != nil || len(gvks) == 0 {
			return nil, fmt.Errorf("unknown kind of %T", o)
		}
		u.SetGroupVersionKind(gvks[0])
	}
	return u, nil
}

func (l *objectLookups) Get(_ context.Context, gvk schema.GroupVersionKind, namespace, name string) (client.Object, error) {
	u, ok := l.objs[objectKey{gk: gvk.GroupKind(), namespace: namespace, name: name}]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: strings.ToLower(gvk.Kind)}, name)
	}
	o, err := newObject(gvk)
	if err != nil {
		return nil, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, o); err != nil {
		return nil, fmt.Errorf("decoding %s %s/%s: %w", gvk.Kind, namespace, name, err)
	}
	return o, nil
}

func (l *objectLookups) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	o, err := l.Get(ctx, corev1.SchemeGroupVersion.WithKind("Namespace"), "", name)
	if err != nil {
		return &corev1.Namespace{}, err
	}
	return o.(*corev1.Namespace), nil
}

func (l *objectLookups) WorkloadAPIServed() bool { return l.served }

package webhook

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
)

// countingReader counts the Gets it answers.
type countingReader struct {
	client.Reader
	gets int
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	r.gets++
	return r.Reader.Get(ctx, key, o, opts...)
}

// TestClientLookupsAskTheAPIServerOnACacheMiss: an object the cache has not
// seen yet (created a moment ago) is read from the apiserver; one the cache
// holds is not; one absent from both is NotFound.
var ctrGVK = trainerv1alpha1.GroupVersion.WithKind(api.KindClusterTrainingRuntime)

func TestClientLookupsAskTheAPIServerOnACacheMiss(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := trainerv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// Runtimes are read as served (unstructured): the scheme does not
	// know them.
	seen, fresh := trainer.NewRuntime(api.KindClusterTrainingRuntime), trainer.NewRuntime(api.KindClusterTrainingRuntime)
	seen.SetName("seen")
	fresh.SetName("fresh")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"tier": "gpu"}}}
	cached := fake.NewClientBuilder().WithScheme(scheme).WithObjects(seen.DeepCopy()).Build()
	live := &countingReader{Reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(seen.DeepCopy(), fresh.DeepCopy(), ns.DeepCopy()).Build()}
	l := NewClientLookups(cached, live, nil)
	ctx := context.Background()

	for _, tc := range []struct {
		name      string
		wantFound bool
		wantLive  int // the apiserver reads this lookup makes
	}{
		{name: "seen", wantFound: true, wantLive: 0},
		{name: "fresh", wantFound: true, wantLive: 1},
		{name: "missing", wantFound: false, wantLive: 1},
	} {
		live.gets = 0
		rt, err := l.Get(ctx, ctrGVK, "", tc.name)
		switch {
		case tc.wantFound && (err != nil || rt.GetName() != tc.name):
			t.Errorf("ClusterTrainingRuntime %q: got %v, %v; want it found", tc.name, rt, err)
		case !tc.wantFound && !apierrors.IsNotFound(err):
			t.Errorf("ClusterTrainingRuntime %q: err %v, want NotFound", tc.name, err)
		}
		if live.gets != tc.wantLive {
			t.Errorf("ClusterTrainingRuntime %q: %d apiserver reads, want %d", tc.name, live.gets, tc.wantLive)
		}
	}

	got, err := l.(NamespaceLookup).Namespace(ctx, "team-a")
	if err != nil || got.Labels["tier"] != "gpu" {
		t.Errorf("a Namespace the cache has not seen: got labels %v, %v; want tier=gpu", got.Labels, err)
	}

	// The background audit's lookups stay in the cache.
	live.gets = 0
	if _, err := l.Get(WithCachedLookups(ctx), ctrGVK, "", "fresh"); !apierrors.IsNotFound(err) || live.gets != 0 {
		t.Errorf("WithCachedLookups: err %v after %d apiserver reads, want NotFound after none", err, live.gets)
	}

	// Over the bound, a miss is the cache's answer, and counted.
	limited := NewClientLookups(cached, live, nil).(*clientLookups)
	limited.limit = rate.NewLimiter(0, 1) // one read, then none
	live.gets = 0
	before := testutil.ToFloat64(liveReads.WithLabelValues(liveReadLimited))
	if _, err := limited.Get(ctx, ctrGVK, "", "fresh"); err != nil {
		t.Errorf("the first miss within the bound: %v, want the runtime found", err)
	}
	if _, err := limited.Get(ctx, ctrGVK, "", "fresh"); !apierrors.IsNotFound(err) || live.gets != 1 {
		t.Errorf("a miss over the bound: err %v after %d apiserver reads, want NotFound after 1", err, live.gets)
	}
	if got := testutil.ToFloat64(liveReads.WithLabelValues(liveReadLimited)) - before; got != 1 {
		t.Errorf("shepherd_lookup_apiserver_reads_total{result=limited} grew by %v, want 1", got)
	}

	// Without a live reader a miss is the cache's answer.
	if _, err := NewClientLookups(cached, nil, nil).Get(ctx, ctrGVK, "", "fresh"); !apierrors.IsNotFound(err) {
		t.Errorf("without a live reader: err %v, want NotFound", err)
	}
}

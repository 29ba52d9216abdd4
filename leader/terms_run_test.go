package leader

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// TestRunWithoutElectionRestartsAFailedTerm: without leader election a
// term that fails is followed, after the pause, by a new one; the terms
// stop with the context.
func TestRunWithoutElectionRestartsAFailedTerm(t *testing.T) {
	probe := &termProbe{fail: 2}
	terms := NewTerms(servingManager(t, &informertest.FakeInformers{}), nil, time.Second)
	terms.AddLeaderOnly(probe.setup)
	const pause = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		terms.RunWithoutElection(ctx, pause)
	}()
	testkit.Eventually(t, 10*time.Second, "a third term running", func() bool {
		_, running := probe.state()
		return running
	})
	starts := probe.starts()
	if len(starts) != 3 {
		t.Fatalf("%d terms started, want 3 (two failed)", len(starts))
	}
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < pause {
			t.Errorf("term %d started %v after a failed one; want at least the pause %v", i+1, gap, pause)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("RunWithoutElection did not return after its context ended")
	}
	if _, running := probe.state(); running {
		t.Error("the term still runs after RunWithoutElection returned")
	}
}

// TestRunStopsAtTheFirstFailedSetup: a leader-only part that fails fails
// the term before what comes after it is set up, the controllers
// included; the term never becomes the current one, so a controller
// activated afterwards waits for the next term.
func TestRunStopsAtTheFirstFailedSetup(t *testing.T) {
	s := &setups{byMg: map[manager.Manager][]string{}}
	terms := NewTerms(servingManager(t, &informertest.FakeInformers{}), nil, time.Second)
	refused := errors.New("refused")
	terms.AddLeaderOnly(s.add("first"))
	terms.AddLeaderOnly(func(manager.Manager) error { return refused })
	terms.AddLeaderOnly(s.add("after the failure"))
	terms.Activate(Controller{Name: "trainjob", Setup: s.add("trainjob")})
	// Bounded: a term that went on despite the failure would run until
	// its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := terms.Run(ctx); !errors.Is(err, refused) {
		t.Fatalf("Run = %v, want the leader-only part's error", err)
	}
	term := s.current()
	if diff := cmp.Diff([]string{"first"}, s.of(term)); diff != "" {
		t.Errorf("set up in the failed term (-want +got):\n%s", diff)
	}
	terms.Activate(Controller{Name: "gang", Setup: s.add("gang")})
	if got := s.of(term); len(got) != 1 {
		t.Errorf("a controller activated after the failed term was set up in it: %v", got)
	}
}

// recorders is a recorder.Provider handing out one recorder per name.
type recorders struct {
	recorder.Provider
	byName map[string]recorder.EventRecorder
}

func (r recorders) GetEventRecorder(name string) recorder.EventRecorder { return r.byName[name] }

type namedRecorder struct {
	recorder.EventRecorder
	name string
}

// TestEventsFrom: a term's manager writes its Events through the serving
// manager's recorders, by name.
func TestEventsFrom(t *testing.T) {
	want := &namedRecorder{name: "shepherd-trainjob"}
	m := &EventsFrom{Manager: servingManager(t, &informertest.FakeInformers{}), Events: recorders{byName: map[string]recorder.EventRecorder{"shepherd-trainjob": want}}}
	if got := m.GetEventRecorder("shepherd-trainjob"); got != want {
		t.Errorf("GetEventRecorder = %v, want the provider's recorder of that name", got)
	}
}

func (c *countingInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, _ time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return c.AddEventHandler(h)
}

func (c *countingInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, _ toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return c.AddEventHandler(h)
}

func (c *countingCache) GetInformerForKind(context.Context, schema.GroupVersionKind, ...cache.InformerGetOption) (cache.Informer, error) {
	return c.inf, nil
}

// refusingInformer refuses every handler.
type refusingInformer struct{ countingInformer }

func (r *refusingInformer) AddEventHandler(toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return nil, errors.New("informer stopped")
}

// TestTermCacheTracksEveryHandler: handlers added through an informer got
// by kind, and with a resync period or options, leave with the term too;
// a handler the informer refused is not tracked; an informer the cache
// cannot give is the cache's error.
func TestTermCacheTracksEveryHandler(t *testing.T) {
	ctx := context.Background()
	shared := &countingCache{inf: &countingInformer{}}
	tc := &termCache{Cache: shared, indexed: &indexSet{keys: map[string]bool{}}, own: map[string]bool{}}
	byKind, err := tc.GetInformerForKind(ctx, corev1.SchemeGroupVersion.WithKind("Pod"))
	if err != nil {
		t.Fatal(err)
	}
	byObject, err := tc.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	h := toolscache.ResourceEventHandlerFuncs{}
	for _, add := range []func() (toolscache.ResourceEventHandlerRegistration, error){
		func() (toolscache.ResourceEventHandlerRegistration, error) { return byKind.AddEventHandler(h) },
		func() (toolscache.ResourceEventHandlerRegistration, error) {
			return byKind.AddEventHandlerWithResyncPeriod(h, time.Minute)
		},
		func() (toolscache.ResourceEventHandlerRegistration, error) {
			return byObject.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{})
		},
	} {
		if _, err := add(); err != nil {
			t.Fatal(err)
		}
	}
	tc.release()
	if shared.inf.added != 3 || shared.inf.removed != 3 {
		t.Errorf("%d handlers added, %d removed with the term; want 3 and 3", shared.inf.added, shared.inf.removed)
	}

	refusing := &refusingInformer{}
	tc = &termCache{Cache: &countingCache{inf: &refusing.countingInformer}, own: map[string]bool{}}
	inf := &termInformer{Informer: refusing, c: tc}
	if _, err := inf.AddEventHandler(h); err == nil {
		t.Fatal("the informer's refusal was not returned")
	}
	tc.release()
	if refusing.removed != 0 {
		t.Errorf("a refused handler was removed %d times; want it never tracked", refusing.removed)
	}

	broken := &termCache{Cache: &informertest.FakeInformers{Error: errors.New("no such kind")}, own: map[string]bool{}}
	if _, err := broken.GetInformer(ctx, &corev1.Pod{}); err == nil {
		t.Error("GetInformer: the cache's error was not returned")
	}
	if _, err := broken.GetInformerForKind(ctx, corev1.SchemeGroupVersion.WithKind("Pod")); err == nil {
		t.Error("GetInformerForKind: the cache's error was not returned")
	}
}

// failingIndexCache refuses an index registered twice, as an informer
// does.
type failingIndexCache struct {
	informertest.FakeInformers
	seen map[string]bool
}

func (c *failingIndexCache) IndexField(_ context.Context, _ client.Object, field string, _ client.IndexerFunc) error {
	if c.seen[field] {
		return errors.New("indexer conflict: " + field)
	}
	c.seen[field] = true
	return nil
}

// TestTermCacheIndexTwiceInOneTerm: an index the same term registers
// twice is a mistake the shared cache reports, as without terms; the
// next term's registration of it is not.
func TestTermCacheIndexTwiceInOneTerm(t *testing.T) {
	ctx := context.Background()
	shared := &failingIndexCache{seen: map[string]bool{}}
	indexed := &indexSet{keys: map[string]bool{}}
	fn := func(client.Object) []string { return nil }
	first := &termCache{Cache: shared, indexed: indexed, own: map[string]bool{}}
	if err := first.IndexField(ctx, &corev1.Pod{}, "spec.nodeName", fn); err != nil {
		t.Fatal(err)
	}
	if err := first.IndexField(ctx, &corev1.Pod{}, "spec.nodeName", fn); err == nil {
		t.Error("the same index twice in one term was accepted")
	}
	second := &termCache{Cache: shared, indexed: indexed, own: map[string]bool{}}
	if err := second.IndexField(ctx, &corev1.Pod{}, "spec.nodeName", fn); err != nil {
		t.Errorf("the next term's registration: %v", err)
	}
}

// unsyncedCache never syncs: the cache of a serving manager that failed
// before it started its informers.
type unsyncedCache struct{ informertest.FakeInformers }

func (*unsyncedCache) WaitForCacheSync(ctx context.Context) bool {
	<-ctx.Done()
	return false
}

// TestRunWaitsForTheServingCache: a term does not start (nothing is set
// up) while the serving manager's cache has not synced, and Run returns
// when its context ends, without an error.
func TestRunWaitsForTheServingCache(t *testing.T) {
	s := &setups{byMg: map[manager.Manager][]string{}}
	terms := NewTerms(servingManager(t, &unsyncedCache{}), nil, time.Second)
	terms.AddLeaderOnly(s.add("leader-only"))
	terms.Activate(Controller{Name: "trainjob", Setup: s.add("trainjob")})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- terms.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil once its context ended", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if term := s.current(); term != nil {
		t.Errorf("a term was set up before the serving cache synced: %v", s.of(term))
	}
}

// TestRunFailsWhenTheServingCacheNeverSyncs: a serving cache that does not
// sync within the bound fails the term with an error naming it, before
// anything is set up.
func TestRunFailsWhenTheServingCacheNeverSyncs(t *testing.T) {
	s := &setups{byMg: map[manager.Manager][]string{}}
	terms := NewTerms(servingManager(t, &unsyncedCache{}), nil, time.Second)
	terms.syncTimeout = 200 * time.Millisecond
	terms.Activate(Controller{Name: "trainjob", Setup: s.add("trainjob")})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := terms.Run(ctx); err == nil || !strings.Contains(err.Error(), "did not sync within 200ms") {
		t.Errorf("Run = %v, want the cache's error", err)
	}
	if term := s.current(); term != nil {
		t.Errorf("a term was set up: %v", s.of(term))
	}
}

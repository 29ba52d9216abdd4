package leader

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// servingManager is a serving manager over fakes: no apiserver is dialled.
func servingManager(t *testing.T, c cache.Cache) manager.Manager {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(&rest.Config{Host: "https://127.0.0.1:1"}, manager.Options{
		Scheme:   scheme,
		NewCache: func(*rest.Config, cache.Options) (cache.Cache, error) { return c, nil },
		NewClient: func(*rest.Config, client.Options) (client.Client, error) {
			return fake.NewClientBuilder().WithScheme(scheme).Build(), nil
		},
		MapperProvider:         func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return meta.NewDefaultRESTMapper(nil), nil },
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// setups records what each term set up, by term manager.
type setups struct {
	mu   sync.Mutex
	byMg map[manager.Manager][]string
	last manager.Manager
}

func (s *setups) add(name string) func(manager.Manager) error {
	return func(m manager.Manager) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.byMg[m] = append(s.byMg[m], name)
		s.last = m
		return nil
	}
}

func (s *setups) of(m manager.Manager) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.byMg[m]...)
}

func (s *setups) current() manager.Manager {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// TestTermsSetUpEverythingInEveryTerm: every term sets up the leader-only
// parts in the order added, then the controllers activated so far; a
// controller activated during a term is set up in it at once and in every
// later term; a term ends with its context; the next one is a new manager.
func TestTermsSetUpEverythingInEveryTerm(t *testing.T) {
	s := &setups{byMg: map[manager.Manager][]string{}}
	terms := NewTerms(servingManager(t, &informertest.FakeInformers{}), nil, time.Second)
	terms.AddLeaderOnly(s.add("certificate authority"))
	terms.AddLeaderOnly(s.add("update filter"))
	terms.Activate(Controller{Name: "trainjob", Setup: s.add("trainjob")})
	if s.current() != nil {
		t.Fatal("a controller was set up with no term running")
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- terms.Run(ctx) }()
	testkit.Eventually(t, 10*time.Second, "the first term set up", func() bool { return len(s.of(s.current())) == 3 })
	first := s.current()
	terms.Activate(Controller{Name: "gang", Setup: s.add("gang")})
	if diff := cmp.Diff([]string{"certificate authority", "update filter", "trainjob", "gang"}, s.of(first)); diff != "" {
		t.Errorf("first term (-want +got):\n%s", diff)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("a term ended by its context: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the term did not end with its context")
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- terms.Run(ctx) }()
	testkit.Eventually(t, 10*time.Second, "the second term set up", func() bool { return s.current() != first && len(s.of(s.current())) == 4 })
	if diff := cmp.Diff([]string{"certificate authority", "update filter", "trainjob", "gang"}, s.of(s.current())); diff != "" {
		t.Errorf("second term (-want +got):\n%s", diff)
	}

	// A controller the running term refuses ends the term; the next one
	// is where it is set up again (here it fails again, so Run says so).
	refused := errors.New("refused")
	terms.Activate(Controller{Name: "broken", Setup: func(manager.Manager) error { return refused }})
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the refusing term ended with %v; want nil (ended, not failed)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a term that refused a controller kept running")
	}
	if err := terms.Run(ctx); !errors.Is(err, refused) {
		t.Errorf("the next term: %v; want the controller's error", err)
	}
}

// countingInformer counts the handlers added and removed.
type countingInformer struct {
	cache.Informer
	mu             sync.Mutex
	added, removed int
}

func (c *countingInformer) AddEventHandler(toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.added++
	return nil, nil
}

func (c *countingInformer) RemoveEventHandler(toolscache.ResourceEventHandlerRegistration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removed++
	return nil
}

type countingCache struct {
	informertest.FakeInformers
	inf     *countingInformer
	indexed int
}

func (c *countingCache) GetInformer(context.Context, client.Object, ...cache.InformerGetOption) (cache.Informer, error) {
	return c.inf, nil
}

func (c *countingCache) IndexField(context.Context, client.Object, string, client.IndexerFunc) error {
	c.indexed++
	return nil
}

// TestTermCacheReleasesHandlersAndIndexesOnce: the handlers a term adds to
// the shared informers leave with it (one added after it ended is removed
// at once), and a field index is registered on the shared cache once for
// the life of the process, however many terms register it.
func TestTermCacheReleasesHandlersAndIndexesOnce(t *testing.T) {
	ctx := context.Background()
	shared := &countingCache{inf: &countingInformer{}}
	indexed := &indexSet{keys: map[string]bool{}}
	index := func(tc *termCache) {
		t.Helper()
		if err := tc.IndexField(ctx, &corev1.Pod{}, "spec.nodeName", func(client.Object) []string { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	addHandler := func(tc *termCache) {
		t.Helper()
		inf, err := tc.GetInformer(ctx, &corev1.Pod{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{}); err != nil {
			t.Fatal(err)
		}
	}

	first := &termCache{Cache: shared, indexed: indexed, own: map[string]bool{}}
	index(first)
	addHandler(first)
	addHandler(first)
	first.release()
	if shared.inf.added != 2 || shared.inf.removed != 2 {
		t.Errorf("first term: %d handlers added, %d removed; want 2 and 2", shared.inf.added, shared.inf.removed)
	}
	addHandler(first) // a source still starting after the term ended
	if shared.inf.removed != 3 {
		t.Errorf("a handler added after the term ended was kept (%d removed, want 3)", shared.inf.removed)
	}

	second := &termCache{Cache: shared, indexed: indexed, own: map[string]bool{}}
	index(second)
	if shared.indexed != 1 {
		t.Errorf("the shared cache got %d registrations of one index over two terms; want 1", shared.indexed)
	}
}

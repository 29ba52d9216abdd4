package integrations_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	. "github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// syncedReader is a crdReader whose CRDs may change while a watcher runs.
type syncedReader struct {
	mu  sync.Mutex
	r   crdReader
	err error
}

func (s *syncedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return s.r.Get(ctx, key, obj, opts...)
}

func (s *syncedReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	return s.r.List(ctx, list, opts...)
}

func (s *syncedReader) set(crds []*apiextensionsv1.CustomResourceDefinition) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.r.crds = crds
}

// lockedMapper is a RESTMapper discovery may add to while a watcher runs.
type lockedMapper struct {
	mu sync.Mutex
	*meta.DefaultRESTMapper
}

func (m *lockedMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.DefaultRESTMapper.RESTMapping(gk, versions...)
}

func (m *lockedMapper) discover(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	discover(m.DefaultRESTMapper, name)
}

// start runs w.Start until the test ends, and returns what it returned.
func start(t *testing.T, w *Watcher) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(ctrl.LoggerInto(context.Background(), logr.Discard()))
	done, returned := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(returned)
		done <- w.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Error("Start did not return after its context ended")
		}
	})
	return done
}

// TestWatcherStartActsOnChanges: Start waits for the informer's sync, is
// ready after the first look, runs a hook registered later at the next
// look, and looks again (without an event) at a framework established but
// not yet discovered until discovery knows it.
func TestWatcherStartActsOnChanges(t *testing.T) {
	reader := &syncedReader{}
	mapper := &lockedMapper{DefaultRESTMapper: meta.NewDefaultRESTMapper(nil)}
	w := NewWatcherForTest(reader, mapper, nil)
	var synced atomic.Bool
	w.SetHasSyncedForTest(synced.Load)
	if err := w.ReadyChecker(nil); err == nil {
		t.Error("ready before Start")
	}
	if w.NeedLeaderElection() {
		t.Error("the watcher needs leader election; every replica needs the lookups")
	}
	start(t, w)
	time.Sleep(300 * time.Millisecond)
	if err := w.ReadyChecker(nil); err == nil {
		t.Fatal("ready before the informer synced")
	}
	synced.Store(true)
	testkit.Eventually(t, 10*time.Second, "the watcher ready", func() error { return w.ReadyChecker(nil) })

	// A hook added once running runs at the next look.
	var jobset atomic.Int32
	reader.set(frameworkCRDs(JobSet))
	mapper.discover(JobSet)
	w.OnActivate(JobSet, func(context.Context) error { jobset.Add(1); return nil })
	testkit.Eventually(t, 10*time.Second, "the jobset hook", func() bool { return jobset.Load() == 1 })

	// Trainer established but not discovered: looked at again until it is.
	var trainer atomic.Int32
	w.OnActivate(Trainer, func(context.Context) error { trainer.Add(1); return nil })
	reader.set(frameworkCRDs(JobSet, Trainer))
	var got atomic.Value
	w.Subscribe(func(_ context.Context, crds []*apiextensionsv1.CustomResourceDefinition) { got.Store(len(crds)) })
	testkit.Eventually(t, 10*time.Second, "the subscriber to see trainer's CRDs", func() bool { n, _ := got.Load().(int); return n == 4 })
	if w.Active(Trainer) {
		t.Fatal("trainer active before discovery knows its kinds")
	}
	mapper.discover(Trainer)
	testkit.Eventually(t, 10*time.Second, "trainer active once discovered", func() bool { return w.Active(Trainer) && trainer.Load() == 1 })
	if jobset.Load() != 1 {
		t.Errorf("the jobset hook ran %d times, want once", jobset.Load())
	}
	// A subscriber added once running gets the CRDs at once, nothing
	// having changed.
	var late atomic.Int32
	w.Subscribe(func(context.Context, []*apiextensionsv1.CustomResourceDefinition) { late.Add(1) })
	testkit.Eventually(t, 10*time.Second, "the late subscriber's delivery", func() bool { return late.Load() == 1 })
}

func TestWatcherStartFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(w *Watcher, r *syncedReader)
		modes map[string]Mode
		want  string
	}{
		{name: "a framework that is on is not served at start", modes: map[string]Mode{Grove: ModeOn},
			want: "framework grove is on, but the cluster does not serve its CRDs PodCliqueSet.grove.io, PodClique.grove.io, PodCliqueScalingGroup.grove.io: install them, or set the framework's mode to auto"},
		{name: "the CRDs cannot be listed", setup: func(_ *Watcher, r *syncedReader) { r.err = errors.New("forbidden") },
			want: "listing CustomResourceDefinitions: forbidden"},
		{name: "a hook fails at start", setup: func(w *Watcher, r *syncedReader) {
			w.OnActivateAll([]string{JobSet, Trainer}, func(context.Context) error { return errors.New("no index") })
			r.set(frameworkCRDs(JobSet, Trainer))
		}, want: "starting framework jobset+trainer: no index"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reader := &syncedReader{}
			mapper := &lockedMapper{DefaultRESTMapper: meta.NewDefaultRESTMapper(nil)}
			mapper.discover(JobSet)
			mapper.discover(Trainer)
			w := NewWatcherForTest(reader, mapper, tc.modes)
			w.SetHasSyncedForTest(func() bool { return true })
			if tc.setup != nil {
				tc.setup(w, reader)
			}
			select {
			case err := <-start(t, w):
				if err == nil || err.Error() != tc.want {
					t.Errorf("Start = %v, want %q", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Start did not fail")
			}
		})
	}
}

// A hook that fails once the watcher runs stops it, and with it the
// manager.
func TestWatcherStartStopsWhenALaterHookFails(t *testing.T) {
	reader := &syncedReader{}
	mapper := &lockedMapper{DefaultRESTMapper: meta.NewDefaultRESTMapper(nil)}
	mapper.discover(JobSet)
	w := NewWatcherForTest(reader, mapper, nil)
	w.SetHasSyncedForTest(func() bool { return true })
	done := start(t, w)
	testkit.Eventually(t, 10*time.Second, "the watcher ready", func() error { return w.ReadyChecker(nil) })
	reader.set(frameworkCRDs(JobSet))
	w.OnActivate(JobSet, func(context.Context) error { return errors.New("no index") })
	select {
	case err := <-done:
		if err == nil || err.Error() != "starting framework jobset: no index" {
			t.Errorf("Start = %v, want the hook's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not fail")
	}
}

// Start returns nil, and is never ready, when its context ends before the
// informer syncs.
func TestWatcherStartCancelledBeforeSync(t *testing.T) {
	w := NewWatcherForTest(&syncedReader{}, meta.NewDefaultRESTMapper(nil), nil)
	w.SetHasSyncedForTest(func() bool { return false })
	ctx, cancel := context.WithTimeout(ctrl.LoggerInto(context.Background(), logr.Discard()), 300*time.Millisecond)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Errorf("Start = %v, want nil", err)
	}
	if w.ReadyChecker(nil) == nil {
		t.Error("ready without having listed the CRDs")
	}
}

// A subscriber added after the first delivery gets the current CRDs at the
// next look even though they did not change, and so does every other.
func TestWatcherLateSubscriberIsOwed(t *testing.T) {
	w := NewWatcherForTest(&crdReader{crds: frameworkCRDs(JobSet)}, meta.NewDefaultRESTMapper(nil), nil)
	calls := map[string]int{}
	w.Subscribe(func(context.Context, []*apiextensionsv1.CustomResourceDefinition) { calls["first"]++ })
	for range 2 {
		if err := w.LookForTest(context.Background(), false); err != nil {
			t.Fatal(err)
		}
	}
	w.Subscribe(func(context.Context, []*apiextensionsv1.CustomResourceDefinition) { calls["late"]++ })
	if err := w.LookForTest(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"first": 2, "late": 1}, calls); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
}

func TestOnActivateOfAnUnknownFrameworkPanics(t *testing.T) {
	w := NewWatcherForTest(&crdReader{}, meta.NewDefaultRESTMapper(nil), nil)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), `OnActivate of unknown framework "kueue"`) {
			t.Errorf("recovered %v", r)
		}
	}()
	w.OnActivateAll([]string{JobSet, "kueue"}, func(context.Context) error { return nil })
}

// FrameworkCRDs keeps the established CRDs of the frameworks' groups, by
// name.
func TestFrameworkCRDs(t *testing.T) {
	items := []apiextensionsv1.CustomResourceDefinition{
		*crd("trainer.kubeflow.org", "TrainJob", "v1alpha1"),
		*crd("example.com", "Widget", "v1"),
		*crd("grove.io", "PodClique", "v1alpha1", notEstablished),
		*crd("jobset.x-k8s.io", "JobSet", "v1alpha2"),
		*crd("grove.io", "PodCliqueSet", "v1alpha1", func(c *apiextensionsv1.CustomResourceDefinition) { c.Status.Conditions = nil }),
	}
	var names []string
	for _, c := range FrameworkCRDs(items) {
		names = append(names, c.Name)
	}
	if diff := cmp.Diff([]string{"JobSet.jobset.x-k8s.io", "TrainJob.trainer.kubeflow.org"}, names); diff != "" {
		t.Errorf("CRDs (-want +got):\n%s", diff)
	}
}

func TestCacheByObjectLeavesOtherObjects(t *testing.T) {
	pod := &corev1.Pod{}
	pod.ManagedFields = nil
	got, err := CacheByObject().Transform(pod)
	if err != nil || got != any(pod) {
		t.Errorf("Transform(pod) = %v, %v; want the pod itself", got, err)
	}
}

// The registry's lookups by name and group, and what each framework looks
// up: the Namespace always.
func TestRegistryLookups(t *testing.T) {
	if f, ok := Of("grove.io"); !ok || f.Name != Grove {
		t.Errorf("Of(grove.io) = %s, %v", f.Name, ok)
	}
	if _, ok := Of("example.com"); ok {
		t.Error("Of(example.com) found a framework")
	}
	if _, ok := Lookup("kueue"); ok {
		t.Error("Lookup(kueue) found a framework")
	}
	objs := LookupObjects()
	got := map[string]int{}
	for name, os := range objs {
		got[name] = len(os)
	}
	// JobSet looks nothing up; Trainer its two runtimes and TrainJobs;
	// Grove PodCliqueSets.
	if diff := cmp.Diff(map[string]int{"": 1, Trainer: 3, Grove: 1}, got); diff != "" {
		t.Errorf("lookup objects by framework (-want +got):\n%s", diff)
	}
	if _, ok := objs[""][0].(*corev1.Namespace); !ok {
		t.Errorf("the built-in lookup is %T, want a Namespace", objs[""][0])
	}
	if _, ok := Tokens()["trainingSpec"]; !ok || len(Tokens()) != 1 {
		t.Errorf("tokens = %v, want Grove's trainingSpec", Tokens())
	}
	// A framework or controller registered twice is a programming error.
	f, _ := Lookup(JobSet)
	assertPanics(t, `framework "jobset" registered twice`, func() { Register(f) })
	assertPanics(t, `controller "gang" registered twice`, func() { RegisterController(Controller{Name: "gang"}) })
	if len(Frameworks) != 3 || len(Controllers()) != 4 {
		t.Errorf("a refused registration was kept: %d frameworks, %d controllers", len(Frameworks), len(Controllers()))
	}
}

func assertPanics(t *testing.T, want string, fn func()) {
	t.Helper()
	defer func() {
		t.Helper()
		if r := recover(); r == nil || !strings.Contains(r.(string), want) {
			t.Errorf("recovered %v, want a panic containing %q", r, want)
		}
	}()
	fn()
}

// Setup gives a controller the real clock unless given one, and
// names it in its error.
func TestControllerSetup(t *testing.T) {
	var got clock.PassiveClock
	c := Controller{Name: "x", New: func(_ ctrl.Manager, opts ControllerOptions) error { got = opts.Clock; return nil }}
	if err := c.Setup(nil, ControllerOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.(clock.RealClock); !ok {
		t.Errorf("clock = %T, want clock.RealClock", got)
	}
	fake := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	if err := c.Setup(nil, ControllerOptions{Clock: fake}); err != nil || got != fake {
		t.Errorf("Setup = %v, clock %v; want the fake clock kept", err, got)
	}
	boom := errors.New("boom")
	c.New = func(ctrl.Manager, ControllerOptions) error { return boom }
	if err := c.Setup(nil, ControllerOptions{}); !errors.Is(err, boom) || err.Error() != "setting up the x controller: boom" {
		t.Errorf("Setup = %v", err)
	}
}

package integrations_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	. "github.com/shepherd-k8s/shepherd/integrations"
	_ "github.com/shepherd-k8s/shepherd/integrations/all"
)

// crdReader lists a fixed set of CRDs, as the manager's cache would.
type crdReader struct {
	crds []*apiextensionsv1.CustomResourceDefinition
}

func (r *crdReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("not implemented")
}

func (r *crdReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	l := list.(*apiextensionsv1.CustomResourceDefinitionList)
	l.Items = nil
	for _, c := range r.crds {
		l.Items = append(l.Items, *c.DeepCopy())
	}
	return nil
}

// discover makes mapper know every kind of framework name, as discovery
// does a moment after its CRDs are established.
func discover(mapper *meta.DefaultRESTMapper, name string) {
	f, _ := Lookup(name)
	for _, k := range f.Kinds {
		mapper.Add(schema.GroupVersionKind{Group: f.Group, Version: f.Version, Kind: k}, meta.RESTScopeNamespace)
	}
}

// TestWatcherActivates walks a cluster through frameworks arriving and
// leaving: hooks run once, when all their frameworks are active and
// discovered; off never starts; an active framework stays active;
// subscribers see every change of the established CRDs (sorted by name),
// and only changes.
func TestWatcherActivates(t *testing.T) {
	ctx := context.Background()
	reader := &crdReader{}
	mapper := meta.NewDefaultRESTMapper(nil)
	w := NewWatcherForTest(reader, mapper, map[string]Mode{Grove: ModeOff})

	ran := map[string]int{}
	hook := func(name string) func(context.Context) error {
		return func(context.Context) error { ran[name]++; return nil }
	}
	w.OnActivate(Trainer, hook("trainer"))
	w.OnActivateAll([]string{Trainer, JobSet}, hook("trainer+jobset"))
	w.OnActivate(Grove, hook("grove"))
	var delivered [][]string
	w.Subscribe(func(_ context.Context, crds []*apiextensionsv1.CustomResourceDefinition) {
		var names []string
		for _, c := range crds {
			names = append(names, c.Spec.Names.Kind)
		}
		delivered = append(delivered, names)
	})

	step := func(what string, wantRan map[string]int, wantActive []string, wantDelivered [][]string) {
		t.Helper()
		if err := w.LookForTest(ctx, false); err != nil {
			t.Fatalf("%s: look: %v", what, err)
		}
		if diff := cmp.Diff(wantRan, ran); diff != "" {
			t.Errorf("%s: hooks run (-want +got):\n%s", what, diff)
		}
		var active []string
		for _, f := range Frameworks {
			if w.Active(f.Name) {
				active = append(active, f.Name)
			}
		}
		if diff := cmp.Diff(wantActive, active); diff != "" {
			t.Errorf("%s: active (-want +got):\n%s", what, diff)
		}
		if diff := cmp.Diff(wantDelivered, delivered); diff != "" {
			t.Errorf("%s: delivered to the subscriber (-want +got):\n%s", what, diff)
		}
		delivered = nil
	}

	step("no CRDs", map[string]int{}, nil, [][]string{nil})

	reader.crds = append(reader.crds, frameworkCRDs(Trainer)...)
	step("trainer established, not yet discovered", map[string]int{}, nil,
		[][]string{{"ClusterTrainingRuntime", "TrainJob", "TrainingRuntime"}})

	discover(mapper, Trainer)
	step("trainer discovered", map[string]int{"trainer": 1}, []string{Trainer}, nil)

	reader.crds = append(reader.crds, frameworkCRDs(JobSet, Grove)...)
	discover(mapper, JobSet)
	discover(mapper, Grove)
	step("jobset and grove (off) arrive", map[string]int{"trainer": 1, "trainer+jobset": 1}, []string{Trainer, JobSet},
		[][]string{{"ClusterTrainingRuntime", "JobSet", "PodClique", "PodCliqueScalingGroup", "PodCliqueSet", "TrainJob", "TrainingRuntime"}})

	reader.crds = frameworkCRDs(Trainer)
	step("jobset and grove removed: jobset stays active", map[string]int{"trainer": 1, "trainer+jobset": 1}, []string{Trainer, JobSet},
		[][]string{{"ClusterTrainingRuntime", "TrainJob", "TrainingRuntime"}})
}

func TestWatcherRequiredFrameworkMissingFailsAtStart(t *testing.T) {
	reader := &crdReader{crds: frameworkCRDs(Trainer, JobSet)}
	mapper := meta.NewDefaultRESTMapper(nil)
	discover(mapper, Trainer)
	discover(mapper, JobSet)
	w := NewWatcherForTest(reader, mapper, map[string]Mode{Trainer: ModeOn, Grove: ModeOn})
	err := w.LookForTest(context.Background(), true)
	if err == nil {
		t.Fatal("look succeeded with grove on and its CRDs absent")
	}
	for _, want := range []string{"grove", "PodCliqueSet.grove.io", "PodCliqueScalingGroup.grove.io"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "trainer") {
		t.Errorf("error %q names trainer, which is served", err)
	}
	// Later, a required framework that goes away is logged, not fatal.
	reader.crds = frameworkCRDs(JobSet)
	if err := w.LookForTest(context.Background(), false); err != nil {
		t.Errorf("a later look failed: %v", err)
	}
}

func TestWatcherHookErrorStops(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper(nil)
	discover(mapper, JobSet)
	w := NewWatcherForTest(&crdReader{crds: frameworkCRDs(JobSet)}, mapper, nil)
	w.OnActivate(JobSet, func(context.Context) error { return errors.New("boom") })
	if err := w.LookForTest(context.Background(), true); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("look = %v, want the hook's error", err)
	}
}

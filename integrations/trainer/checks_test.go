package trainer_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/integrations/gocheck"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// check is the registered check id.
func check(t *testing.T, id string) gocheck.Check {
	t.Helper()
	for _, c := range trainer.Checks {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("no check %s", id)
	return gocheck.Check{}
}

// lookups answers from objs as `shepherd check` does from its --context
// (webhook.NewObjectLookups), except that a Get of a name in fail fails
// with its error: an apiserver or cache that could not answer.
type lookups struct {
	gocheck.Lookups
	fail map[string]error
}

func newLookups(served bool, fail map[string]error, objs ...runtime.Object) lookups {
	return lookups{Lookups: webhook.NewObjectLookups(objs, served), fail: fail}
}

func (l lookups) Get(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (client.Object, error) {
	if err, ok := l.fail[name]; ok {
		return nil, err
	}
	return l.Lookups.Get(ctx, gvk, namespace, name)
}

var errUnavailable = errors.New("the server is currently unable to handle the request")

// workloadRuntime is a ClusterTrainingRuntime using podGroupPolicy.workload
// in its seed field.
func workloadRuntime(name string) *testkit.Builder {
	return testkit.ClusterTrainingRuntime(name, "img").Set(map[string]any{}, "spec", "podGroupPolicy", "workload")
}

func TestCheckRuntimeRef(t *testing.T) {
	objs := []runtime.Object{
		testkit.ClusterTrainingRuntime("torch", "img").Obj(),
		testkit.TrainingRuntime("ns", "local", "img").Obj(),
	}
	ref := func(fields map[string]any) map[string]any {
		return testkit.TrainJob("ns", "tj", "", 0).Set(fields, "spec", "runtimeRef").Obj().Object
	}
	for _, tc := range []struct {
		name string
		obj  map[string]any
		want []gocheck.Finding
	}{
		{name: "an existing ClusterTrainingRuntime", obj: testkit.TrainJob("ns", "tj", "torch", 0).Obj().Object},
		{name: "kind and apiGroup left to the CRD's defaults", obj: ref(map[string]any{"name": "torch"})},
		{name: "an existing TrainingRuntime of the namespace", obj: ref(map[string]any{"name": "local", "kind": api.KindTrainingRuntime})},
		{name: "a missing ClusterTrainingRuntime", obj: ref(map[string]any{"name": "jax"}),
			want: []gocheck.Finding{{Field: "spec.runtimeRef", Reason: "FieldValueNotFound",
				Message: `ClusterTrainingRuntime "jax" not found: create the runtime first or fix spec.runtimeRef`}}},
		{name: "a TrainingRuntime is looked up in the TrainJob's namespace only", obj: ref(map[string]any{"name": "torch", "kind": api.KindTrainingRuntime}),
			want: []gocheck.Finding{{Field: "spec.runtimeRef", Reason: "FieldValueNotFound",
				Message: `TrainingRuntime "torch" not found in namespace "ns": create the runtime first or fix spec.runtimeRef`}}},
		{name: "a kind that is no runtime", obj: ref(map[string]any{"name": "torch", "kind": "Runtime"}),
			want: []gocheck.Finding{{Field: "spec.runtimeRef", Reason: "FieldValueNotFound",
				Message: `runtimeRef.kind must be TrainingRuntime or ClusterTrainingRuntime, got "Runtime": create the runtime first or fix spec.runtimeRef`}}},
		{name: "another group", obj: ref(map[string]any{"name": "torch", "apiGroup": "example.com"}),
			want: []gocheck.Finding{{Field: "spec.runtimeRef.apiGroup", Reason: "FieldValueNotSupported",
				Message: `runtimeRef.apiGroup must be trainer.kubeflow.org, got "example.com"`}}},
		{name: "a lookup that fails is not a missing runtime", obj: testkit.TrainJob("ns", "tj", "broken", 0).Obj().Object,
			want: []gocheck.Finding{{Field: "spec.runtimeRef",
				Message: `rule V-TJ-3 could not look up the runtime "broken": the server is currently unable to handle the request`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLookups(true, map[string]error{"broken": errUnavailable}, objs...)
			got := check(t, "V-TJ-3").Validate(context.Background(), l, &gocheck.Request{Operation: "CREATE", Namespace: "ns", Object: tc.obj})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckNumNodes(t *testing.T) {
	objs := []runtime.Object{
		workloadRuntime("gang").Obj(),
		testkit.ClusterTrainingRuntime("plain", "img").Obj(),
		testkit.TrainingRuntime("ns", "local-gang", "img").Annotations(api.AnnotationPodGroupPolicy + "=" + api.PodGroupPolicyWorkload).Obj(),
	}
	immutable := []gocheck.Finding{{Field: "spec.trainer.numNodes",
		Message: "field is immutable: the runtime uses podGroupPolicy.workload and the gang's minCount is derived from numNodes"}}
	tj := func(runtime string, numNodes int64) map[string]any {
		return testkit.TrainJob("ns", "tj", runtime, numNodes).Obj().Object
	}
	local := func(numNodes int64) map[string]any {
		return testkit.TrainJob("ns", "tj", "local-gang", numNodes).Set(api.KindTrainingRuntime, "spec", "runtimeRef", "kind").Obj().Object
	}
	for _, tc := range []struct {
		name     string
		obj, old map[string]any
		want     []gocheck.Finding
	}{
		{name: "no old object", obj: tj("gang", 2)},
		// The runtime is not even looked up ("broken" would fail).
		{name: "numNodes unchanged", obj: tj("broken", 2), old: tj("broken", 2)},
		{name: "numNodes changed, workload runtime", obj: tj("gang", 3), old: tj("gang", 2), want: immutable},
		{name: "numNodes set where the runtime decided it", obj: tj("gang", 2), old: tj("gang", 0), want: immutable},
		{name: "numNodes dropped", obj: tj("gang", 0), old: tj("gang", 2), want: immutable},
		{name: "numNodes changed, runtime without the workload policy", obj: tj("plain", 3), old: tj("plain", 2)},
		{name: "numNodes changed, namespaced runtime with the carrier", obj: local(3), old: local(2), want: immutable},
		// The gang was made for the stored job's runtime: a change of
		// runtimeRef in the same update does not escape the rule.
		{name: "the stored object's runtime decides", obj: tj("plain", 3), old: tj("gang", 2), want: immutable},
		{name: "numNodes changed, runtime gone: no gang to protect", obj: tj("gone", 3), old: tj("gone", 2)},
		{name: "numNodes changed, lookup fails", obj: tj("broken", 3), old: tj("broken", 2),
			want: []gocheck.Finding{{Field: "spec.trainer.numNodes",
				Message: "rule V-TJ-4 could not look up the runtime: the server is currently unable to handle the request"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLookups(true, map[string]error{"broken": errUnavailable}, objs...)
			got := check(t, "V-TJ-4").Validate(context.Background(), l, &gocheck.Request{Operation: "UPDATE", Namespace: "ns", Object: tc.obj, OldObject: tc.old})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckWorkloadAPI(t *testing.T) {
	noAPI := "this cluster does not serve the Workload API (scheduling.k8s.io Workload and PodGroup, GenericWorkload feature gate): use coscheduling or volcano, or enable the API"
	for _, tc := range []struct {
		name   string
		rt     *testkit.Builder
		served bool
		want   []gocheck.Finding
	}{
		{name: "no workload policy", rt: testkit.ClusterTrainingRuntime("rt", "img")},
		{name: "seed field, API served", rt: workloadRuntime("rt"), served: true},
		{name: "seed field, API not served", rt: workloadRuntime("rt"),
			want: []gocheck.Finding{{Field: "spec.podGroupPolicy.workload", Message: noAPI}}},
		{name: "carrier, API not served", rt: testkit.TrainingRuntime("ns", "rt", "img").Annotations(api.AnnotationPodGroupPolicy + "=workload"),
			want: []gocheck.Finding{{Field: "metadata.annotations['shepherd.dev/pod-group-policy']", Message: noAPI}}},
		{name: "carrier of another policy, API not served", rt: testkit.TrainingRuntime("ns", "rt", "img").Annotations(api.AnnotationPodGroupPolicy + "=volcano")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLookups(tc.served, nil)
			got := check(t, "V-TR-7").Validate(context.Background(), l, &gocheck.Request{Operation: "CREATE", Namespace: "ns", Object: tc.rt.Obj().Object})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

// ownedJobSet is a JobSet whose replicatedJobs are jobs, owned by TrainJob
// tj through ownerReference ref (merged over a controller reference of
// uid "owner-uid").
func ownedJobSet(ref map[string]any, jobs ...any) map[string]any {
	owner := map[string]any{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "tj", "uid": "owner-uid", "controller": true}
	for k, v := range ref {
		if v == nil {
			delete(owner, k)
			continue
		}
		owner[k] = v
	}
	return testkit.JobSet("ns", "tj", "img").Set([]any{owner}, "metadata", "ownerReferences").Set(jobs, "spec", "replicatedJobs").Obj().Object
}

// job is a replicatedJob with a Job template carrying labels.
func job(name string, labels map[string]any) map[string]any {
	return map[string]any{"name": name, "template": map[string]any{
		"metadata": map[string]any{"labels": labels},
		"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{}}}}}}
}

// podGroupNames are the podGroupName of every replicatedJob of js, "" where
// there is none.
func podGroupNames(js map[string]any) []string {
	var out []string
	for _, rj := range gocheck.Items(gocheck.Obj(js, "spec"), "replicatedJobs") {
		out = append(out, gocheck.Str(gocheck.Path(rj, "template", "spec", "template", "spec", "schedulingGroup"), "podGroupName"))
	}
	return out
}

func TestDefaultSchedulingGroup(t *testing.T) {
	withUID := func(b *testkit.Builder, uid string) *testkit.Builder { return b.Set(uid, "metadata", "uid") }
	objs := []runtime.Object{
		withUID(testkit.TrainJob("ns", "tj", "gang", 2), "tj-uid").Obj(),
		withUID(testkit.TrainJob("ns", "plain-tj", "plain", 2), "plain-uid").Obj(),
		testkit.TrainJob("ns", "orphan-tj", "gone", 2).Obj(),
		testkit.TrainJob("ns", "broken-rt-tj", "broken", 2).Obj(),
		workloadRuntime("gang").Obj(),
		testkit.ClusterTrainingRuntime("plain", "img").Obj(),
	}
	trainerName := api.PodGroupName("tj", "owner-uid", "trainer")
	initName := api.PodGroupName("tj", "owner-uid", "initializer")
	node := job("node", nil)
	init := job("dataset", map[string]any{api.LabelTrainJobAncestorStep: api.AncestorDatasetInitializer})
	type out struct {
		Changed  bool
		Warnings []string
		Deny     *gocheck.Finding
		Names    []string
	}
	for _, tc := range []struct {
		name   string
		js     map[string]any
		served bool
		want   out
	}{
		{name: "no owner", served: true, js: testkit.JobSet("ns", "js", "img").Obj().Object, want: out{Names: []string{""}}},
		{name: "owned by a TrainJob without being its controller", served: true, js: ownedJobSet(map[string]any{"controller": false}, node),
			want: out{Names: []string{""}}},
		{name: "owned by another group's TrainJob", served: true, js: ownedJobSet(map[string]any{"apiVersion": "example.com/v1"}, node),
			want: out{Names: []string{""}}},
		{name: "the gang's pods join their PodGroups", served: true, js: ownedJobSet(nil, init, node),
			want: out{Changed: true, Names: []string{initName, trainerName}}},
		{name: "without the owner's uid, the TrainJob's", served: true, js: ownedJobSet(map[string]any{"uid": nil}, node),
			want: out{Changed: true, Names: []string{api.PodGroupName("tj", "tj-uid", "trainer")}}},
		{name: "Workload API not served", js: ownedJobSet(nil, node),
			want: out{Warnings: []string{`spec.replicatedJobs: the runtime of TrainJob "tj" asks for the Workload API, which this cluster does not serve: no scheduling group injected`},
				Names: []string{""}}},
		{name: "runtime without the workload policy", served: true, js: ownedJobSet(map[string]any{"name": "plain-tj"}, node), want: out{Names: []string{""}}},
		{name: "TrainJob not found", served: true, js: ownedJobSet(map[string]any{"name": "nope"}, node),
			want: out{Warnings: []string{`spec.replicatedJobs: the owning TrainJob "nope" was not found: no scheduling group injected`}, Names: []string{""}}},
		{name: "runtime not found", served: true, js: ownedJobSet(map[string]any{"name": "orphan-tj"}, node),
			want: out{Warnings: []string{`spec.replicatedJobs: the runtime of TrainJob "orphan-tj" was not found: no scheduling group injected`}, Names: []string{""}}},
		{name: "TrainJob lookup fails: denied so the creator retries", served: true, js: ownedJobSet(map[string]any{"name": "broken-tj"}, node),
			want: out{Deny: &gocheck.Finding{Field: "metadata.ownerReferences",
				Message: `could not look up the owning TrainJob "broken-tj": the server is currently unable to handle the request`}, Names: []string{""}}},
		{name: "runtime lookup fails: denied", served: true, js: ownedJobSet(map[string]any{"name": "broken-rt-tj"}, node),
			want: out{Deny: &gocheck.Finding{Field: "metadata.ownerReferences",
				Message: `could not look up the runtime of TrainJob "broken-rt-tj": the server is currently unable to handle the request`}, Names: []string{""}}},
		// A job without a template, or whose pod template is not an object,
		// is left for validation; the others still join.
		{name: "malformed jobs are skipped", served: true,
			js:   ownedJobSet(nil, map[string]any{"name": "bare"}, map[string]any{"name": "odd", "template": map[string]any{"spec": map[string]any{"template": "x"}}}, node),
			want: out{Changed: true, Names: []string{"", "", trainerName}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLookups(tc.served, map[string]error{"broken-tj": errUnavailable, "broken": errUnavailable}, objs...)
			req := &gocheck.Request{Operation: "CREATE", Namespace: "ns", Kind: schema.GroupKind{Group: api.JobSetGroup, Kind: api.KindJobSet}, Object: tc.js}
			changed, warnings, deny := check(t, "D-WL-1").Default(context.Background(), l, req)
			got := out{Changed: changed, Warnings: warnings, Deny: deny, Names: podGroupNames(req.Object)}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A JobSet whose pods already name their PodGroup is reported unchanged:
// a second admission of the defaulted object changes nothing.
func TestDefaultSchedulingGroupIsIdempotent(t *testing.T) {
	l := newLookups(true, nil, testkit.TrainJob("ns", "tj", "gang", 2).Obj(), workloadRuntime("gang").Obj())
	req := &gocheck.Request{Operation: "CREATE", Namespace: "ns", Object: ownedJobSet(nil, job("node", nil))}
	d := check(t, "D-WL-1").Default
	if changed, _, deny := d(context.Background(), l, req); !changed || deny != nil {
		t.Fatalf("first admission: changed %v, deny %v; want changed", changed, deny)
	}
	first := runtime.DeepCopyJSON(req.Object)
	if changed, warnings, deny := d(context.Background(), l, req); changed || warnings != nil || deny != nil {
		t.Errorf("second admission: changed %v, warnings %v, deny %v; want nothing", changed, warnings, deny)
	}
	if diff := cmp.Diff(first, req.Object); diff != "" {
		t.Errorf("the second admission changed the object (-first +second):\n%s", diff)
	}
}

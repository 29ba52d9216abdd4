package runtimes

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/api/install"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// trainJob is ns/name on the runtime ref names.
func trainJob(ns, name string, ref trainerv1alpha1.RuntimeRef) *trainerv1alpha1.TrainJob {
	tj := testkit.Into[trainerv1alpha1.TrainJob](testkit.TrainJob(ns, name, ref.Name, 0))
	tj.Spec.RuntimeRef = ref
	return tj
}

func ref(kind, name string) trainerv1alpha1.RuntimeRef {
	r := trainerv1alpha1.RuntimeRef{Name: name}
	if kind != "" {
		r.Kind = &kind
	}
	return r
}

// newClient is a fake cache holding objs, with the TrainJob-by-runtime
// index as Index registers it and a REST mapper that knows the runtimes
// (served as unstructured, in no scheme).
func newClient(funcs interceptor.Funcs, objs ...client.Object) client.Client {
	mapper := meta.NewDefaultRESTMapper(nil)
	for _, k := range []string{api.KindTrainingRuntime, api.KindClusterTrainingRuntime} {
		scope := meta.RESTScopeNamespace
		if k == api.KindClusterTrainingRuntime {
			scope = meta.RESTScopeRoot
		}
		mapper.Add(trainerv1alpha1.GroupVersion.WithKind(k), scope)
	}
	mapper.Add(trainerv1alpha1.GroupVersion.WithKind(api.KindTrainJob), meta.RESTScopeNamespace)
	return fake.NewClientBuilder().WithScheme(install.NewScheme()).WithRESTMapper(mapper).WithObjects(objs...).
		WithIndex(&trainerv1alpha1.TrainJob{}, index, func(o client.Object) []string {
			tj := o.(*trainerv1alpha1.TrainJob)
			if k, ok := tj.Spec.RuntimeRef.IndexKey(tj.Namespace); ok {
				return []string{k}
			}
			return nil
		}).WithInterceptorFuncs(funcs).Build()
}

func TestJobsOf(t *testing.T) {
	c := newClient(interceptor.Funcs{},
		trainJob("a", "cluster-default", ref("", "torch")),
		trainJob("b", "cluster", ref(api.KindClusterTrainingRuntime, "torch")),
		trainJob("a", "local", ref(api.KindTrainingRuntime, "torch")),
		trainJob("b", "local-elsewhere", ref(api.KindTrainingRuntime, "torch")),
		trainJob("a", "other", ref(api.KindClusterTrainingRuntime, "jax")),
		trainJob("a", "foreign", trainerv1alpha1.RuntimeRef{Name: "torch", APIGroup: ptr.To("example.com")}),
	)
	req := func(ns, name string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
	}
	for _, tc := range []struct {
		name string
		obj  client.Object
		want []reconcile.Request
	}{
		{"a ClusterTrainingRuntime: its jobs in every namespace", testkit.ClusterTrainingRuntime("torch", "img").Obj(),
			[]reconcile.Request{req("a", "cluster-default"), req("b", "cluster")}},
		{"a TrainingRuntime: the jobs of its namespace", testkit.TrainingRuntime("a", "torch", "img").Obj(), []reconcile.Request{req("a", "local")}},
		{"a runtime nothing references", testkit.ClusterTrainingRuntime("mpi", "img").Obj(), []reconcile.Request{}},
		{"not a runtime", trainJob("a", "x", ref("", "torch")), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, JobsOf(c)(context.Background(), tc.obj)); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
	failing := newClient(interceptor.Funcs{List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
		return errors.New("cache not synced")
	}})
	if got := JobsOf(failing)(context.Background(), testkit.ClusterTrainingRuntime("torch", "img").Obj()); got != nil {
		t.Errorf("a failed list mapped to %v, want nothing (the next resync retries)", got)
	}
}

func TestGet(t *testing.T) {
	cluster := testkit.ClusterTrainingRuntime("torch", "img").Obj()
	local := testkit.TrainingRuntime("a", "local", "img").Obj()
	c := newClient(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if key.Name == "broken" {
			return errors.New("etcd is down")
		}
		return c.Get(ctx, key, obj, opts...)
	}}, cluster, local)
	for _, tc := range []struct {
		name     string
		tj       *trainerv1alpha1.TrainJob
		wantName string // "" for none
		wantKind string
		wantErr  string
	}{
		{name: "a ClusterTrainingRuntime", tj: trainJob("b", "j", ref("", "torch")), wantName: "torch", wantKind: api.KindClusterTrainingRuntime},
		{name: "a TrainingRuntime of the job's namespace", tj: trainJob("a", "j", ref(api.KindTrainingRuntime, "local")), wantName: "local", wantKind: api.KindTrainingRuntime},
		{name: "a TrainingRuntime of another namespace is not found", tj: trainJob("b", "j", ref(api.KindTrainingRuntime, "local"))},
		{name: "a runtime not created yet", tj: trainJob("a", "j", ref("", "jax"))},
		{name: "another group", tj: trainJob("a", "j", trainerv1alpha1.RuntimeRef{Name: "torch", APIGroup: ptr.To("example.com")})},
		{name: "a kind that is no runtime", tj: trainJob("a", "j", ref("Runtime", "torch"))},
		{name: "a read that fails", tj: trainJob("a", "j", ref("", "broken")), wantErr: `reading ClusterTrainingRuntime "broken": etcd is down`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := Get(context.Background(), c, tc.tj)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Errorf("Get = %v, %v; want error %q", rt, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantName == "" {
				if rt != nil {
					t.Errorf("Get = %s, want none", rt.GetName())
				}
				return
			}
			if kind, ok := trainer.RuntimeKind(rt); rt == nil || rt.GetName() != tc.wantName || !ok || kind != tc.wantKind {
				t.Errorf("Get = %v, want %s %s", rt, tc.wantKind, tc.wantName)
			}
			if jobs := trainer.RuntimeJobs(rt); len(jobs) != 1 || jobs[0].Name != "node" {
				t.Errorf("the runtime's jobs = %+v, want its template read as served", jobs)
			}
		})
	}
}

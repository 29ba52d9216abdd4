package offline

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/shepherd-k8s/shepherd/api/install"
	"github.com/shepherd-k8s/shepherd/integrations/pinned"
)

// TestServedSchemas: of the cluster's CRDs, only the established ones of
// the frameworks make the schemas, each kind with its served storage
// version; a cluster that will not list CRDs is an error naming it and
// the permission needed.
func TestServedSchemas(t *testing.T) {
	t.Parallel()
	crds, err := pinned.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	established := func(crd *apiextensionsv1.CustomResourceDefinition, status apiextensionsv1.ConditionStatus) client.Object {
		crd = crd.DeepCopy()
		crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: status}}
		return crd
	}
	var objs []client.Object
	for _, crd := range crds {
		status := apiextensionsv1.ConditionTrue
		if crd.Spec.Group == "jobset.x-k8s.io" {
			status = apiextensionsv1.ConditionFalse // installed, not yet served
		}
		if crd.Spec.Names.Kind == "TrainingRuntime" {
			// A version served but not stored, after the stored one.
			crd = crd.DeepCopy()
			v := *crd.Spec.Versions[0].DeepCopy()
			v.Name, v.Storage = "v1beta1", false
			crd.Spec.Versions = append(crd.Spec.Versions, v)
		}
		objs = append(objs, established(crd, status))
	}
	// Another project's CRD, established: not a framework's.
	widget := crds[0].DeepCopy()
	widget.Name, widget.Spec.Group, widget.Spec.Names.Kind, widget.Spec.Names.Plural = "widgets.example.com", "example.com", "Widget", "widgets"
	objs = append(objs, established(widget, apiextensionsv1.ConditionTrue))

	c := fake.NewClientBuilder().WithScheme(install.NewScheme()).WithObjects(objs...).Build()
	s, storage, err := ServedSchemas(context.Background(), c, "https://h")
	if err != nil {
		t.Fatal(err)
	}
	gk := func(group, kind string) schema.GroupKind { return schema.GroupKind{Group: group, Kind: kind} }
	want := map[schema.GroupKind]string{
		gk("trainer.kubeflow.org", "TrainJob"):               "v1alpha1",
		gk("trainer.kubeflow.org", "TrainingRuntime"):        "v1alpha1",
		gk("trainer.kubeflow.org", "ClusterTrainingRuntime"): "v1alpha1",
		gk("grove.io", "PodCliqueSet"):                       "v1alpha1",
		gk("grove.io", "PodClique"):                          "v1alpha1",
		gk("grove.io", "PodCliqueScalingGroup"):              "v1alpha1",
	}
	if diff := cmp.Diff(want, storage); diff != "" {
		t.Errorf("storage versions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("the CRDs https://h serves", s.Source); diff != "" {
		t.Errorf("source (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		gk   schema.GroupKind
		want []string
	}{
		{gk("trainer.kubeflow.org", "TrainJob"), []string{"v1alpha1"}},
		{gk("jobset.x-k8s.io", "JobSet"), nil},
		{gk("example.com", "Widget"), nil},
	} {
		if diff := cmp.Diff(tc.want, s.Versions(tc.gk)); diff != "" {
			t.Errorf("schemas of %s (-want +got):\n%s", tc.gk, diff)
		}
	}

	forbidden := fake.NewClientBuilder().WithScheme(install.NewScheme()).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return apierrors.NewForbidden(schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}, "", fmt.Errorf("no"))
		},
	}).Build()
	_, _, err = ServedSchemas(context.Background(), forbidden, "https://h")
	if !apierrors.IsForbidden(err) || !strings.HasPrefix(err.Error(), "reading the CRDs of https://h (the rules are type-checked against them; needs list on customresourcedefinitions): ") {
		t.Errorf("error %v, want the Forbidden naming the cluster and the permission", err)
	}
}

// TestListAll: every object of a kind is listed a page of 500 at a time,
// following the continue token to the end, in the namespace given; the
// cluster-scoped ClusterTrainingRuntimes are listed in every namespace,
// as lookups need them.
func TestListAll(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind, namespace, wantNamespace string
	}{
		{"TrainJob", "ml", "ml"},
		{"TrainJob", "", ""},
		{"ClusterTrainingRuntime", "ml", ""},
	} {
		t.Run(tc.kind+" in "+tc.namespace, func(t *testing.T) {
			t.Parallel()
			var calls []string
			pages := map[string][]string{"": {"a", "b"}, "p2": {"c"}, "p3": {"d"}}
			next := map[string]string{"": "p2", "p2": "p3", "p3": ""}
			c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
				List: func(_ context.Context, _ client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					o := (&client.ListOptions{}).ApplyOptions(opts)
					l := list.(*unstructured.UnstructuredList)
					calls = append(calls, fmt.Sprintf("%s ns=%q limit=%d continue=%q", l.GetKind(), o.Namespace, o.Limit, o.Continue))
					for _, name := range pages[o.Continue] {
						u := object("trainer.kubeflow.org/v1alpha1", tc.kind, "", name)
						l.Items = append(l.Items, *u)
					}
					l.SetContinue(next[o.Continue])
					return nil
				},
			}).Build()
			items, err := listAll(context.Background(), c, schema.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: tc.kind}, tc.namespace)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, u := range items {
				names = append(names, u.GetName())
			}
			if diff := cmp.Diff([]string{"a", "b", "c", "d"}, names); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			var want []string
			for _, cont := range []string{"", "p2", "p3"} {
				want = append(want, fmt.Sprintf("%sList ns=%q limit=500 continue=%q", tc.kind, tc.wantNamespace, cont))
			}
			if diff := cmp.Diff(want, calls); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// workloadForm is how a runtime asks for podGroupPolicy.workload.
type workloadForm int

const (
	noWorkload   workloadForm = iota
	seedField                 // spec.podGroupPolicy.workload: {}
	carrier                   // shepherd.dev/pod-group-policy: workload
	otherCarrier              // the carrier holding something else
)

func (f workloadForm) String() string {
	return [...]string{"no workload policy", "seed field", "carrier", "carrier with another value"}[f]
}

// runtimes returns a TrainingRuntime (namespace ns) and a
// ClusterTrainingRuntime, both named rt, asking for the workload policy in
// form f.
func workloadRuntimes(f workloadForm) []runtime.Object {
	var out []runtime.Object
	for _, kind := range []string{api.KindTrainingRuntime, api.KindClusterTrainingRuntime} {
		rt := trainer.NewRuntime(kind)
		rt.SetName("rt")
		if kind == api.KindTrainingRuntime {
			rt.SetNamespace("ns")
		}
		rt.Object["spec"] = map[string]any{"template": map[string]any{"spec": map[string]any{
			"replicatedJobs": []any{map[string]any{"name": "node", "template": map[string]any{}}},
		}}}
		switch f {
		case seedField:
			rt.Object["spec"].(map[string]any)["podGroupPolicy"] = map[string]any{"workload": map[string]any{}}
		case carrier:
			rt.SetAnnotations(map[string]string{api.AnnotationPodGroupPolicy: api.PodGroupPolicyWorkload})
		case otherCarrier:
			rt.SetAnnotations(map[string]string{api.AnnotationPodGroupPolicy: "coscheduling"})
		}
		out = append(out, rt)
	}
	return out
}

func chainWith(t *testing.T, objs ...runtime.Object) *Chain {
	t.Helper()
	c, err := NewChain(ChainOptions{Lookups: NewObjectLookups(objs, true)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// trainJobOn is ns/tj on the runtime "rt" of kind, of numNodes nodes.
func trainJobOn(kind string, numNodes int32) *trainerv1alpha1.TrainJob {
	return testkit.Into[trainerv1alpha1.TrainJob](testkit.TrainJob("ns", "tj", "rt", int64(numNodes)).UID("tj-uid").Set(kind, "spec", "runtimeRef", "kind"))
}

func mustJSON(t *testing.T, o any) []byte {
	t.Helper()
	raw, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// V-TJ-4 and D-WL-1 read the runtime's workload policy in either form.
func TestWorkloadPolicyFormsInLookups(t *testing.T) {
	for _, f := range []workloadForm{noWorkload, seedField, carrier, otherCarrier} {
		uses := f == seedField || f == carrier
		for _, kind := range []string{api.KindTrainingRuntime, api.KindClusterTrainingRuntime} {
			t.Run(f.String()+"/"+kind, func(t *testing.T) {
				ctx := context.Background()
				old := trainJobOn(kind, 2)
				c := chainWith(t, append(workloadRuntimes(f), old)...)

				// V-TJ-4: numNodes is immutable when the runtime uses the
				// workload policy.
				v := c.Validate(ctx, &Request{Operation: admissionv1.Update, Kind: trainJobKind, Namespace: "ns", Name: "tj",
					Object: mustJSON(t, trainJobOn(kind, 3)), OldObject: mustJSON(t, old)})
				got := ruleViolations(v, "V-TJ-4")
				if uses != (len(got) == 1) {
					t.Errorf("V-TJ-4 violations = %+v, want %d", got, map[bool]int{true: 1}[uses])
				}
				if uses && len(got) == 1 && got[0].Field != "spec.trainer.numNodes" {
					t.Errorf("V-TJ-4 field = %q, want spec.trainer.numNodes", got[0].Field)
				}

				// D-WL-1: the JobSet of the TrainJob joins its PodGroups.
				js := &jobsetv1alpha2.JobSet{
					TypeMeta: metav1.TypeMeta{APIVersion: jobsetv1alpha2.GroupVersion.String(), Kind: api.KindJobSet},
					ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tj", OwnerReferences: []metav1.OwnerReference{{
						APIVersion: trainerv1alpha1.GroupVersion.String(), Kind: api.KindTrainJob, Name: "tj", UID: "tj-uid", Controller: ptr.To(true),
					}}},
					Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{Name: "node"}}},
				}
				d := c.Default(ctx, &Request{Operation: admissionv1.Create, Namespace: "ns", Name: "tj", Object: mustJSON(t, js),
					Kind: metav1.GroupVersionKind{Group: api.JobSetGroup, Version: "v1alpha2", Kind: api.KindJobSet}})
				if !d.Allowed {
					t.Fatalf("D-WL-1 denied the JobSet: %+v", d.Violations)
				}
				rjs, _, _ := unstructured.NestedSlice(d.Object, "spec", "replicatedJobs")
				name, _, _ := unstructured.NestedString(rjs[0].(map[string]any), "template", "spec", "template", "spec", "schedulingGroup", "podGroupName")
				want := ""
				if uses {
					want = api.PodGroupName("tj", "tj-uid", api.PodGroupTemplateTrainer)
				}
				if name != want {
					t.Errorf("injected podGroupName = %q, want %q", name, want)
				}
			})
		}
	}
}

// D-WL-1 injects nothing where the Workload API is not served: no PodGroup
// will exist to join. It says so in a warning.
func TestSchedulingGroupNeedsTheWorkloadAPI(t *testing.T) {
	for _, served := range []bool{true, false} {
		t.Run(fmt.Sprintf("served=%t", served), func(t *testing.T) {
			objs := append(workloadRuntimes(carrier), trainJobOn(api.KindClusterTrainingRuntime, 2))
			c, err := NewChain(ChainOptions{Lookups: NewObjectLookups(objs, served)})
			if err != nil {
				t.Fatal(err)
			}
			js := &jobsetv1alpha2.JobSet{
				TypeMeta: metav1.TypeMeta{APIVersion: jobsetv1alpha2.GroupVersion.String(), Kind: api.KindJobSet},
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "tj", OwnerReferences: []metav1.OwnerReference{{
					APIVersion: trainerv1alpha1.GroupVersion.String(), Kind: api.KindTrainJob, Name: "tj", UID: "tj-uid", Controller: ptr.To(true),
				}}},
				Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{Name: "node"}}},
			}
			d := c.Default(context.Background(), &Request{Operation: admissionv1.Create, Namespace: "ns", Name: "tj", Object: mustJSON(t, js),
				Kind: metav1.GroupVersionKind{Group: api.JobSetGroup, Version: "v1alpha2", Kind: api.KindJobSet}})
			if !d.Allowed {
				t.Fatalf("D-WL-1 denied the JobSet: %+v", d.Violations)
			}
			rjs, _, _ := unstructured.NestedSlice(d.Object, "spec", "replicatedJobs")
			name, _, _ := unstructured.NestedString(rjs[0].(map[string]any), "template", "spec", "template", "spec", "schedulingGroup", "podGroupName")
			warned := slices.ContainsFunc(d.Warnings, func(w string) bool { return strings.Contains(w, "does not serve") })
			if served && (name == "" || warned) {
				t.Errorf("API served: podGroupName %q, warnings %q; want a name and no warning", name, d.Warnings)
			}
			if !served && (name != "" || !warned) {
				t.Errorf("API not served: podGroupName %q, warnings %q; want none injected and a warning", name, d.Warnings)
			}
		})
	}
}

// V-TR-7 names the form the runtime uses.
func TestCheckWorkloadAPIForms(t *testing.T) {
	cases := []struct {
		name   string
		form   workloadForm
		served bool
		want   []string
	}{
		{name: "seed field, API not served", form: seedField, want: []string{"spec.podGroupPolicy.workload"}},
		{name: "carrier, API not served", form: carrier, want: []string{"metadata.annotations['shepherd.dev/pod-group-policy']"}},
		{name: "seed field, API served", form: seedField, served: true},
		{name: "carrier, API served", form: carrier, served: true},
		{name: "no workload policy", form: noWorkload},
		{name: "carrier with another value", form: otherCarrier},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewChain(ChainOptions{Lookups: NewObjectLookups(nil, tc.served)})
			if err != nil {
				t.Fatal(err)
			}
			o, err := runtime.DefaultUnstructuredConverter.ToUnstructured(workloadRuntimes(tc.form)[1])
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			u := &unstructured.Unstructured{Object: o}
			req := &Request{Operation: admissionv1.Create, Namespace: u.GetNamespace(),
				Kind: metav1.GroupVersionKind{Group: api.TrainerGroup, Version: "v1alpha1", Kind: api.KindClusterTrainingRuntime}}
			for _, v := range c.runGoChecks(context.Background(), req, o, nil) {
				if v.Rule != "V-TR-7" || v.Action != ActionDeny {
					t.Errorf("violation %+v, want a V-TR-7 Deny", v)
				}
				got = append(got, v.Field)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("V-TR-7 fields (-want +got):\n%s", diff)
			}
		})
	}
}

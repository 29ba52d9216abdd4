package celrules

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/mapdefault"
)

// decodeObject decodes as apimachinery does (integers as int64).
func decodeObject(t *testing.T, doc string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := utiljson.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Engine.Default applies the exported MutatingAdmissionPolicies in-process:
// each case is the object before and after, the rules that changed it and
// their warnings.
func TestEngineDefaultAppliesTheExportedPolicies(t *testing.T) {
	e, err := NewEngine(Config{Schemas: seedSchemas(t), InferenceTerminationDelay: fourHours})
	if err != nil {
		t.Fatal(err)
	}
	all := func(string) bool { return true }
	for _, tc := range []struct {
		name, kind, op string
		object, old    string
		enabled        func(string) bool
		want           string // "" when the object is left as it is
		wantChanged    []string
		wantWarnings   []RuleWarning
	}{
		{
			name: "a Training PodCliqueSet gets every Training default", kind: "PodCliqueSet", enabled: all,
			object: `{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"p","namespace":"ml"},
				"spec":{"replicas":1,"workloadType":"Training","template":{"cliques":[{"name":"a","spec":{"replicas":2,"podSpec":{"containers":[]}}}],
				"podCliqueScalingGroups":[{"name":"g","cliqueNames":["a"],"replicas":3}]}}}`,
			want: `{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"p","namespace":"ml"},
				"spec":{"replicas":1,"workloadType":"Training","trainingSpec":{"maxRestarts":0},"template":{"terminationDelay":"0s",
				"cliques":[{"name":"a","spec":{"replicas":2,"minAvailable":2,"podSpec":{"containers":[],"restartPolicy":"Never"}}}],
				"podCliqueScalingGroups":[{"name":"g","cliqueNames":["a"],"replicas":3,"minAvailable":3}]}}}`,
			wantChanged: []string{"D-PCS-2", "D-PCS-3", "D-PCS-4", "D-PCS-6"},
		},
		{
			name: "an unset workload type is Inference, with the configured termination delay", kind: "PodCliqueSet", enabled: all,
			object: `{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"p"},"spec":{"template":{"cliques":[]}}}`,
			want: `{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"p"},
				"spec":{"workloadType":"Inference","template":{"cliques":[],"terminationDelay":"4h0m0s"}}}`,
			wantChanged: []string{"D-PCS-1", "D-PCS-5"},
		},
		{
			name: "a rule switched off for the object is not applied", kind: "PodCliqueSet",
			enabled: func(id string) bool { return id != "D-PCS-6" },
			object: `{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"p"},
				"spec":{"workloadType":"Inference","template":{"terminationDelay":"1m","cliques":[{"name":"a","spec":{"replicas":2}}]}}}`,
		},
		{
			name: "a defaulted object is left as it is", kind: "PodCliqueSet", enabled: all,
			object: `{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"p"},
				"spec":{"workloadType":"Inference","template":{"terminationDelay":"1m","cliques":[{"name":"a","spec":{"replicas":2,"minAvailable":1}}]}}}`,
		},
		{
			name: "InOrder is rewritten into dependsOn, with the rule's warning", kind: "JobSet", enabled: all,
			object: `{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"j"},
				"spec":{"startupPolicy":{"startupPolicyOrder":"InOrder"},"replicatedJobs":[{"name":"a"},{"name":"b"}]}}`,
			want: `{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"j"},
				"spec":{"replicatedJobs":[{"name":"a"},{"name":"b","dependsOn":[{"name":"a","status":"Ready"}]}]}}`,
			wantChanged:  []string{"D-JS-2"},
			wantWarnings: []RuleWarning{{Rule: "D-JS-2", Message: defaultRuleByID(t, "D-JS-2").Warning}},
		},
		{
			name: "an UPDATE of an object stored with InOrder is not rewritten", kind: "JobSet", op: "UPDATE", enabled: all,
			object: `{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"j","labels":{"x":"y"}},
				"spec":{"startupPolicy":{"startupPolicyOrder":"InOrder"},"replicatedJobs":[{"name":"a"},{"name":"b"}]}}`,
			old: `{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"j"},
				"spec":{"startupPolicy":{"startupPolicyOrder":"InOrder"},"replicatedJobs":[{"name":"a"},{"name":"b"}]}}`,
		},
		{
			name: "a kind without defaults is left as it is", kind: "TrainJob", enabled: all,
			object: `{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"t"},"spec":{}}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := decodeObject(t, tc.object)
			given := runtime.DeepCopyJSON(obj)
			gv := groupVersionOf(t, tc.object)
			in := &Input{Operation: "CREATE", Group: gv.Group, Version: gv.Version, Kind: tc.kind, Resource: "r", Name: "n", Object: obj}
			if tc.op != "" {
				in.Operation = tc.op
				in.OldObject = decodeObject(t, tc.old)
			}
			got, err := e.Default(context.Background(), in, tc.enabled)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(given, obj); diff != "" {
				t.Errorf("the given object was modified (-before +after):\n%s", diff)
			}
			want := given
			if tc.want != "" {
				want = decodeObject(t, tc.want)
			}
			if diff := cmp.Diff(want, got.Object); diff != "" {
				t.Errorf("object (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantChanged, got.Changed); diff != "" {
				t.Errorf("changed by (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWarnings, got.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func defaultRuleByID(t *testing.T, id string) mapdefault.Rule {
	t.Helper()
	for _, r := range integrations.Defaults() {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no defaulting rule %s", id)
	return mapdefault.Rule{}
}

// groupVersionOf is the group and version of a document's apiVersion.
func groupVersionOf(t *testing.T, doc string) schema.GroupVersion {
	t.Helper()
	gv, err := schema.ParseGroupVersion(decodeObject(t, doc)["apiVersion"].(string))
	if err != nil {
		t.Fatal(err)
	}
	return gv
}

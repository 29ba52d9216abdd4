package webhook

import (
	"reflect"
	"testing"
	"time"

	"github.com/shepherd-k8s/shepherd/test/seedcrds"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/corpus"
)

// The patch the PodCliqueSet defaulter records as it goes is exactly the
// diff of the object before and after defaulting: for every PodCliqueSet of
// the corpus, and for the shapes the corpus does not have (null fields,
// entries that are not objects, an object without spec).
func TestPodCliqueSetRecordedPatchIsTheDiff(t *testing.T) {
	type tc struct {
		doc map[string]any
		cfg celrules.Config
	}
	cases := map[string]tc{}
	all, err := corpus.Load(corpus.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range all {
		if c.Object.GetKind() == api.KindPodCliqueSet {
			cases[c.Name] = tc{c.Object.Object, seedcrds.Config(c.Config)}
		}
	}
	if len(cases) < 10 {
		t.Fatalf("found %d PodCliqueSets in the corpus, want at least 10", len(cases))
	}
	delay := metav1.Duration{Duration: 4 * time.Hour}
	for name, doc := range map[string]string{
		"null fields":         `{"spec":{"workloadType":"Training","trainingSpec":null,"template":{"terminationDelay":null,"cliques":[{"spec":{"replicas":2,"minAvailable":null,"podSpec":{"restartPolicy":null}}}]}}}`,
		"null maxRestarts":    `{"spec":{"workloadType":"Training","trainingSpec":{"maxRestarts":null},"template":{}}}`,
		"non-object entries":  `{"spec":{"template":{"cliques":[1,null,{"spec":{"replicas":3}}],"podCliqueScalingGroups":["x",{"replicas":2}]}}}`,
		"no spec":             `{"metadata":{"name":"x"}}`,
		"no template":         `{"spec":{"workloadType":"Training"}}`,
		"inference, defaults": `{"spec":{"template":{"cliques":[{"spec":{"replicas":1}}]}}}`,
	} {
		m := object(t, doc)
		cases[name] = tc{m, seedcrds.Config(celrules.Config{})}
		cases[name+" (server default delay)"] = tc{runtime.DeepCopyJSON(m), seedcrds.Config(celrules.Config{InferenceTerminationDelay: &delay})}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			original := runtime.DeepCopyJSON(c.doc)
			defaulted := runtime.DeepCopyJSON(c.doc)
			var r recorder
			changed := defaultPodCliqueSet(defaulted, c.cfg, c.cfg.Schemas, &r)
			want := jsonPatch(original, defaulted)
			if got := sortedOps(r.ops); !reflect.DeepEqual(got, want) && (len(got) > 0 || len(want) > 0) {
				t.Errorf("recorded patch %v, diff %v", got, want)
			}
			if changed != (len(want) > 0) {
				t.Errorf("changed = %v with a diff of %d operations", changed, len(want))
			}
		})
	}
}

// D-PCS-4 where the schema has the seed field: a restart budget already set
// in the carrier annotation (an object stored before the CRD upgrade added
// the field) is not shadowed by a field default of 0.
func TestMaxRestartsInTheCarrierIsNotShadowedByTheFieldDefault(t *testing.T) {
	cfg := seedcrds.Config(celrules.Config{})
	o := map[string]any{
		"apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueSet",
		"metadata": map[string]any{"name": "p", "annotations": map[string]any{
			"shepherd.dev/workload-type": "Training", "shepherd.dev/max-restarts": "2"}},
		"spec": map[string]any{"replicas": int64(1), "template": map[string]any{"cliques": []any{}}},
	}
	var r recorder
	defaultPodCliqueSet(o, cfg, cfg.Schemas, &r)
	if ts, ok := o["spec"].(map[string]any)["trainingSpec"]; ok {
		t.Errorf("trainingSpec %v added over the annotation's budget of 2; patch %v", ts, r.ops)
	}
}

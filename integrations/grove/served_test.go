package grove

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
)

// stored is a Grove object as a cluster whose CRDs have the seed fields
// stores it: published fields and seed fields side by side.
func stored(kind, name string, obj map[string]any) *unstructured.Unstructured {
	u := NewObject(kind)
	for k, v := range obj {
		u.Object[k] = v
	}
	u.SetNamespace("ns")
	u.SetName(name)
	u.SetLabels(map[string]string{api.LabelPartOf: "pcs"})
	return u
}

// Reading a Grove object as served keeps both views: the published fields
// decoded, the seed fields the published type lacks readable through the
// accessors — which a typed read would have dropped.
func TestReadAsServed(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(runtime.NewScheme()).WithObjects(
		stored(api.KindPodCliqueSet, "pcs", map[string]any{"spec": map[string]any{
			"replicas": int64(2), "workloadType": "Training",
			"trainingSpec": map[string]any{"maxRestarts": int64(3)},
			"template":     map[string]any{"cliques": []any{}, "terminationDelay": "30s"},
		}}),
		stored(api.KindPodClique, "pcs-0-a", map[string]any{
			"spec":   map[string]any{"roleName": "a", "replicas": int64(4), "podSpec": map[string]any{"containers": []any{}}},
			"status": map[string]any{"wasAvailable": true, "readyReplicas": int64(4)},
		}),
		stored(api.KindPodCliqueScalingGroup, "pcs-0-g", map[string]any{
			"spec": map[string]any{"replicas": int64(2), "cliqueNames": []any{"a"}, "terminationDelay": "5s"},
		}),
	).Build()
	ctx := context.Background()

	set, err := GetSet(ctx, c, client.ObjectKey{Namespace: "ns", Name: "pcs"})
	if err != nil {
		t.Fatal(err)
	}
	if set.Spec.Replicas != 2 || set.Spec.Template.TerminationDelay == nil || set.Spec.Template.TerminationDelay.Duration.String() != "30s" {
		t.Errorf("published fields: replicas %d, terminationDelay %v; want 2, 30s", set.Spec.Replicas, set.Spec.Template.TerminationDelay)
	}
	n, _, err := TrainingLimits(set)
	if !IsTrainingSet(set) || err != nil || n == nil || *n != 3 {
		t.Errorf("seed fields: Training %v, maxRestarts %v (%v); want true, 3", IsTrainingSet(set), n, err)
	}

	cliques, err := ListCliques(ctx, c, client.InNamespace("ns"))
	if err != nil || len(cliques) != 1 {
		t.Fatalf("ListCliques: %d, %v; want 1", len(cliques), err)
	}
	if got := cliques[0]; got.Spec.Replicas != 4 || got.Status.ReadyReplicas != 4 || !WasAvailable(&got) {
		t.Errorf("PodClique: replicas %d, ready %d, wasAvailable %v; want 4, 4, true (seed field)", got.Spec.Replicas, got.Status.ReadyReplicas, WasAvailable(&got))
	}

	groups, err := ListGroups(ctx, c, client.InNamespace("ns"))
	if err != nil || len(groups) != 1 {
		t.Fatalf("ListGroups: %d, %v; want 1", len(groups), err)
	}
	d, err := ScalingGroupDelayOf(set, &groups[0], "g")
	if err != nil || d == nil || d.String() != "5s" {
		t.Errorf("the group's seed terminationDelay: %v, %v; want 5s", d, err)
	}
	if diff := cmp.Diff([]string{"a"}, groups[0].Spec.CliqueNames); diff != "" {
		t.Errorf("cliqueNames (-want +got):\n%s", diff)
	}
}

// A served object whose published fields do not decode is an error naming
// the object, not a crash or a half-read object.
func TestReadAsServedBadObject(t *testing.T) {
	u := stored(api.KindPodClique, "bad", map[string]any{"spec": map[string]any{"replicas": "four"}})
	_, err := CliqueFrom(u)
	if err == nil || !strings.Contains(err.Error(), "PodClique ns/bad") {
		t.Errorf("error %v; want one naming PodClique ns/bad", err)
	}
}

// The builders give what a cluster serving Grove's schema would serve.
func TestBuildersAsServed(t *testing.T) {
	pcs := &grovev1alpha1.PodCliqueSet{ObjectMeta: metav1.ObjectMeta{Name: "pcs", Namespace: "ns"}}
	pcs.Spec.Replicas = 3
	s := SetOf(pcs)
	if got := s.Served.GroupVersionKind(); got != grovev1alpha1.GroupVersion.WithKind(api.KindPodCliqueSet) {
		t.Errorf("kind %v", got)
	}
	if r, _, _ := unstructured.NestedInt64(s.Served.Object, "spec", "replicas"); r != 3 {
		t.Errorf("served spec.replicas %d, want 3", r)
	}
	back, err := SetFrom(s.Served)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s.PodCliqueSet, back.PodCliqueSet); diff != "" {
		t.Errorf("read back (-built +read):\n%s", diff)
	}
}

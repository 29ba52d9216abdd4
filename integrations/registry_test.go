package integrations_test

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	. "github.com/shepherd-k8s/shepherd/integrations"
	_ "github.com/shepherd-k8s/shepherd/integrations/all"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
)

// Every registered check is well formed: a unique ID, a group and kinds it
// judges, operations, a reason no policy can express it, and exactly one
// of Validate and Default.
func TestChecksAreWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Checks() {
		if c.ID == "" || seen[c.ID] {
			t.Errorf("check %q: empty or registered twice", c.ID)
		}
		seen[c.ID] = true
		if c.Group == "" || len(c.Kinds) == 0 || len(c.Operations) == 0 || c.Reason == "" || c.Description == "" {
			t.Errorf("check %s: group %q, kinds %v, operations %v, reason %q, description %q: want all set", c.ID, c.Group, c.Kinds, c.Operations, c.Reason, c.Description)
		}
		if (c.Validate == nil) == (c.Default == nil) {
			t.Errorf("check %s: want exactly one of Validate and Default", c.ID)
		}
	}
	for _, id := range []string{"V-TJ-3", "V-TJ-4", "V-TR-7", "V-PCLQ-1", "D-WL-1"} {
		if !seen[id] {
			t.Errorf("check %s is not registered", id)
		}
	}
}

func TestCheckJudgesItsGroupKindsAndOperations(t *testing.T) {
	var v3 = Checks()[0]
	for _, c := range Checks() {
		if c.ID == "V-TJ-3" {
			v3 = c
		}
	}
	for _, tc := range []struct {
		group, kind, op string
		want            bool
	}{
		{api.TrainerGroup, api.KindTrainJob, "CREATE", true},
		{api.TrainerGroup, api.KindTrainJob, "UPDATE", false},
		{api.TrainerGroup, api.KindTrainingRuntime, "CREATE", false},
		{api.GroveGroup, api.KindTrainJob, "CREATE", false},
	} {
		if got := v3.Judges(tc.group, tc.kind, tc.op); got != tc.want {
			t.Errorf("V-TJ-3 judges %s %s.%s = %v, want %v", tc.op, tc.kind, tc.group, got, tc.want)
		}
	}
}

// integrations/all registers every framework with what it owns — rule
// files, defaults, knobs, controllers — and the registry answers for them
// without the caller naming one.
func TestTheRegistryHoldsEveryIntegration(t *testing.T) {
	var names []string
	for _, f := range Frameworks {
		names = append(names, f.Name)
		if f.Rules != nil {
			files, err := fs.Glob(f.Rules, "rules/*.yaml")
			if err != nil || len(files) == 0 {
				t.Errorf("framework %s: rule files %v (%v), want at least one", f.Name, files, err)
			}
		}
	}
	if diff := cmp.Diff([]string{Trainer, JobSet, Grove}, names); diff != "" {
		t.Errorf("frameworks (-want +got):\n%s", diff)
	}
	var defaults []string
	for _, d := range Defaults() {
		defaults = append(defaults, d.ID)
	}
	if diff := cmp.Diff([]string{"D-JS-1", "D-JS-2", "D-PCS-1", "D-PCS-2", "D-PCS-3", "D-PCS-4", "D-PCS-5", "D-PCS-6"}, defaults); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	var knobs []string
	for name, k := range Knobs() {
		if k.Knob.Annotation == "" {
			t.Errorf("knob token %s has no carrier annotation", name)
		}
		knobs = append(knobs, name)
	}
	slices.Sort(knobs)
	if diff := cmp.Diff([]string{"maxRestarts", "maxRuntime", "runtimeTTL", "runtimeWorkload", "scalingGroupDelay", "workloadType"}, knobs); diff != "" {
		t.Errorf("knob tokens (-want +got):\n%s", diff)
	}
	var ctrls []string
	for _, c := range Controllers() {
		ctrls = append(ctrls, c.Name)
	}
	if diff := cmp.Diff([]string{"gang", "training", "trainjob", "workload"}, ctrls); diff != "" {
		t.Errorf("controllers (-want +got):\n%s", diff)
	}
}

// The cache keeps managedFields on the kinds a framework registers as
// read (a runtime's, a PodClique's) and on no other.
func TestKeepsManagedFields(t *testing.T) {
	for _, tc := range []struct {
		obj  any
		want bool
	}{
		{trainer.NewRuntime("ClusterTrainingRuntime"), true},
		{trainer.NewRuntime("TrainingRuntime"), true},
		// Read as served, only the registered kinds keep them.
		{&unstructured.Unstructured{Object: map[string]any{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob"}}, false},
		{grove.NewObject(api.KindPodClique), true},
		{grove.NewObject(api.KindPodCliqueScalingGroup), true},
		{grove.NewObject(api.KindPodCliqueSet), false},
		{&trainerv1alpha1.TrainJob{}, false},
		{&corev1.Pod{}, false},
		{"not an object", false},
	} {
		if got := KeepsManagedFields(tc.obj); got != tc.want {
			t.Errorf("KeepsManagedFields(%T) = %v, want %v", tc.obj, got, tc.want)
		}
	}
}

// A framework names the plural resource of each of its kinds (the webhook
// configurations and a WorkloadPolicy's match use them): registering one
// without them is a programming error, caught at init.
func TestRegisterRefusesKindsWithoutResources(t *testing.T) {
	saved := Frameworks
	t.Cleanup(func() { Frameworks = saved })
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), `framework "New" has 2 kinds and 1 resources`) {
			t.Errorf("Register of 2 kinds and 1 resource: recovered %v, want a panic naming the framework", r)
		}
	}()
	Register(Framework{Name: "New", Group: "new.example", Kinds: []string{"A", "B"}, Resources: []string{"as"}})
}

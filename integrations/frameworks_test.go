package integrations_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	. "github.com/shepherd-k8s/shepherd/integrations"
	_ "github.com/shepherd-k8s/shepherd/integrations/all"
)

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Mode
		wantErr bool
	}{
		{in: "auto", want: ModeAuto},
		{in: "on", want: ModeOn},
		{in: "off", want: ModeOff},
		{in: " OFF ", want: ModeOff},
		{in: "", wantErr: true},
		{in: "true", wantErr: true},
		{in: "enabled", wantErr: true},
	} {
		got, err := ParseMode(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseMode(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseMode(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestModeIsAFlag(t *testing.T) {
	mode := ModeAuto
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.Var(&mode, "framework-grove", "")
	if err := fs.Parse([]string{"--framework-grove=off"}); err != nil {
		t.Fatal(err)
	}
	if mode != ModeOff {
		t.Errorf("mode = %q, want off", mode)
	}
	if err := fs.Parse([]string{"--framework-grove=sometimes"}); err == nil {
		t.Error("--framework-grove=sometimes parsed, want an error")
	}
}

// crd is the CRD of kind in group, established unless told otherwise,
// serving version.
func crd(group, kind, version string, opts ...func(*apiextensionsv1.CustomResourceDefinition)) *apiextensionsv1.CustomResourceDefinition {
	c := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: kind + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group:    group,
			Names:    apiextensionsv1.CustomResourceDefinitionNames{Kind: kind},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: version, Served: true, Storage: true}},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{Conditions: []apiextensionsv1.CustomResourceDefinitionCondition{
			{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue},
			{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue},
		}},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func notEstablished(c *apiextensionsv1.CustomResourceDefinition) {
	c.Status.Conditions[1].Status = apiextensionsv1.ConditionFalse
}

func deleting(c *apiextensionsv1.CustomResourceDefinition) {
	c.DeletionTimestamp = &metav1.Time{}
}

// frameworkCRDs are every CRD of the named frameworks, established.
func frameworkCRDs(names ...string) []*apiextensionsv1.CustomResourceDefinition {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range Frameworks {
		if sets.New(names...).Has(f.Name) {
			for _, k := range f.Kinds {
				out = append(out, crd(f.Group, k, f.Version))
			}
		}
	}
	return out
}

func TestDecide(t *testing.T) {
	trainerMissing := []string{"TrainJob.trainer.kubeflow.org", "TrainingRuntime.trainer.kubeflow.org", "ClusterTrainingRuntime.trainer.kubeflow.org"}
	jobsetMissing := []string{"JobSet.jobset.x-k8s.io"}
	groveMissing := []string{"PodCliqueSet.grove.io", "PodClique.grove.io", "PodCliqueScalingGroup.grove.io"}
	none := func(modes ...Mode) []Decision {
		for len(modes) < 3 {
			modes = append(modes, ModeAuto)
		}
		return []Decision{
			{Framework: Trainer, Mode: modes[0], Missing: trainerMissing},
			{Framework: JobSet, Mode: modes[1], Missing: jobsetMissing},
			{Framework: Grove, Mode: modes[2], Missing: groveMissing},
		}
	}
	for _, tc := range []struct {
		name  string
		modes map[string]Mode
		crds  []*apiextensionsv1.CustomResourceDefinition
		want  []Decision
	}{
		{name: "no CRDs, no modes: every framework auto and skipped", want: none()},
		{
			name: "every CRD established",
			crds: frameworkCRDs(Trainer, JobSet, Grove),
			want: []Decision{
				{Framework: Trainer, Mode: ModeAuto, Served: true, Start: true},
				{Framework: JobSet, Mode: ModeAuto, Served: true, Start: true},
				{Framework: Grove, Mode: ModeAuto, Served: true, Start: true},
			},
		},
		{
			name:  "off never starts, on starts when served",
			modes: map[string]Mode{Trainer: ModeOff, JobSet: ModeOn, Grove: ModeAuto},
			crds:  frameworkCRDs(Trainer, JobSet, Grove),
			want: []Decision{
				{Framework: Trainer, Mode: ModeOff, Served: true},
				{Framework: JobSet, Mode: ModeOn, Served: true, Start: true},
				{Framework: Grove, Mode: ModeAuto, Served: true, Start: true},
			},
		},
		{
			name:  "on but absent: not served, not started (the watcher fails at start)",
			modes: map[string]Mode{Grove: ModeOn},
			want:  none(ModeAuto, ModeAuto, ModeOn),
		},
		{
			name: "one kind of a framework missing holds the whole framework back",
			crds: append(frameworkCRDs(JobSet), crd("trainer.kubeflow.org", "TrainJob", "v1alpha1"), crd("trainer.kubeflow.org", "TrainingRuntime", "v1alpha1")),
			want: []Decision{
				{Framework: Trainer, Mode: ModeAuto, Missing: []string{"ClusterTrainingRuntime.trainer.kubeflow.org"}},
				{Framework: JobSet, Mode: ModeAuto, Served: true, Start: true},
				{Framework: Grove, Mode: ModeAuto, Missing: groveMissing},
			},
		},
		{
			name: "a CRD not yet established, being deleted, or not serving shepherd's version does not count",
			crds: []*apiextensionsv1.CustomResourceDefinition{
				crd("jobset.x-k8s.io", "JobSet", "v1alpha2", notEstablished),
				crd("grove.io", "PodCliqueSet", "v1alpha1", deleting),
				crd("grove.io", "PodClique", "v1alpha1"),
				crd("grove.io", "PodCliqueScalingGroup", "v1"),
			},
			want: []Decision{
				{Framework: Trainer, Mode: ModeAuto, Missing: trainerMissing},
				{Framework: JobSet, Mode: ModeAuto, Missing: jobsetMissing},
				{Framework: Grove, Mode: ModeAuto, Missing: []string{"PodCliqueSet.grove.io", "PodCliqueScalingGroup.grove.io"}},
			},
		},
		{
			name: "a version defined but not served does not count",
			crds: []*apiextensionsv1.CustomResourceDefinition{crd("jobset.x-k8s.io", "JobSet", "v1alpha2", func(c *apiextensionsv1.CustomResourceDefinition) {
				c.Spec.Versions[0].Served = false
			})},
			want: none(),
		},
		{
			name: "CRDs of other groups are ignored",
			crds: []*apiextensionsv1.CustomResourceDefinition{crd("example.com", "JobSet", "v1alpha2"), crd("kueue.x-k8s.io", "Workload", "v1beta1")},
			want: none(),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Decide(tc.modes, tc.crds)); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCacheByObjectStripsOtherGroups(t *testing.T) {
	transform := CacheByObject().Transform
	ours := crd("grove.io", "PodClique", "v1alpha1")
	ours.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	got, err := transform(ours.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	want := ours.DeepCopy()
	want.ManagedFields = nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a framework's CRD (-want +got):\n%s", diff)
	}

	other := crd("example.com", "Widget", "v1")
	other.ResourceVersion = "7"
	got, err = transform(other.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	wantOther := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: other.Name, ResourceVersion: "7"},
		Spec:       apiextensionsv1.CustomResourceDefinitionSpec{Group: "example.com", Names: other.Spec.Names},
	}
	if diff := cmp.Diff(wantOther, got); diff != "" {
		t.Errorf("another group's CRD (-want +got):\n%s", diff)
	}
}

package pinned

import (
	"os"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// TestVersionsMatchGoMod: the versions shepherd reports and embeds the
// CRDs of are the ones go.mod pins.
func TestVersionsMatchGoMod(t *testing.T) {
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for module, version := range map[string]string{TrainerModule: TrainerVersion, JobSetModule: JobSetVersion} {
		re := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(module) + `\s+(\S+)`)
		m := re.FindSubmatch(b)
		if m == nil {
			t.Errorf("go.mod does not require %s", module)
		} else if string(m[1]) != version {
			t.Errorf("go.mod pins %s %s, the constant says %s", module, m[1], version)
		}
	}
}

// TestEmbeddedCRDs: the build carries every upstream CRD shepherd
// type-checks against by default.
func TestEmbeddedCRDs(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, c := range crds {
		got[c.Name] = true
	}
	for _, want := range []string{
		"trainjobs.trainer.kubeflow.org", "trainingruntimes.trainer.kubeflow.org", "clustertrainingruntimes.trainer.kubeflow.org",
		"jobsets.jobset.x-k8s.io", "podcliquesets.grove.io", "podcliques.grove.io", "podcliquescalinggroups.grove.io",
	} {
		if !got[want] {
			t.Errorf("no embedded CRD %s", want)
		}
	}
}

// TestReadSkipsOtherKindsAndNamesEmptyPaths: --crd takes a directory of
// mixed manifests, and a path without a CRD is an error naming it.
func TestReadSkipsOtherKindsAndNamesEmptyPaths(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/mixed.yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir); err == nil || !regexp.MustCompile(`holds no CustomResourceDefinition`).MatchString(err.Error()) {
		t.Errorf("a directory without CRDs: %v", err)
	}
	crds, err := Read("crds")
	if err != nil || len(crds) < 7 {
		t.Errorf("the pinned directory: %d CRDs, %v", len(crds), err)
	}
}

// TestReadWalksDirectories: a directory given to --crd is read as `check
// -f` reads one, recursively and whatever the case of the extension, so a
// CRD kept in a subdirectory is not silently left out.
func TestReadWalksDirectories(t *testing.T) {
	src, err := os.ReadFile("crds/jobset.x-k8s.io_jobsets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	trainjobs, err := os.ReadFile("crds/trainer.kubeflow.org_trainjobs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	testkit.WriteFile(t, dir, "jobset/crds/JOBSET.YAML", string(src))
	testkit.WriteFile(t, dir, "trainer/trainjobs.yml", string(trainjobs))
	testkit.WriteFile(t, dir, "README.md", "not a manifest")
	crds, err := Read(dir)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	var names []string
	for _, c := range crds {
		names = append(names, c.Name)
	}
	if diff := cmp.Diff([]string{"jobsets.jobset.x-k8s.io", "trainjobs.trainer.kubeflow.org"}, names); diff != "" {
		t.Errorf("CRDs read (-want +got):\n%s", diff)
	}
}

func TestIsManifest(t *testing.T) {
	for name, want := range map[string]bool{
		"a.yaml": true, "a.YML": true, "d/a.Json": true, "a.yaml.bak": false, "yaml": false, "a.txt": false,
	} {
		if got := IsManifest(name); got != want {
			t.Errorf("IsManifest(%q) = %v, want %v", name, got, want)
		}
	}
}

// Package foundation proves the ground every other suite stands on: shepherd's
// generated CRDs are current and accepted by a real kube-apiserver, an example
// of every kind survives a round trip unchanged (fields shepherd does not
// model included), and the Workload API is served exactly when asked for.
package foundation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

var env *cluster.Cluster

func TestMain(m *testing.M) { cluster.RunMain(m, cluster.Options{}, &env) }

func readCRDs(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	return readFiles(t, dir, "*.yaml")
}

func readFiles(t *testing.T, dir, pattern string) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

// TestCRDsAreEstablished: shepherd's own CRDs (the only ones deploy/crds
// holds: WorkloadPolicy, PolicyException and WorkloadRecord, all
// shepherd.dev) and the
// upstream ones the harness installs by default are established on the
// real apiserver.
func TestCRDsAreEstablished(t *testing.T) {
	files := readCRDs(t, cluster.CRDDir())
	if len(files) != 3 {
		t.Fatalf("deploy/crds holds %d CRDs, want 3 (shepherd.dev's WorkloadPolicy, PolicyException and WorkloadRecord)", len(files))
	}
	for name, b := range files {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if crd.Spec.Group != "shepherd.dev" {
			t.Errorf("deploy/crds/%s is a CRD of group %q: shepherd owns no other group", name, crd.Spec.Group)
		}
	}
	upstream, err := cluster.FrameworkCRDs(cluster.UpstreamCRDs)
	if err != nil {
		t.Fatal(err)
	}
	if len(upstream) != 7 {
		t.Errorf("%d upstream CRDs, want 7 (3 trainer, 1 jobset, 3 grove)", len(upstream))
	}
	names := []string{}
	for _, crd := range upstream {
		names = append(names, crd.Name)
	}
	for name, b := range files {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		names = append(names, crd.Name)
	}
	for _, name := range names {
		crd := apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}
		var live apiextensionsv1.CustomResourceDefinition
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: crd.Name}, &live); err != nil {
			t.Errorf("%s: not installed: %v", crd.Name, err)
			continue
		}
		for _, want := range []apiextensionsv1.CustomResourceDefinitionConditionType{apiextensionsv1.Established, apiextensionsv1.NamesAccepted} {
			if !crdCondition(&live, want) {
				t.Errorf("%s: condition %s is not True: %+v", crd.Name, want, live.Status.Conditions)
			}
		}
	}
}

func crdCondition(crd *apiextensionsv1.CustomResourceDefinition, t apiextensionsv1.CustomResourceDefinitionConditionType) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == t {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// TestExamplesRoundTrip creates every object in examples/valid on the
// upstream CRDs and reads it back: everything it was written with comes
// back — the fields shepherd's types do not model, and the carrier
// annotations of its seed knobs — so none is pruned; the upstream CRDs may
// add their own defaults.
func TestExamplesRoundTrip(t *testing.T) {
	ns := env.Namespace(t)
	files, err := filepath.Glob(filepath.Join(cluster.RepoRoot(), "examples", "valid", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, f := range files {
		for _, obj := range decodeAll(t, f) {
			kinds[obj.GetKind()] = true
			t.Run(filepath.Base(f)+"/"+obj.GetName(), func(t *testing.T) {
				if obj.GetKind() != "ClusterTrainingRuntime" {
					obj.SetNamespace(ns)
				}
				want := obj.DeepCopy()
				if err := env.Client.Create(context.Background(), obj); err != nil {
					t.Fatalf("create: %v", err)
				}
				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(want.GroupVersionKind())
				if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(want), got); err != nil {
					t.Fatalf("get: %v", err)
				}
				for _, p := range lost(want.Object["spec"], got.Object["spec"], "spec") {
					t.Errorf("%s was not stored as sent", p)
				}
				if diff := cmp.Diff(want.GetLabels(), got.GetLabels()); diff != "" {
					t.Errorf("labels changed in the round trip (-sent +stored):\n%s", diff)
				}
				for k, v := range want.GetAnnotations() {
					if got.GetAnnotations()[k] != v {
						t.Errorf("annotation %s: sent %q, stored %q", k, v, got.GetAnnotations()[k])
					}
				}
			})
		}
	}
	for _, k := range []string{"TrainJob", "TrainingRuntime", "ClusterTrainingRuntime", "JobSet", "PodCliqueSet", "PodClique", "PodCliqueScalingGroup"} {
		if !kinds[k] {
			t.Errorf("examples/valid has no %s", k)
		}
	}
}

// lost lists the paths of sent that stored does not hold with the same
// value (stored may hold more: defaults).
func lost(sent, stored any, path string) []string {
	switch s := sent.(type) {
	case map[string]any:
		m, ok := stored.(map[string]any)
		if !ok {
			return []string{path}
		}
		var out []string
		for k, v := range s {
			out = append(out, lost(v, m[k], path+"."+k)...)
		}
		return out
	case []any:
		l, ok := stored.([]any)
		if !ok || len(l) != len(s) {
			return []string{path}
		}
		var out []string
		for i := range s {
			out = append(out, lost(s[i], l[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	}
	if !cmp.Equal(sent, stored) {
		return []string{path}
	}
	return nil
}

func decodeAll(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		// Decode each document to raw JSON first and then into Unstructured,
		// so numbers are int64 exactly as the client returns them.
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("%s: %v", path, err)
		}
		if len(raw.Raw) == 0 || string(raw.Raw) == "null" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw.Raw); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, obj)
	}
}

// TestCRDsAreFresh regenerates the CRDs from api/ and the Grove mirror and
// compares them with the committed ones, so a type change without `make
// generate` fails here. The seed-shaped CRDs (test/seedcrds) are fixtures,
// not generated.
func TestCRDsAreFresh(t *testing.T) {
	if os.Getenv("CONTROLLER_GEN") == "" {
		t.Fatal("CONTROLLER_GEN is not set: run the tests through `make test`, which installs controller-gen")
	}
	dir := t.TempDir()
	cmd := exec.Command("make", "-s", "manifests", "CRD_DIR="+dir)
	cmd.Dir = cluster.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make manifests: %v\n%s", err, out)
	}
	for sub, committedDir := range map[string]string{
		"shepherd": cluster.CRDDir(),
		"grove":    filepath.Join(cluster.RepoRoot(), "integrations", "pinned", "crds"),
	} {
		pattern := "*.yaml"
		if sub == "grove" {
			pattern = "grove.io_*.yaml" // Trainer's and JobSet's are copied, not generated
		}
		committed, fresh := readFiles(t, committedDir, pattern), readFiles(t, filepath.Join(dir, sub), pattern)
		if len(fresh) == 0 {
			t.Fatalf("controller-gen generated no CRDs into %s", sub)
		}
		rel, _ := filepath.Rel(cluster.RepoRoot(), committedDir)
		for name := range fresh {
			if _, ok := committed[name]; !ok {
				t.Errorf("%s/%s is generated but not committed: run make generate", rel, name)
			} else if string(committed[name]) != string(fresh[name]) {
				t.Errorf("%s/%s is stale: run make generate", rel, name)
			}
		}
		for name := range committed {
			if _, ok := fresh[name]; !ok {
				t.Errorf("%s/%s is committed but no longer generated: run make generate", rel, name)
			}
		}
	}
}

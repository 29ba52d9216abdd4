// Package foundation proves the ground every other suite stands on: shepherd's
// generated CRDs are current and accepted by a real kube-apiserver, an example
// of every kind survives a round trip unchanged (fields shepherd does not
// model included), and the Workload API is served exactly when asked for.
package foundation

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
	var err error
	env, err = cluster.New(cluster.Options{})
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		os.Stderr.WriteString("stopping control plane: " + err.Error() + "\n")
	}
	os.Exit(code)
}

func readCRDs(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
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

func TestCRDsAreEstablished(t *testing.T) {
	files := readCRDs(t, cluster.CRDDir())
	if len(files) != 8 {
		t.Fatalf("deploy/crds holds %d CRDs, want 8 (3 trainer, 3 grove, 1 jobset, 1 shepherd)", len(files))
	}
	for name, b := range files {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
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

// TestExamplesRoundTrip creates every object in examples/valid and reads it
// back: its spec must come back exactly as written, including the fields
// shepherd's types do not model.
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
				if diff := cmp.Diff(want.Object["spec"], got.Object["spec"]); diff != "" {
					t.Errorf("spec changed in the round trip (-sent +stored):\n%s", diff)
				}
				if diff := cmp.Diff(want.GetLabels(), got.GetLabels()); diff != "" {
					t.Errorf("labels changed in the round trip (-sent +stored):\n%s", diff)
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

// TestCRDsAreFresh regenerates the CRDs from api/ and compares them with the
// committed ones, so a type change without `make generate` fails here.
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
	committed, fresh := readCRDs(t, cluster.CRDDir()), readCRDs(t, dir)
	if len(fresh) == 0 {
		t.Fatal("controller-gen generated no CRDs")
	}
	for name := range fresh {
		if _, ok := committed[name]; !ok {
			t.Errorf("%s is generated but not committed: run make generate", name)
		} else if string(committed[name]) != string(fresh[name]) {
			t.Errorf("deploy/crds/%s is stale: run make generate", name)
		}
	}
	for name := range committed {
		if _, ok := fresh[name]; !ok {
			t.Errorf("deploy/crds/%s is committed but no longer generated: run make generate", name)
		}
	}
}

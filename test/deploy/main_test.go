// Package deploy_test checks the Kustomize manifests in deploy/: both
// overlays build with the Kustomize Go API, every object is accepted by a
// real kube-apiserver (server-side dry-run), the security settings a careful
// platform admin asks for are there, and the RBAC is enough for what
// shepherd actually does.
//
// cert-manager's and the Prometheus Operator's CRDs are not installed in the
// test apiserver. cert-manager objects are validated instead by strict
// decoding into cert-manager's published Go API types
// (github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1: unknown or
// misspelt fields fail) plus checks that the issuer chain and names fit
// together; the ServiceMonitor is checked structurally against the Service.
package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
	c, err := cluster.New(cluster.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	env = c
	code := m.Run()
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
	}
	os.Exit(code)
}

const shepherdNS = "shepherd-system"

func deployDir(parts ...string) string {
	return filepath.Join(append([]string{cluster.RepoRoot(), "deploy"}, parts...)...)
}

// build runs `kustomize build dir` through the Kustomize Go API.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		// Through JSON, so numbers are int64/float64 as in any decoded
		// object (Map() keeps YAML's int, which DeepCopy rejects).
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatalf("kustomize build %s: %s: %v", dir, r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			t.Fatalf("kustomize build %s: decoding %s: %v", dir, r.CurId(), err)
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		t.Fatalf("kustomize build %s: no objects", dir)
	}
	return out
}

// overlays are the two installable variants. The default one is built with
// the Prometheus component added, through a temporary overlay outside the
// repository (Kustomize loads directories from anywhere).
func overlays(t *testing.T) map[string][]*unstructured.Unstructured {
	t.Helper()
	withMonitor := t.TempDir()
	rel := func(dir string) string {
		r, err := filepath.Rel(withMonitor, dir) // Kustomize refuses absolute paths
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	kust := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\ncomponents:\n- %s\n",
		rel(deployDir("default")), rel(deployDir("prometheus")))
	if err := os.WriteFile(filepath.Join(withMonitor, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	return map[string][]*unstructured.Unstructured{
		"default":            build(t, deployDir("default")),
		"cert-manager":       build(t, deployDir("cert-manager")),
		"default+prometheus": build(t, withMonitor),
	}
}

// find returns the objects of kind (and name, when not empty).
func find(objs []*unstructured.Unstructured, kind, name string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			out = append(out, o)
		}
	}
	return out
}

// one decodes the single object of kind/name into a typed object.
func one[T any](t *testing.T, objs []*unstructured.Unstructured, kind, name string) *T {
	t.Helper()
	found := find(objs, kind, name)
	if len(found) != 1 {
		t.Fatalf("%d %s %q in the build, want 1", len(found), kind, name)
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(found[0].Object, out); err != nil {
		t.Fatalf("decoding %s %s: %v", kind, name, err)
	}
	return out
}

// strict decodes o into out, failing on any field out does not have.
func strict(o *unstructured.Unstructured, out any) error {
	b, err := json.Marshal(o.Object)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(out)
}

func kinds(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	slices.Sort(out)
	return out
}

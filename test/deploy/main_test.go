// Package deploy_test checks the Kustomize manifests in deploy/: the
// installable variants (install.Variants: default, cert-manager,
// default+prometheus) build with the Kustomize Go API, every object is accepted by a
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
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/install"
)

var env *cluster.Cluster

func TestMain(m *testing.M) { cluster.RunMain(m, cluster.Options{}, &env) }

const shepherdNS = "shepherd-system"

func deployDir(parts ...string) string { return install.Dir(parts...) }

// build runs `kustomize build dir`.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := install.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// overlays are the installable variants (install.Variants).
func overlays(t *testing.T) map[string][]*unstructured.Unstructured {
	t.Helper()
	v, err := install.Variants(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// one decodes the single object of kind/name into a typed object.
func one[T any](t *testing.T, objs []*unstructured.Unstructured, kind, name string) *T {
	t.Helper()
	found := install.Find(objs, kind, name)
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

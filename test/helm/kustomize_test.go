package helm_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/shepherd-k8s/shepherd/test/install"
)

// Deliberate differences between the chart and deploy/'s Kustomize output.
// normalize removes them (and only them) before the objects are compared.
//
//   - The Namespace: deploy/default creates shepherd-system with the Pod
//     Security labels; the chart installs into the release namespace, which
//     must exist before Helm stores the release in it (helm install
//     --create-namespace), so the chart cannot own it. NOTES.txt tells the
//     admin to label it.
//   - Labels: the chart puts the same labels on every object — Helm's
//     standard ones (instance, managed-by, version, helm.sh/chart), name
//     and part-of, and the ServiceMonitor's from the values — where
//     deploy/'s vary by directory (deploy/crds' CRD has no name label,
//     deploy/cert-manager's and deploy/prometheus' objects no part-of).
//     Every label of the Kustomize object is still there with its value,
//     and pod template and selector labels are identical.
//   - The CRD's helm.sh/resource-policy: keep annotation: an uninstall must
//     not delete WorkloadPolicies (Kustomize never deletes anything).
//   - GOMEMLIMIT: the chart sets it to goMemLimitPercent (80%) of the memory
//     limit, leaving headroom for memory Go does not count; deploy/ sets it
//     to the whole limit through a resourceFieldRef.
var chartOnlyLabels = []string{
	"app.kubernetes.io/name", "app.kubernetes.io/part-of",
	"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version", "helm.sh/chart",
	"release", // metrics.serviceMonitor.labels and observability.prometheusRule.labels of two value sets
}

// scheme knows every kind either side renders but the Prometheus
// Operator's.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, cmapi.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// TestAgreesWithKustomize: for each Kustomize variant, the chart with the
// corresponding values renders the same objects (group, kind, namespace,
// name) with the same content — container args, ports, probes, volumes,
// RBAC rules, webhook rules, namespaceSelector, failurePolicy, everything —
// once the deliberate differences above are taken out. Objects are
// compared after a round trip through their Go types, so "1" and "1000m",
// or 0440 and 288, are the same.
func TestAgreesWithKustomize(t *testing.T) {
	variants, err := install.Variants(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// deploy/observability is applied beside an install.
	obs, err := install.Build(install.Dir("observability"))
	if err != nil {
		t.Fatal(err)
	}
	variants["default+observability"] = append(slices.Clone(variants["default"]), obs...)
	// deploy/native, the native admission mode (not one of install.Variants,
	// which test/deploy and test/interop install).
	if variants["native"], err = install.Build(install.Dir("native")); err != nil {
		t.Fatal(err)
	}
	// deploy/'s optional security components over deploy/default.
	for _, component := range []string{"client-ca", "network-policy"} {
		if variants["default+"+component], err = withComponent(t.TempDir(), component); err != nil {
			t.Fatal(err)
		}
	}
	compared := 0
	for _, vs := range valueSets {
		if vs.kustomize == "" {
			continue
		}
		t.Run(vs.name, func(t *testing.T) {
			kust := map[string]*unstructured.Unstructured{}
			for _, o := range variants[vs.kustomize] {
				if o.GetKind() == "Namespace" {
					continue // deliberate: see above
				}
				kust[key(o)] = o
			}
			if len(kust) == 0 {
				t.Fatalf("Kustomize variant %s built nothing", vs.kustomize)
			}
			_, objs := render(t, vs)
			helm := map[string]*unstructured.Unstructured{}
			for _, o := range objs {
				helm[key(o)] = o
			}
			for _, k := range slices.Sorted(maps.Keys(kust)) {
				h, ok := helm[k]
				if !ok {
					t.Errorf("the chart does not render %s (Kustomize variant %s does)", k, vs.kustomize)
					continue
				}
				want, got := normalize(t, kust[k], kust[k], false), normalize(t, h, kust[k], true)
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("%s differs from Kustomize variant %s (-kustomize +chart):\n%s", k, vs.kustomize, d)
				}
				compared++
			}
			for _, k := range slices.Sorted(maps.Keys(helm)) {
				if _, ok := kust[k]; !ok {
					t.Errorf("the chart renders %s, which Kustomize variant %s does not", k, vs.kustomize)
				}
			}
		})
	}
	if compared < 6*14 {
		t.Errorf("only %d objects compared", compared)
	}
}

// withComponent builds deploy/default with the Kustomize component
// deploy/<component>, through an overlay written into scratch (Kustomize
// loads directories by relative path only).
func withComponent(scratch, component string) ([]*unstructured.Unstructured, error) {
	def, err := filepath.Rel(scratch, install.Dir("default"))
	if err != nil {
		return nil, err
	}
	comp, err := filepath.Rel(scratch, install.Dir(component))
	if err != nil {
		return nil, err
	}
	kust := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\ncomponents:\n- %s\n", def, comp)
	if err := os.WriteFile(filepath.Join(scratch, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		return nil, err
	}
	return install.Build(scratch)
}

// normalize takes out the deliberate differences and round-trips o
// through its Go type.
func normalize(t *testing.T, o, kustomize *unstructured.Unstructured, fromChart bool) map[string]any {
	t.Helper()
	o = o.DeepCopy()
	if fromChart {
		// Only labels the Kustomize object lacks, and only those listed.
		labels := o.GetLabels()
		for _, l := range chartOnlyLabels {
			if _, ok := kustomize.GetLabels()[l]; !ok {
				delete(labels, l)
			}
		}
		o.SetLabels(labels)
		if o.GetKind() == "CustomResourceDefinition" {
			a := o.GetAnnotations()
			delete(a, "helm.sh/resource-policy")
			o.SetAnnotations(a)
		}
	}
	if o.GetKind() == "Deployment" {
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			env, _ := c.(map[string]any)["env"].([]any)
			for _, e := range env {
				if e := e.(map[string]any); e["name"] == "GOMEMLIMIT" {
					delete(e, "value")
					delete(e, "valueFrom")
				}
			}
		}
		if err := unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers"); err != nil {
			t.Fatal(err)
		}
	}
	typed, err := scheme.New(o.GroupVersionKind())
	if err != nil {
		return o.Object // the Prometheus Operator's kinds: no Go type here
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, typed); err != nil {
		t.Fatalf("decoding %s: %v", key(o), err)
	}
	out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(typed)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

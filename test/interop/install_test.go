package interop

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/pinned"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/install"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// notServedHere are the kinds of the install variants whose CRDs no module
// in go.mod publishes (the Prometheus Operator's): applied nowhere, and the
// only objects left out.
var notServedHere = map[string]bool{"monitoring.coreos.com/ServiceMonitor": true}

// TestInstallVariantsBesideUpstreamCRDs applies every deploy/ variant
// server-side, as README says (`kubectl apply --server-side`, no force), to
// a control plane that already has the upstream CRDs (and cert-manager's,
// from its module, for the cert-manager variant): every object applies,
// none conflicts, and every upstream CRD is byte-for-byte what its project
// installed — same resourceVersion, same spec.
func TestInstallVariantsBesideUpstreamCRDs(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	certManager := certManagerCRDs(t)
	for _, crd := range certManager {
		if err := c.Client.Create(ctx, crd); err != nil {
			t.Fatalf("installing cert-manager CRD %s: %v", crd.Name, err)
		}
	}
	waitEstablished(t, c, certManager)
	before := snapshotCRDs(t, c)
	if len(before) < 7+len(certManager) {
		t.Fatalf("%d CRDs before the install, want the 7 upstream ones and cert-manager's %d", len(before), len(certManager))
	}

	variants, err := install.Variants(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"default", "cert-manager", "default+prometheus"} {
		objs := variants[name]
		t.Run(name, func(t *testing.T) {
			// Namespaces and CRDs first, as kubectl's apply ordering does.
			ordered := append(filter(objs, isNamespaceOrCRD), filter(objs, func(u *unstructured.Unstructured) bool { return !isNamespaceOrCRD(u) })...)
			for _, o := range ordered {
				gk := o.GroupVersionKind().GroupKind()
				if notServedHere[gk.Group+"/"+gk.Kind] {
					continue
				}
				err := c.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("kubectl"))
				if err != nil {
					t.Errorf("applying %s %s: %v", o.GetKind(), o.GetName(), err)
				}
				if gk.Kind == "CustomResourceDefinition" {
					if g, _, _ := unstructured.NestedString(o.Object, "spec", "group"); g != "shepherd.dev" {
						t.Errorf("the %s variant carries CRD %s of group %s", name, o.GetName(), g)
					}
				}
			}
		})
	}
	after := snapshotCRDs(t, c)
	for name, b := range before {
		if after[name] != b {
			t.Errorf("CRD %s changed by the install (resourceVersion %s -> %s)", name, strings.Fields(b)[0], strings.Fields(after[name] + " gone")[0])
		}
	}
}

// snapshotCRDs maps every non-shepherd CRD to its resourceVersion and spec.
func snapshotCRDs(t *testing.T, c *cluster.Cluster) map[string]string {
	t.Helper()
	list := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := c.Client.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, crd := range list.Items {
		if crd.Spec.Group == "shepherd.dev" {
			continue
		}
		spec, err := json.Marshal(crd.Spec)
		if err != nil {
			t.Fatal(err)
		}
		out[crd.Name] = crd.ResourceVersion + " " + string(spec)
	}
	return out
}

func isNamespaceOrCRD(u *unstructured.Unstructured) bool {
	return u.GetKind() == "Namespace" || u.GetKind() == "CustomResourceDefinition"
}

func filter(objs []*unstructured.Unstructured, keep func(*unstructured.Unstructured) bool) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if keep(o) {
			out = append(out, o)
		}
	}
	return out
}

// certManagerCRDs reads cert-manager's CRDs from the module go.mod pins.
func certManagerCRDs(t *testing.T) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager")
	cmd.Dir = cluster.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("locating the cert-manager module: %v", err)
	}
	crds, err := pinned.Read(filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds"))
	if err != nil {
		t.Fatal(err)
	}
	return crds
}

func waitEstablished(t *testing.T, c *cluster.Cluster, crds []*apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	testkit.Eventually(t, timeout, "CRDs established", func() (bool, string) {
		for _, crd := range crds {
			live := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Client.Get(context.Background(), client.ObjectKeyFromObject(crd), live); err != nil {
				return false, err.Error()
			}
			if !integrations.Established(live) {
				return false, crd.Name + " not established"
			}
		}
		// the client's REST mapper must know the new kinds too
		_, err := c.Client.RESTMapper().RESTMapping(crdGK(crds[0]), crds[0].Spec.Versions[0].Name)
		if err != nil && !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err) {
			return false, err.Error()
		}
		return err == nil, "REST mapping"
	})
}

package helm_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/pinned"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// notServedHere: the rendered kinds whose CRDs no module in go.mod
// publishes (see the package comment).
var notServedHere = map[schema.GroupKind]bool{
	{Group: "monitoring.coreos.com", Kind: "ServiceMonitor"}: true,
	{Group: "monitoring.coreos.com", Kind: "PrometheusRule"}: true,
}

// TestServerSideDryRun: every object of every value set passes a
// server-side apply dry-run (schema, defaulting, validation, admission) on
// a control plane with cert-manager's CRDs, in the release namespace.
func TestServerSideDryRun(t *testing.T) {
	ctx := context.Background()
	installCertManagerCRDs(t)
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			ensureNamespace(t, vs.namespace)
			_, objs := render(t, vs)
			checked := 0
			for _, o := range objs {
				if notServedHere[o.GroupVersionKind().GroupKind()] {
					continue
				}
				err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
					client.FieldOwner("helm"), client.ForceOwnership, client.DryRunAll)
				if err != nil {
					t.Errorf("%s rejected: %v", key(o), err)
				}
				checked++
			}
			// ServiceAccount, 3 ClusterRoles or Roles and their bindings at
			// least, Deployment, Service, 2 webhook configurations.
			if checked < 10 {
				t.Errorf("only %d objects dry-run", checked)
			}
		})
	}
}

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

var certManagerOnce sync.Once

// installCertManagerCRDs installs the CRDs of the cert-manager module
// go.mod pins, once, and waits until the client can map their kinds.
func installCertManagerCRDs(t *testing.T) {
	t.Helper()
	var err error
	certManagerOnce.Do(func() { err = doInstallCertManagerCRDs() })
	if err != nil {
		t.Fatal(err)
	}
}

func doInstallCertManagerCRDs() error {
	ctx := context.Background()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager")
	cmd.Dir = cluster.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		return err
	}
	crds, err := pinned.Read(filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds"))
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if err := env.Client.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	err = testkit.Poll(100*time.Millisecond, 30*time.Second, func(ctx context.Context) (bool, error) {
		for _, crd := range crds {
			live := &apiextensionsv1.CustomResourceDefinition{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(crd), live); err != nil {
				return false, err
			}
			if !integrations.Established(live) {
				return false, fmt.Errorf("CRD %s not established", crd.GetName())
			}
		}
		_, err := env.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: "cert-manager.io", Kind: "Certificate"}, "v1")
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("waiting for the cert-manager CRDs to be established and mapped: %w", err)
	}
	return nil
}

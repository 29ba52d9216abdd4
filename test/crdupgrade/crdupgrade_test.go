// Package crdupgrade checks that shepherd serve type-checks its rules again
// when a framework's CRD is upgraded or downgraded while it runs. It is a
// package of its own because serve registers its controllers in the
// process, once.
package crdupgrade

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/pinned"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/seedcrds"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// TestCRDUpgradeIsTypeCheckedAgain: a WorkloadPolicy on a field the served
// ClusterTrainingRuntime schema lacks reports a compile error; when the CRD
// is upgraded to one that has the field — while shepherd runs — the policy
// compiles and is enforced without a restart, and when the field goes
// again the policy is reported again.
func TestCRDUpgradeIsTypeCheckedAgain(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Webhooks: envtest.WebhookInstallOptions{
		Paths:            []string{filepath.Join(cluster.RepoRoot(), "deploy", "webhook")},
		LocalServingHost: "127.0.0.1",
	}})
	s, err := c.Serve("--leader-elect=false", "--disable-reconcilers")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx := context.Background()
	p := &shepherdv1alpha1.WorkloadPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "runtime-ttl"},
		Spec: shepherdv1alpha1.WorkloadPolicySpec{
			Match: shepherdv1alpha1.Match{Resources: []shepherdv1alpha1.ResourceRule{{
				APIGroups: []string{"trainer.kubeflow.org"}, Kinds: []string{"ClusterTrainingRuntime"}, Operations: []string{"CREATE", "UPDATE"},
			}}},
			Validations: []shepherdv1alpha1.Validation{{Expression: "object.spec.?ttlSecondsAfterFinished.orValue(0) <= 86400", Message: "keep finished TrainJobs at most a day"}},
		},
	}
	// The served (upstream) CRD lacks the field: applied as is, the
	// policy is refused; labelled apply-unchecked, as one applied ahead of
	// the CRD that has the field, it is stored and reports the error.
	if err := c.Client.Create(ctx, p.DeepCopy()); !apierrors.IsInvalid(err) {
		t.Fatalf("applying a policy on a field the CRD lacks: want a 422, got %v", err)
	}
	p.Labels = map[string]string{api.LabelApplyUnchecked: "true"}
	if err := c.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	waitPolicy := func(status metav1.ConditionStatus) string {
		var msg string
		testkit.Eventually(t, time.Minute, "policy Ready="+string(status), func() (bool, string) {
			got := &shepherdv1alpha1.WorkloadPolicy{}
			if err := c.Client.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
				return false, err.Error()
			}
			for _, cond := range got.Status.Conditions {
				if cond.Type == api.ConditionPolicyReady {
					msg = cond.Message
					return cond.Status == status, cond.Message
				}
			}
			return false, "no Ready condition"
		})
		return msg
	}
	if msg := waitPolicy(metav1.ConditionFalse); !strings.Contains(msg, "ttlSecondsAfterFinished") {
		t.Errorf("compile error does not name the field: %s", msg)
	}

	// Upgrade: the seed-shaped ClusterTrainingRuntime CRD has the field.
	seed, err := pinned.Read(seedcrds.Dir())
	if err != nil {
		t.Fatal(err)
	}
	replace := func(crds []*apiextensionsv1.CustomResourceDefinition) {
		for _, want := range crds {
			if want.Name != "clustertrainingruntimes.trainer.kubeflow.org" {
				continue
			}
			live := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Client.Get(ctx, client.ObjectKeyFromObject(want), live); err != nil {
				t.Fatal(err)
			}
			live.Spec = want.Spec
			if err := c.Client.Update(ctx, live); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Fatal("no ClusterTrainingRuntime CRD")
	}
	replace(seed)
	waitPolicy(metav1.ConditionTrue)

	// Downgrade back to Trainer's own CRD: reported again.
	upstreamCRDs, err := pinned.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	replace(upstreamCRDs)
	waitPolicy(metav1.ConditionFalse)
}

// Package updatefilter tests, on a real kube-apiserver with shepherd's
// webhook configurations and a shepherd serve, that an operator's
// metadata-only UPDATEs never reach the webhooks while the ones that
// change what a rule reads do, and that the condition follows the
// WorkloadPolicies applied.
package updatefilter

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/certs"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
	cluster.RunMain(m, cluster.Options{
		Webhooks: envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(cluster.RepoRoot(), "deploy", "webhook")},
			LocalServingHost: "127.0.0.1",
		},
	}, &env)
}

// calls sums shepherd_admission_requests_total of webhook for UPDATEs of
// PodCliqueSets: the requests the apiserver sent (serve runs in this
// process, so its registry is readable directly).
func calls(t *testing.T, webhook string) float64 {
	t.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "shepherd_admission_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["webhook"] == webhook && l["kind"] == "PodCliqueSet" && l["operation"] == "UPDATE" {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// condition is the UPDATE matchCondition of shepherd's validating webhook
// ("" when there is none), and whether the mutating one has the same: the
// keeper patches one configuration, then the other, so read between the
// two they differ for a moment.
func condition(t *testing.T) (string, bool) {
	t.Helper()
	ctx := context.Background()
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	var m admissionregistrationv1.MutatingWebhookConfiguration
	if err := env.Client.Get(ctx, client.ObjectKey{Name: certs.DefaultValidatingWebhook}, &v); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: certs.DefaultMutatingWebhook}, &m); err != nil {
		t.Fatal(err)
	}
	find := func(cs []admissionregistrationv1.MatchCondition) string {
		for _, c := range cs {
			if c.Name == celrules.UpdateMatchConditionName {
				return c.Expression
			}
		}
		return ""
	}
	got := find(v.Webhooks[0].MatchConditions)
	same := find(m.Webhooks[0].MatchConditions) == got
	// envtest registered clientConfig and the CA: still there.
	if len(v.Webhooks[0].ClientConfig.CABundle) == 0 || v.Webhooks[0].ClientConfig.URL == nil {
		t.Fatalf("the keeper's patch lost the webhook's clientConfig: %+v", v.Webhooks[0].ClientConfig)
	}
	return got, same
}

func waitCondition(t *testing.T, what string, ok func(string) bool) string {
	t.Helper()
	var c string
	testkit.Eventually(t, 30*time.Second, "the condition to "+what+" in both configurations", func() (bool, string) {
		var same bool
		c, same = condition(t)
		return same && ok(c), fmt.Sprintf("the validating one's is %q (mutating the same: %v)", c, same)
	})
	return c
}

func apply(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(context.Background(), u); err != nil {
		t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), u) })
	return u
}

// policy is a Warn policy on PodCliqueSets of one validation.
func policy(name, expr string) string {
	return testkit.Policy(name, api.GroveGroup, api.KindPodCliqueSet).Action(shepherdv1alpha1.ActionWarn).Validation(expr, "").YAML()
}

// update changes pcs with f (re-reading it on a conflict) and returns the
// webhook calls it cost: mutating + validating.
func update(t *testing.T, pcs *unstructured.Unstructured, f func(*unstructured.Unstructured)) float64 {
	t.Helper()
	before := calls(t, "mutating") + calls(t, "validating")
	ctx := context.Background()
	for i := 0; ; i++ {
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(pcs.GroupVersionKind())
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pcs), cur); err != nil {
			t.Fatal(err)
		}
		f(cur)
		err := env.Client.Update(ctx, cur)
		if err == nil {
			break
		}
		if i > 5 || !strings.Contains(err.Error(), "modified") {
			t.Fatalf("updating: %v", err)
		}
	}
	return calls(t, "mutating") + calls(t, "validating") - before
}

func TestMetadataOnlyUpdatesSkipTheWebhooks(t *testing.T) {
	s, err := env.Serve("--leader-elect=false", "--audit-interval=0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })

	cond := waitCondition(t, "appear", func(c string) bool { return c != "" })
	for _, region := range celrules.GoReads {
		if !strings.Contains(cond, "object."+strings.Replace("?"+region, "?metadata.", "metadata.?", 1)) {
			t.Errorf("the condition does not compare %s: %s", region, cond)
		}
	}

	ns := env.Namespace(t)
	pcs := apply(t, testkit.PodCliqueSet(ns, "flow", testkit.Clique("w", 2, "i", map[string]any{"roleName": "worker"})).YAML())

	// What an operator does to it: finalizers, back and forth.
	addFinalizer := func(u *unstructured.Unstructured) { u.SetFinalizers(append(u.GetFinalizers(), "grove.io/test")) }
	dropFinalizer := func(u *unstructured.Unstructured) { u.SetFinalizers(nil) }
	if n := update(t, pcs, addFinalizer); n != 0 {
		t.Errorf("adding a finalizer cost %v webhook calls, want 0", n)
	}
	if n := update(t, pcs, dropFinalizer); n != 0 {
		t.Errorf("removing a finalizer cost %v webhook calls, want 0", n)
	}
	// What rules read still goes through both webhooks.
	if n := update(t, pcs, func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"team": "a"}) }); n != 2 {
		t.Errorf("a label change cost %v webhook calls, want 2", n)
	}
	if n := update(t, pcs, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, int64(2), "spec", "replicas")
	}); n != 2 {
		t.Errorf("a spec change cost %v webhook calls, want 2", n)
	}

	// A policy that reads the finalizers makes their changes matter.
	apply(t, policy("reads-finalizers", "!has(object.metadata.finalizers) || object.metadata.finalizers.all(f, f != 'forbidden')"))
	waitCondition(t, "compare the finalizers", func(c string) bool { return strings.Contains(c, "metadata.?finalizers") })
	if n := update(t, pcs, addFinalizer); n != 2 {
		t.Errorf("with a policy on finalizers, adding one cost %v webhook calls, want 2", n)
	}

	// A policy that reads the user makes every UPDATE matter: no
	// condition at all.
	apply(t, policy("reads-the-user", "request.userInfo.username != 'nobody'"))
	waitCondition(t, "go away", func(c string) bool { return c == "" })
	if n := update(t, pcs, func(u *unstructured.Unstructured) {
		u.SetAnnotations(nil)
		u.SetOwnerReferences(nil)
		u.SetFinalizers(nil)
	}); n != 2 {
		t.Errorf("without a condition, an UPDATE cost %v webhook calls, want 2", n)
	}
}

// TestOnByDefaultAndRemovable: a serve keeps the condition by default
// (it changes no verdict: the rules skip the same UPDATEs), and one run
// with --skip-unread-updates=false removes the condition an earlier run
// left. Both serves are child processes, one after the other; nothing is
// admitted meanwhile.
func TestOnByDefaultAndRemovable(t *testing.T) {
	on := env.StartReplica(t, "--leader-elect=false", "--audit-interval=0")
	waitCondition(t, "appear", func(c string) bool { return c != "" })
	if err := on.Stop(); err != nil {
		t.Fatal(err)
	}
	env.StartReplica(t, "--leader-elect=false", "--audit-interval=0", "--skip-unread-updates=false")
	waitCondition(t, "be removed by a serve with --skip-unread-updates=false", func(c string) bool { return c == "" })
}

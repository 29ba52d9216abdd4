package updatefilter

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// changingRules is idleRules whose reads and version a test changes.
type changingRules struct {
	idleRules
	version atomic.Uint64
	reads   atomic.Pointer[celrules.Reads]
}

func (r *changingRules) Version() uint64             { return r.version.Load() }
func (r *changingRules) UpdateReads() celrules.Reads { return *r.reads.Load() }

func newRules(idle idleRules, reads celrules.Reads) *changingRules {
	r := &changingRules{idleRules: idle}
	r.reads.Store(&reads)
	return r
}

var (
	adminCondition = admissionregistrationv1.MatchCondition{Name: "admins-own", Expression: "true"}
	trainJobRules  = []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"trainjobs"}},
	}}
)

// configurations are shepherd's two webhook configurations as installed:
// the mutating one with one webhook, the validating one with the rules'
// webhook (carrying an admin's own condition) and the WorkloadPolicy one.
func configurations() []client.Object {
	return []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "defaults.shepherd.dev"},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "default.shepherd.dev", Rules: trainJobRules}},
		},
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "shepherd"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{
				{Name: "validate.shepherd.dev", Rules: trainJobRules, MatchConditions: []admissionregistrationv1.MatchCondition{adminCondition}},
				{Name: api.PolicyWebhookName, Rules: []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"shepherd.dev"}, Resources: []string{"workloadpolicies"}},
				}}},
			},
		},
	}
}

// patches counts the patches the keeper sends.
func newClient(t *testing.T, patches *atomic.Int32, funcs interceptor.Funcs) client.WithWatch {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if funcs.Patch == nil {
		funcs.Patch = func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			patches.Add(1)
			return c.Patch(ctx, obj, patch, opts...)
		}
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(configurations()...).WithInterceptorFuncs(funcs).Build()
}

func conditions(t *testing.T, c client.Client) (mutating, validating, policies []admissionregistrationv1.MatchCondition) {
	t.Helper()
	var m admissionregistrationv1.MutatingWebhookConfiguration
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	if err := c.Get(context.Background(), client.ObjectKey{Name: "defaults.shepherd.dev"}, &m); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "shepherd"}, &v); err != nil {
		t.Fatal(err)
	}
	return m.Webhooks[0].MatchConditions, v.Webhooks[0].MatchConditions, v.Webhooks[1].MatchConditions
}

// Sync writes the UPDATE condition into every webhook of both
// configurations but the WorkloadPolicy one, and the has-work condition
// where a webhook has requests without work, keeping an admin's own
// condition; syncing the same again sends nothing; reads that allow no
// condition remove shepherd's, and only shepherd's.
func TestSyncKeepsShepherdsConditions(t *testing.T) {
	var patches atomic.Int32
	c := newClient(t, &patches, interceptor.Funcs{})
	rules := newRules(idleRules{"false trainer.kubeflow.org trainjobs CREATE": true}, celrules.Reads{})
	k := &Keeper{Client: c, Reader: c, Rules: rules, Mutating: "defaults.shepherd.dev", Validating: "shepherd"}
	ctx := context.Background()

	reads := celrules.Reads{Regions: []string{"metadata.labels", "spec"}}
	expr, _ := reads.UpdateMatchCondition()
	update := admissionregistrationv1.MatchCondition{Name: celrules.UpdateMatchConditionName, Expression: expr}
	work := admissionregistrationv1.MatchCondition{Name: WorkConditionName,
		Expression: "!((request.resource.group == 'trainer.kubeflow.org' && request.resource.resource == 'trainjobs' && request.operation == 'CREATE'))"}
	if err := k.Sync(ctx, reads); err != nil {
		t.Fatal(err)
	}
	m, v, p := conditions(t, c)
	if diff := cmp.Diff([]admissionregistrationv1.MatchCondition{update}, m); diff != "" {
		t.Errorf("mutating webhook (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]admissionregistrationv1.MatchCondition{adminCondition, update, work}, v); diff != "" {
		t.Errorf("validating webhook (-want +got):\n%s", diff)
	}
	if len(p) != 0 {
		t.Errorf("the WorkloadPolicy webhook got conditions: %v", p)
	}
	if n := patches.Load(); n != 2 {
		t.Errorf("%d patches, want one per configuration", n)
	}

	if err := k.Sync(ctx, reads); err != nil {
		t.Fatal(err)
	}
	if n := patches.Load(); n != 2 {
		t.Errorf("syncing unchanged conditions sent %d more patches", n-2)
	}

	if err := k.Sync(ctx, celrules.Reads{Regions: []string{"spec"}, Unconditional: "V-1 reads request.userInfo"}); err != nil {
		t.Fatal(err)
	}
	m, v, _ = conditions(t, c)
	if len(m) != 0 {
		t.Errorf("mutating webhook keeps %v, want shepherd's condition removed", m)
	}
	if diff := cmp.Diff([]admissionregistrationv1.MatchCondition{adminCondition, work}, v); diff != "" {
		t.Errorf("validating webhook after the condition was removed (-want +got):\n%s", diff)
	}
}

// A configuration not installed (yet) is nothing to keep; only the
// configurations named are read; a failed read or patch is an error naming
// the configuration.
func TestSyncErrors(t *testing.T) {
	ctx := context.Background()
	reads := celrules.Reads{Regions: []string{"spec"}}
	var patches atomic.Int32
	c := newClient(t, &patches, interceptor.Funcs{})
	k := &Keeper{Client: c, Reader: c, Rules: newRules(nil, reads), Mutating: "not-installed", Validating: "also-not-installed"}
	if err := k.Sync(ctx, reads); err != nil || patches.Load() != 0 {
		t.Errorf("configurations not installed: err %v, %d patches; want neither", err, patches.Load())
	}
	var read []string
	recording := newClient(t, &patches, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		read = append(read, key.Name)
		return c.Get(ctx, key, obj, opts...)
	}})
	k = &Keeper{Client: recording, Reader: recording, Rules: newRules(nil, reads), Validating: "shepherd"}
	if err := k.Sync(ctx, reads); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"shepherd"}, read); diff != "" {
		t.Errorf("configurations read (-want +got):\n%s", diff)
	}
	c = recording
	if m, v, _ := conditions(t, c); len(m) != 0 || len(v) != 2 {
		t.Errorf("only the validating configuration named: mutating %v, validating %v", m, v)
	}

	boom := errors.New("etcd is down")
	failingRead := newClient(t, &patches, interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return boom
	}})
	k = &Keeper{Client: failingRead, Reader: failingRead, Rules: newRules(nil, reads), Mutating: "defaults.shepherd.dev"}
	if err := k.Sync(ctx, reads); !errors.Is(err, boom) || !strings.Contains(err.Error(), "reading webhook configuration defaults.shepherd.dev") {
		t.Errorf("a failed read: %v", err)
	}

	failingPatch := newClient(t, &patches, interceptor.Funcs{Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
		return boom
	}})
	k = &Keeper{Client: failingPatch, Reader: failingPatch, Rules: newRules(nil, reads), Mutating: "defaults.shepherd.dev", Validating: "shepherd"}
	err := k.Sync(ctx, reads)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "patching the matchConditions of webhook configuration defaults.shepherd.dev") {
		t.Errorf("a failed patch: %v", err)
	}
}

// Disabled asks for every UPDATE and has work everywhere: syncing it
// removes both of shepherd's conditions an earlier run left.
func TestDisabledRemovesTheConditions(t *testing.T) {
	var patches atomic.Int32
	c := newClient(t, &patches, interceptor.Funcs{})
	ctx := context.Background()
	k := &Keeper{Client: c, Reader: c, Rules: newRules(idleRules{"true trainer.kubeflow.org trainjobs UPDATE": true}, celrules.Reads{}),
		Mutating: "defaults.shepherd.dev", Validating: "shepherd"}
	if err := k.Sync(ctx, celrules.Reads{Regions: []string{"spec"}}); err != nil {
		t.Fatal(err)
	}
	if m, _, _ := conditions(t, c); len(m) != 2 {
		t.Fatalf("mutating webhook %v, want both of shepherd's conditions", m)
	}
	k.Rules = Disabled
	if err := k.Sync(ctx, Disabled.UpdateReads()); err != nil {
		t.Fatal(err)
	}
	m, v, _ := conditions(t, c)
	if len(m) != 0 {
		t.Errorf("mutating webhook keeps %v", m)
	}
	if diff := cmp.Diff([]admissionregistrationv1.MatchCondition{adminCondition}, v); diff != "" {
		t.Errorf("validating webhook (-want +got):\n%s", diff)
	}
	if !k.NeedLeaderElection() {
		t.Error("the keeper runs on every replica: two writers of the configurations")
	}
}

// Start syncs at once, again whenever the rule set's version changes (and
// only then), and retries a sync that failed at the next tick; it returns
// when ctx ends.
func TestStartFollowsTheRuleSet(t *testing.T) {
	var patches atomic.Int32
	var failReads, reads atomic.Int32
	failReads.Store(1) // the first read fails
	c := newClient(t, &patches, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		reads.Add(1)
		if failReads.Add(-1) >= 0 {
			return errors.New("transient")
		}
		return c.Get(ctx, key, obj, opts...)
	}})
	rules := newRules(nil, celrules.Reads{Regions: []string{"spec"}})
	k := &Keeper{Client: c, Reader: c, Rules: rules, Mutating: "defaults.shepherd.dev", Interval: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Start(ctx) }()

	want := func(expr string) func() (bool, string) {
		return func() (bool, string) {
			var m admissionregistrationv1.MutatingWebhookConfiguration
			if err := c.Get(context.Background(), client.ObjectKey{Name: "defaults.shepherd.dev"}, &m); err != nil {
				return false, err.Error()
			}
			got := ""
			for _, mc := range m.Webhooks[0].MatchConditions {
				if mc.Name == celrules.UpdateMatchConditionName {
					got = mc.Expression
				}
			}
			return got == expr, "condition " + got
		}
	}
	first, _ := celrules.Reads{Regions: []string{"spec"}}.UpdateMatchCondition()
	testkit.Eventually(t, 10*time.Second, "the first condition, after a failed read", want(first))

	changed := celrules.Reads{Regions: []string{"spec", "status"}}
	rules.reads.Store(&changed)
	rules.version.Add(1)
	second, _ := changed.UpdateMatchCondition()
	testkit.Eventually(t, 10*time.Second, "the condition of the new rule set", want(second))

	// The rule set unchanged, the keeper reads nothing more for ten ticks.
	// (The test's own reads go through the same client: take them out.)
	time.Sleep(2 * k.Interval)
	before := reads.Load()
	time.Sleep(10 * k.Interval)
	if n := reads.Load() - before; n != 0 {
		t.Errorf("%d reads of the configuration while the rule set did not change", n)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return after its context ended")
	}
}

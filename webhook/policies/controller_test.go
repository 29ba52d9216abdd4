package policies

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
)

func newClient(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	s := runtime.NewScheme()
	if err := shepherdv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&shepherdv1alpha1.WorkloadPolicy{}).WithObjects(objs...).Build()
}

func request(name string) ctrl.Request {
	return ctrl.Request{NamespacedName: types.NamespacedName{Name: name}}
}

// TestReconcileWritesTheOutcome: the compile controller and the status
// controller together write each policy's outcome to its status, as the
// hot-reload tests of test/webhook saw through an apiserver: Ready True
// when it compiled, False/CompileError with the errors when not, and
// False/TooManyPolicies (retried a minute later) when over the cap.
func TestReconcileWritesTheOutcome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		fail        bool
		max         int
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantErrors  int
		wantRequeue time.Duration
	}{
		{name: "compiles", wantStatus: metav1.ConditionTrue, wantReason: "Compiled"},
		{name: "fails to compile", fail: true, wantStatus: metav1.ConditionFalse, wantReason: "CompileError", wantErrors: 1},
		// "other" compiled first fills a cap of one.
		{name: "over the cap", max: 1, wantStatus: metav1.ConditionFalse, wantReason: "TooManyPolicies", wantRequeue: time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, named("p", 3), named("other", 1))
			s := &fakeSink{holding: map[string]int64{}}
			r := &Reconciler{Client: c, Sink: s, Clock: clocktesting.NewFakePassiveClock(t1.Time), MaxPolicies: tc.max}
			ctx := context.Background()
			if _, err := r.Reconcile(ctx, request("other")); err != nil {
				t.Fatal(err)
			}
			s.fail = tc.fail
			res, err := r.Reconcile(ctx, request("p"))
			if err != nil || res.RequeueAfter != tc.wantRequeue {
				t.Errorf("Reconcile = %+v, %v; want RequeueAfter %v", res, err, tc.wantRequeue)
			}
			if _, err := r.writeStatus(ctx, request("p")); err != nil {
				t.Fatal(err)
			}
			got := &shepherdv1alpha1.WorkloadPolicy{}
			if err := c.Get(ctx, client.ObjectKey{Name: "p"}, got); err != nil {
				t.Fatal(err)
			}
			if len(got.Status.Conditions) != 1 {
				t.Fatalf("conditions %+v; want Ready alone", got.Status.Conditions)
			}
			cond := got.Status.Conditions[0]
			if cond.Type != "Ready" || cond.Status != tc.wantStatus || cond.Reason != tc.wantReason || cond.ObservedGeneration != 3 ||
				!cond.LastTransitionTime.Equal(&t1) || got.Status.ObservedGeneration != 3 || len(got.Status.CompileErrors) != tc.wantErrors {
				t.Errorf("status %+v; want Ready %s/%s at generation 3 and time %v, %d compile errors", got.Status, tc.wantStatus, tc.wantReason, t1, tc.wantErrors)
			}
		})
	}
}

// TestWriteStatusLeavesANewerGeneration: a status write queued for a
// generation that has since changed writes nothing (the new generation's
// compile queues its own), so a stale outcome never lands on a new spec.
func TestWriteStatusLeavesANewerGeneration(t *testing.T) {
	t.Parallel()
	c := newClient(t, named("p", 1))
	r := &Reconciler{Client: c, Sink: &fakeSink{holding: map[string]int64{}}, Clock: clocktesting.NewFakePassiveClock(t1.Time)}
	ctx := context.Background()
	if _, err := r.Reconcile(ctx, request("p")); err != nil {
		t.Fatal(err)
	}
	p := &shepherdv1alpha1.WorkloadPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Name: "p"}, p); err != nil {
		t.Fatal(err)
	}
	p.Generation = 2
	if err := c.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := r.writeStatus(ctx, request("p")); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "p"}, p); err != nil {
		t.Fatal(err)
	}
	if p.Generation != 2 {
		t.Fatalf("the fake client kept generation %d; the test needs 2", p.Generation)
	}
	if diff := cmp.Diff(shepherdv1alpha1.WorkloadPolicyStatus{}, p.Status); diff != "" {
		t.Errorf("status written for an older generation (-want +got):\n%s", diff)
	}
	// A policy deleted before its write: nothing to do, no error.
	if _, err := r.writeStatus(ctx, request("gone")); err != nil {
		t.Errorf("writeStatus of a deleted policy: %v", err)
	}
}

func TestReconcileDeletedPolicyIsDropped(t *testing.T) {
	t.Parallel()
	now := metav1.NewTime(t1.Time)
	deleting := named("deleting", 1)
	deleting.DeletionTimestamp, deleting.Finalizers = &now, []string{"example.com/hold"}
	c := newClient(t, named("gone", 1), deleting)
	s := &fakeSink{holding: map[string]int64{}}
	r := &Reconciler{Client: c, Sink: s}
	ctx := context.Background()
	for _, name := range []string{"gone", "deleting"} {
		r.load(named(name, 1))
	}
	if err := c.Delete(ctx, named("gone", 1)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gone", "deleting"} {
		if _, err := r.Reconcile(ctx, request(name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if len(s.holding) != 0 || len(r.applied) != 0 || r.compiled != 0 {
		t.Errorf("after deletion: sink holds %v, applied %v, compiled %d; want nothing", s.holding, r.applied, r.compiled)
	}
}

// TestReadyChecker: a replica is not ready until every stored policy's
// current generation was compiled, saying which are pending; once ready it
// stays so while new policies compile.
func TestReadyChecker(t *testing.T) {
	t.Parallel()
	c := newClient(t, named("a", 1), named("b", 1))
	r := &Reconciler{Client: c, Sink: &fakeSink{holding: map[string]int64{}}}
	ctx := context.Background()
	check := func() string {
		return errorText(r.ReadyChecker(httptest.NewRequest("GET", "/readyz", nil)))
	}
	if got, want := check(), "WorkloadPolicies not compiled yet: [a b]"; got != want {
		t.Errorf("before any compile: %q, want %q", got, want)
	}
	r.load(named("a", 1))
	// A compiled, but of an older generation than stored: still pending.
	r.load(named("b", 0))
	if got, want := check(), "WorkloadPolicies not compiled yet: [b]"; got != want {
		t.Errorf("b of an old generation: %q, want %q", got, want)
	}
	s := r.Sink.(*fakeSink)
	s.fail = true // a policy that fails to compile has its outcome: not pending
	r.load(named("b", 1))
	if got := check(); got != "" {
		t.Errorf("every policy compiled: %q, want ready", got)
	}
	if err := c.Create(ctx, named("c", 1)); err != nil {
		t.Fatal(err)
	}
	if got := check(); got != "" {
		t.Errorf("a new policy after ready: %q, want still ready", got)
	}
}

func TestReadyCheckerNamesTenOfMany(t *testing.T) {
	t.Parallel()
	var objs []client.Object
	for i := range 12 {
		objs = append(objs, named(fmt.Sprintf("p%02d", i), 1))
	}
	r := &Reconciler{Client: newClient(t, objs...)}
	want := "12 WorkloadPolicies not compiled yet, among them [p00 p01 p02 p03 p04 p05 p06 p07 p08 p09]"
	if got := errorText(r.ReadyChecker(httptest.NewRequest("GET", "/readyz", nil))); got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// schemaSink is the chain's schema side: it records the schemas set.
type schemaSink struct {
	schemas  *celrules.Schemas
	set      int
	err      error
	inactive map[string]string
}

func (s *schemaSink) SetSchemas(x *celrules.Schemas) error {
	if s.err != nil {
		return s.err
	}
	s.set++
	s.schemas = x
	return nil
}
func (s *schemaSink) Schemas() *celrules.Schemas       { return s.schemas }
func (s *schemaSink) InactiveRules() map[string]string { return s.inactive }

// TestApplySchemas: the cluster's CRDs become the chain's schemas unless
// it already type-checks against exactly them; every policy is then queued
// to compile again (its status to be rewritten), and the schemas readiness
// check passes from then on. test/crdupgrade covered it with real CRDs.
func TestApplySchemas(t *testing.T) {
	t.Parallel()
	crds := []*apiextensionsv1.CustomResourceDefinition{{ObjectMeta: metav1.ObjectMeta{Name: "trainjobs.trainer.kubeflow.org", UID: "u", Generation: 2}}}
	served, err := celrules.NewSchemas(crds, ServedSchemasSource)
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := celrules.NewSchemas(crds, "pinned upstream CRDs")
	if err != nil {
		t.Fatal(err)
	}
	older, err := celrules.NewSchemas([]*apiextensionsv1.CustomResourceDefinition{{ObjectMeta: metav1.ObjectMeta{Name: "trainjobs.trainer.kubeflow.org", UID: "u", Generation: 1}}}, ServedSchemasSource)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		sink    *schemaSink
		wantSet int
		wantErr string
	}{
		{"the same served CRDs: not set again", &schemaSink{schemas: served}, 0, ""},
		// Same CRDs, but read as pinned: not the cluster's to report.
		{"the pinned schemas", &schemaSink{schemas: pinned}, 1, ""},
		{"a CRD upgraded since", &schemaSink{schemas: older}, 1, ""},
		{"none yet", &schemaSink{}, 1, ""},
		{"the chain refuses them", &schemaSink{err: errors.New("boom")}, 0, "type-checking the rules against the cluster's CRDs: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			recheck := make(chan event.GenericEvent)
			r := &Reconciler{Client: newClient(t, named("a", 1), named("b", 1)), Sink: &fakeSink{holding: map[string]int64{}}, recheck: recheck}
			r.load(named("a", 1))
			if r.SchemasReadyChecker(nil) == nil {
				t.Error("schemas ready before any were applied")
			}
			s, err := r.ApplySchemas(context.Background(), tc.sink, crds)
			if got := errorText(err); got != tc.wantErr || tc.sink.set != tc.wantSet {
				t.Fatalf("ApplySchemas: %q, SetSchemas called %d times; want %q, %d", got, tc.sink.set, tc.wantErr, tc.wantSet)
			}
			if err != nil {
				if r.SchemasReadyChecker(nil) == nil {
					t.Error("schemas ready after they failed to apply")
				}
				return
			}
			if s.Source != ServedSchemasSource || !s.Of(crds) || tc.sink.schemas != s {
				t.Errorf("schemas %q (of the CRDs: %v; the sink's: %v); want the served ones", s.Source, s.Of(crds), tc.sink.schemas == s)
			}
			if err := r.SchemasReadyChecker(nil); err != nil {
				t.Errorf("SchemasReadyChecker after applying: %v", err)
			}
			var queued []string
			for range 2 {
				queued = append(queued, (<-recheck).Object.GetName())
			}
			if diff := cmp.Diff([]string{"a", "b"}, queued); diff != "" {
				t.Errorf("policies queued again (-want +got):\n%s", diff)
			}
			// The compiled generation is forgotten: it compiles again.
			if len(r.applied) != 0 || r.compiled != 0 {
				t.Errorf("applied %v, compiled %d after new schemas; want none", r.applied, r.compiled)
			}
		})
	}
}

// TestDesiredStatusTruncatesTheMessage: with many errors the condition's
// message stays within its bound while compileErrors keeps each in full.
func TestDesiredStatusTruncatesTheMessage(t *testing.T) {
	t.Parallel()
	var errs field.ErrorList
	for i := range 100 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "validations").Index(i).Child("expression"), strings.Repeat("x", 50), "undefined field 'nope'"))
	}
	st := DesiredStatus(policy(1), errs, t1)
	msg := st.Conditions[0].Message
	if len(msg) != maxConditionMessage || !strings.HasSuffix(msg, "...") || !strings.HasPrefix(msg, "the policy is not applied: 100 expression(s) failed to compile: ") {
		t.Errorf("message of %d bytes, %q...%q; want %d bytes ending in ...", len(msg), msg[:60], msg[len(msg)-10:], maxConditionMessage)
	}
	if len(st.CompileErrors) != 100 || st.CompileErrors[99].FieldPath != "spec.validations[99].expression" {
		t.Errorf("%d compile errors, the last %+v; want all 100", len(st.CompileErrors), st.CompileErrors[len(st.CompileErrors)-1])
	}
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

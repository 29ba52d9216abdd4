package exceptions

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := shepherdv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// sink records the Sets the reconciler hands the chain.
type sink struct{ sets []*Set }

func (s *sink) SetExceptions(set *Set) { s.sets = append(s.sets, set) }

// TestReconcilerLoadsStoredExceptions: the PolicyException controller
// hands the chain every stored exception that parses, warns with an Event
// on one naming a rule that is neither built in nor a stored
// WorkloadPolicy or having a bad selector, counts those in force, and
// comes back just after the next expiry. test/webhook's exception test
// saw only the end of this (the exemption stopping at its expiry).
func TestReconcilerLoadsStoredExceptions(t *testing.T) {
	bad := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}
	objs := []client.Object{
		&shepherdv1alpha1.WorkloadPolicy{ObjectMeta: metav1.ObjectMeta{Name: "max-day"}},
		newException("builtin", []string{"V-TJ-1"}, nil, nil, at(10*time.Minute)),
		newException("policy", []string{"max-day"}, nil, nil, at(time.Hour)),
		newException("typo", []string{"V-TJ-1", "max-dya"}, nil, nil, nil),
		newException("broken", []string{"V-TJ-1"}, nil, bad, at(time.Minute)),
		newException("expired", []string{"V-TJ-1"}, nil, nil, at(-time.Minute)),
	}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).Build()
	rec := events.NewFakeRecorder(10)
	s := &sink{}
	r := &Reconciler{client: c, sink: s, clock: clocktesting.NewFakePassiveClock(t0), events: rec, builtin: []string{"V-TJ-1", "V-JS-1"}}

	res, err := r.Reconcile(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	// The broken exception's expiry is not the next one: it is not loaded.
	if want := 10*time.Minute + time.Millisecond; res.RequeueAfter != want {
		t.Errorf("RequeueAfter = %v, want %v (just after the next expiry)", res.RequeueAfter, want)
	}
	if len(s.sets) != 1 {
		t.Fatalf("%d sets handed to the sink, want 1", len(s.sets))
	}
	var loaded []string
	for _, e := range s.sets[0].items {
		loaded = append(loaded, e.name)
	}
	if diff := cmp.Diff([]string{"builtin", "expired", "policy", "typo"}, loaded); diff != "" {
		t.Errorf("exceptions loaded (-want +got):\n%s", diff)
	}
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{
		`Warning InvalidException spec.objectSelector.matchExpressions[0].operator: Invalid value: "Near": not a valid selector operator`,
		`Warning InvalidException spec.rules[1]: Not found: "max-dya"; an unknown rule exempts nothing, a bad selector leaves the whole exception out`,
	}
	if len(got) != len(want) {
		t.Fatalf("events %q; want %d", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("event %d = %q; want it to start %q", i, got[i], want[i])
		}
	}
	m := &dto.Metric{}
	if err := inForce.Write(m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetGauge().GetValue(); got != 3 {
		t.Errorf("shepherd_policy_exceptions = %v, want 3 (builtin, policy, typo: not expired, parsed)", got)
	}
}

func TestKnownRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, rule string
		get        error // the lookup of the WorkloadPolicy fails so
		want       bool
	}{
		{"a built-in rule", "built in", nil, true},
		{"a stored WorkloadPolicy", "max-day", nil, true},
		{"neither", "nope", nil, false},
		// Unsure (the cache not readable) is no reason for a warning.
		{"the lookup fails", "nope", errors.New("cache not synced"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(&shepherdv1alpha1.WorkloadPolicy{ObjectMeta: metav1.ObjectMeta{Name: "max-day"}})
			if tc.get != nil {
				b = b.WithInterceptorFuncs(interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
					return tc.get
				}})
			}
			r := &Reconciler{client: b.Build(), builtin: []string{"built in"}}
			if got := r.known(context.Background(), tc.rule); got != tc.want {
				t.Errorf("known(%s) = %v, want %v", tc.rule, got, tc.want)
			}
		})
	}
}

// installedVAP is a built-in rule's policy as deploy/native installs it.
func installedVAP(name, rule string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"keep": "me"},
			Labels: map[string]string{"app.kubernetes.io/managed-by": api.FieldManager, celrules.LabelRule: rule}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			Variables:   []admissionregistrationv1.Variable{{Name: "v", Expression: "1"}},
			Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.x > variables.v", Message: "m"}},
		},
	}
}

// TestNativeReconcilerRewritesAndRestores: in the native mode the
// installed policies of the built-in rules an exception names are
// rewritten in the cluster while it is in force, others (another rule, a
// WorkloadPolicy's export) are left alone, the reconciler comes back just
// after the expiry, and then restores each one as installed. test/native
// covered this end to end.
func TestNativeReconcilerRewritesAndRestores(t *testing.T) {
	t.Parallel()
	named := installedVAP("shepherd-v-pcs-4", "V-PCS-4")
	other := installedVAP("shepherd-v-pcs-7", "V-PCS-7")
	export := installedVAP("shepherd-policy-max-day", "max-day")
	mp := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "shepherd-d-pcs-1",
			Labels: map[string]string{"app.kubernetes.io/managed-by": api.FieldManager, celrules.LabelRule: "D-PCS-1"}},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{Mutations: []admissionregistrationv1.Mutation{{
			PatchType: admissionregistrationv1.PatchTypeJSONPatch,
			JSONPatch: &admissionregistrationv1.JSONPatch{Expression: "[JSONPatch{op: 'add', path: '/x', value: 1}]"},
		}}},
	}
	ex := newException("legacy", []string{"V-PCS-4", "D-PCS-1", "max-day"}, nil,
		&metav1.LabelSelector{MatchLabels: map[string]string{"legacy": "true"}}, at(2*time.Minute))
	originals := []client.Object{named.DeepCopy(), other.DeepCopy(), export.DeepCopy(), mp.DeepCopy()}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(named, other, export, mp, ex).Build()
	clk := clocktesting.NewFakePassiveClock(t0)
	r := &NativeReconciler{client: c, reader: c, clock: clk}
	ctx := context.Background()

	res, err := r.Reconcile(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2*time.Minute + time.Second; res.RequeueAfter != want {
		t.Errorf("RequeueAfter = %v, want %v (after the expiry, before the resync)", res.RequeueAfter, want)
	}
	set, _ := NewSet([]*shepherdv1alpha1.PolicyException{ex})
	wantVAP := originals[0].(*admissionregistrationv1.ValidatingAdmissionPolicy).DeepCopy()
	set.ExemptVAP("V-PCS-4", wantVAP, t0)
	wantMAP := originals[3].(*admissionregistrationv1.MutatingAdmissionPolicy).DeepCopy()
	if _, err := set.ExemptMAP("D-PCS-1", wantMAP, t0); err != nil {
		t.Fatal(err)
	}
	check := func(when string, want []client.Object) {
		t.Helper()
		for _, w := range want {
			got := w.DeepCopyObject().(client.Object)
			if err := c.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
				t.Fatal(err)
			}
			var diff string
			switch g := got.(type) {
			case *admissionregistrationv1.ValidatingAdmissionPolicy:
				diff = cmp.Diff(w.(*admissionregistrationv1.ValidatingAdmissionPolicy).Spec, g.Spec)
			case *admissionregistrationv1.MutatingAdmissionPolicy:
				diff = cmp.Diff(w.(*admissionregistrationv1.MutatingAdmissionPolicy).Spec, g.Spec)
			}
			if d := cmp.Diff(w.GetAnnotations(), got.GetAnnotations()); d != "" {
				diff += d
			}
			if diff != "" {
				t.Errorf("%s: %s (-want +got):\n%s", when, w.GetName(), diff)
			}
		}
	}
	if wantVAP.Annotations[AnnotationExceptions] != "legacy" || wantVAP.Annotations["keep"] != "me" {
		t.Fatalf("ExemptVAP did not annotate: %v", wantVAP.Annotations)
	}
	check("in force", []client.Object{wantVAP, originals[1], originals[2], wantMAP})

	// A second pass while in force finds nothing to patch (every resync
	// would otherwise write the policies).
	noPatch := &NativeReconciler{client: interceptor.NewClient(c, interceptor.Funcs{
		Patch: func(_ context.Context, _ client.WithWatch, obj client.Object, _ client.Patch, _ ...client.PatchOption) error {
			return errors.New("patched " + obj.GetName() + ", which needs no patch")
		}}), reader: c, clock: clk}
	if _, err := noPatch.Reconcile(ctx, key); err != nil {
		t.Errorf("second pass: %v", err)
	}

	clk.SetTime(t0.Add(2 * time.Minute))
	if _, err := r.Reconcile(ctx, key); err != nil {
		t.Fatal(err)
	}
	check("after the expiry", originals)
}

// TestNativeReconcilerPatchErrors: a policy changed between its read and
// its patch (a conflict) is left to a pass a second later, not an error;
// any other failure is an error naming the policy.
func TestNativeReconcilerPatchErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		err     error
		want    time.Duration
		wantErr string
	}{
		{"conflict", apierrors.NewConflict(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}, "shepherd-v-pcs-4", errors.New("changed")), time.Second, ""},
		{"forbidden", errors.New("forbidden"), 0, "patching *v1.ValidatingAdmissionPolicy shepherd-v-pcs-4 with the exceptions: forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := fake.NewClientBuilder().WithScheme(testScheme(t)).
				WithObjects(installedVAP("shepherd-v-pcs-4", "V-PCS-4"), newException("x", []string{"V-PCS-4"}, nil, nil, nil)).
				WithInterceptorFuncs(interceptor.Funcs{Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
					return tc.err
				}}).Build()
			r := &NativeReconciler{client: c, reader: c, clock: clocktesting.NewFakePassiveClock(t0)}
			res, err := r.Reconcile(context.Background(), key)
			if got := errorText(err); got != tc.wantErr || res.RequeueAfter != tc.want {
				t.Errorf("Reconcile = %v, %q; want %v, %q", res.RequeueAfter, got, tc.want, tc.wantErr)
			}
		})
	}
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

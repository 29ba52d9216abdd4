package background

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	testclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/reports"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

// auditChain is the admission chain as the Auditor sees it: fakeChain's
// verdicts (the only rules are R1 and R2), a rule-set version the test
// sets, and the rules it lists.
type auditChain struct {
	mu sync.Mutex
	fakeChain
	version atomic.Uint64
	rules   []celrules.RuleInfo
	// during, if set, runs after every verdict: a rule set changing
	// under a pass.
	during func()
}

func (c *auditChain) Validate(ctx context.Context, req *webhook.Request) *webhook.Verdict {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.validate(ctx, req)
	if c.during != nil {
		c.during()
	}
	return v
}

func (c *auditChain) RuleSetVersion() uint64     { return c.version.Load() }
func (c *auditChain) Rules() []celrules.RuleInfo { return c.rules }

func (c *auditChain) judged() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// termManager is the term's manager as a pass uses it: its client only.
type termManager struct {
	manager.Manager
	c client.Client
}

func (m termManager) GetClient() client.Client { return m.c }

// storeInformer is an audit informer that has listed what its store
// holds; synced is its handler's registration.
type storeInformer struct {
	toolscache.SharedIndexInformer
	store toolscache.Store
}

func (i storeInformer) GetStore() toolscache.Store { return i.store }

type synced struct {
	toolscache.ResourceEventHandlerRegistration
}

func (synced) HasSynced() bool { return true }

// newTerm is a term of a whose informer of TrainJobs holds us, writing
// statuses with c. The store is returned so a test can change objects.
func newTerm(t *testing.T, a *Auditor, c client.Client, us ...*unstructured.Unstructured) (*term, toolscache.Store) {
	t.Helper()
	store := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	for _, o := range stored(t, us...) {
		if err := store.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	gvk := schema.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"}
	return &term{a: a, mgr: termManager{c: c}, informers: map[schema.GroupVersionKind]*kindInformer{
		gvk: {inf: storeInformer{store: store}, reg: synced{}},
	}}, store
}

// policyClient is a cluster holding ps, with the status subresource.
func policyClient(t *testing.T, ps ...client.Object) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := shepherdv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(ps...).WithStatusSubresource(&shepherdv1alpha1.WorkloadPolicy{}).Build()
}

// recordingSink is a ReportSink that keeps what each Sync was given.
type recordingSink struct {
	mu    sync.Mutex
	syncs [][]reports.Finding
}

func (s *recordingSink) Sync(_ context.Context, fs []reports.Finding) (reports.Counts, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncs = append(s.syncs, fs)
	return reports.Counts{}, nil
}

// auditFigures is what a test checks of a policy's audit status.
type auditFigures struct {
	Violations        string // "" when unset
	Samples           []string
	AuditedGeneration int64
	LastAudit         string // "" when unset
}

func figures(t *testing.T, c client.Client, name string) auditFigures {
	t.Helper()
	p := &shepherdv1alpha1.WorkloadPolicy{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, p); err != nil {
		t.Fatal(err)
	}
	f := auditFigures{AuditedGeneration: p.Status.AuditedGeneration}
	if p.Status.Violations != nil {
		f.Violations = fmt.Sprint(*p.Status.Violations)
	}
	for _, s := range p.Status.ViolationSamples {
		f.Samples = append(f.Samples, fmt.Sprintf("%s %s/%s %s: %s", s.Kind, s.Namespace, s.Name, s.Field, s.Message))
	}
	if p.Status.LastAuditTime != nil {
		f.LastAudit = p.Status.LastAuditTime.UTC().Format(time.RFC3339)
	}
	return f
}

// gauge is shepherd_audit_violations as exported now: "rule kind" to
// value.
func gauge(t *testing.T) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 100)
	violationsGauge.Collect(ch)
	close(ch)
	out := map[string]float64{}
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		l := map[string]string{}
		for _, p := range d.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		out[l["rule"]+" "+l["kind"]] = d.GetGauge().GetValue()
	}
	return out
}

// TestTermPassWritesWhatChanged follows one Auditor through the passes of
// two terms: what each pass writes to the policies' status, the audit
// records, the gauge and the reports, and what it leaves alone.
// test/audit covers the same against a real apiserver (TestStoredObjectsAreAudited,
// TestAuditWritesOpenReports). Not parallel: the gauge is global.
func TestTermPassWritesWhatChanged(t *testing.T) {
	clk := testclock.NewFakeClock(t0)
	chain := &auditChain{rules: []celrules.RuleInfo{
		{ID: "R1", Source: celrules.SourcePolicy},
		{ID: "quiet", Source: celrules.SourcePolicy},
		{ID: "R2", Source: celrules.SourceBuiltin},
	}}
	chain.version.Store(1)
	r1 := &shepherdv1alpha1.WorkloadPolicy{ObjectMeta: metav1.ObjectMeta{Name: "R1", Generation: 3}}
	// The chain enforces generation 2 (the Ready condition's): that is
	// the generation audited, not the newest.
	r1.Status.Conditions = []metav1.Condition{{Type: api.ConditionPolicyReady, Status: metav1.ConditionTrue, Reason: "Compiled", ObservedGeneration: 2, LastTransitionTime: metav1.NewTime(t0)}}
	quiet := &shepherdv1alpha1.WorkloadPolicy{ObjectMeta: metav1.ObjectMeta{Name: "quiet", Generation: 1}}
	// Audited before, no longer enforced (it stopped compiling): cleared.
	off := &shepherdv1alpha1.WorkloadPolicy{ObjectMeta: metav1.ObjectMeta{Name: "off", Generation: 1}}
	off.Status = shepherdv1alpha1.WorkloadPolicyStatus{Violations: ptr.To[int32](3), AuditedGeneration: 1, LastAuditTime: &metav1.Time{Time: t0.Add(-time.Hour)}}
	c := policyClient(t, r1, quiet, off)
	rec := audit.NewRecorder(100, nil, clk)
	sink := &recordingSink{}
	a := New(Options{Chain: chain, Recorder: rec, Clock: clk, Reports: sink, CPUShare: 1})
	bad := obj("ns", "a", 1, map[string][]string{"R1": {"spec.x"}})
	tm, store := newTerm(t, a, c, bad, obj("ns", "b", 1, nil))
	replace := func(u *unstructured.Unstructured) {
		if err := store.Update(stored(t, u)[0]); err != nil {
			t.Fatal(err)
		}
	}
	kind := audit.KindLabel("TrainJob")
	at := func(d time.Duration) string { return t0.Add(d).Format(time.RFC3339) }
	cleared := auditFigures{}
	sample := "TrainJob ns/a spec.x: R1 failed"

	type want struct {
		version string // Results.RuleSetVersion
		judged  int    // objects judged by the chain in the pass
		r1      auditFigures
		quiet   auditFigures
		syncs   int      // Syncs of the reports so far
		found   []string // the last Sync's findings
		records int      // audit records so far
		gauge   map[string]float64
	}
	for _, step := range []struct {
		name     string
		before   func()
		periodic bool
		want     want
	}{
		{"the first pass writes every enforced policy's figures and clears the others'", nil, false, want{
			version: "1.0", judged: 2,
			r1:    auditFigures{Violations: "1", Samples: []string{sample}, AuditedGeneration: 2, LastAudit: at(0)},
			quiet: auditFigures{Violations: "0", AuditedGeneration: 1, LastAudit: at(0)},
			syncs: 1, found: []string{"R1 ns/a spec.x " + at(0)}, records: 1,
			gauge: map[string]float64{"R1 " + kind: 1},
		}},
		{"nothing changed: nothing judged or written", func() { clk.Step(time.Minute) }, false, want{
			version: "1.0", judged: 0,
			r1:    auditFigures{Violations: "1", Samples: []string{sample}, AuditedGeneration: 2, LastAudit: at(0)},
			quiet: auditFigures{Violations: "0", AuditedGeneration: 1, LastAudit: at(0)},
			syncs: 1, found: []string{"R1 ns/a spec.x " + at(0)}, records: 1,
			gauge: map[string]float64{"R1 " + kind: 1},
		}},
		{"a fixed object clears the count, the gauge series and the report", func() {
			clk.Step(time.Minute)
			replace(obj("ns", "a", 2, nil))
		}, false, want{
			version: "1.0", judged: 1,
			r1:    auditFigures{Violations: "0", AuditedGeneration: 2, LastAudit: at(2 * time.Minute)},
			quiet: auditFigures{Violations: "0", AuditedGeneration: 1, LastAudit: at(0)},
			syncs: 2, records: 1, gauge: map[string]float64{},
		}},
		{"the interval's pass judges everything again and moves lastAuditTime on", func() { clk.Step(time.Minute) }, true, want{
			version: "1.1", judged: 2,
			r1:    auditFigures{Violations: "0", AuditedGeneration: 2, LastAudit: at(3 * time.Minute)},
			quiet: auditFigures{Violations: "0", AuditedGeneration: 1, LastAudit: at(3 * time.Minute)},
			syncs: 3, records: 1, gauge: map[string]float64{},
		}},
		{"rules changed under the pass: records and gauge, but no status or report written", func() {
			clk.Step(time.Minute)
			replace(obj("ns", "a", 3, map[string][]string{"R1": {"spec.y"}}))
			chain.version.Store(2)
			chain.during = func() { chain.version.Store(3) }
		}, false, want{
			version: "2.1", judged: 2,
			r1:    auditFigures{Violations: "0", AuditedGeneration: 2, LastAudit: at(3 * time.Minute)},
			quiet: auditFigures{Violations: "0", AuditedGeneration: 1, LastAudit: at(3 * time.Minute)},
			syncs: 3, records: 2, gauge: map[string]float64{"R1 " + kind: 1},
		}},
		{"the next pass writes them", func() {
			clk.Step(time.Minute)
			chain.during = nil
		}, false, want{
			version: "3.1", judged: 2,
			r1:    auditFigures{Violations: "1", Samples: []string{"TrainJob ns/a spec.y: R1 failed"}, AuditedGeneration: 2, LastAudit: at(5 * time.Minute)},
			quiet: auditFigures{Violations: "0", AuditedGeneration: 1, LastAudit: at(3 * time.Minute)},
			// Stamped by the pass at 4 minutes that found it, although
			// that pass handed the reports nothing.
			syncs: 4, found: []string{"R1 ns/a spec.y " + at(4*time.Minute)}, records: 2,
			gauge: map[string]float64{"R1 " + kind: 1},
		}},
		{"a new term hands its first pass to the reports although nothing changed", func() {
			clk.Step(time.Minute)
			a.endTerm()
			tm = &term{a: a, mgr: tm.mgr, informers: tm.informers}
		}, false, want{
			version: "3.1", judged: 0,
			r1:    auditFigures{Violations: "1", Samples: []string{"TrainJob ns/a spec.y: R1 failed"}, AuditedGeneration: 2, LastAudit: at(5 * time.Minute)},
			quiet: auditFigures{Violations: "0", AuditedGeneration: 1, LastAudit: at(3 * time.Minute)},
			syncs: 5, found: []string{"R1 ns/a spec.y " + at(4*time.Minute)}, records: 2,
			gauge: map[string]float64{"R1 " + kind: 1},
		}},
	} {
		if step.before != nil {
			step.before()
		}
		before := chain.judged()
		if _, ok := tm.pass(context.Background(), step.periodic); !ok {
			t.Fatalf("%s: the pass ended", step.name)
		}
		res := a.Results()
		got := want{version: res.RuleSetVersion, judged: chain.judged() - before, r1: figures(t, c, "R1"), quiet: figures(t, c, "quiet"),
			records: len(rec.Ring.Query(audit.Query{})), gauge: gauge(t)}
		sink.mu.Lock()
		got.syncs = len(sink.syncs)
		if len(sink.syncs) > 0 {
			for _, f := range sink.syncs[len(sink.syncs)-1] {
				got.found = append(got.found, fmt.Sprintf("%s %s/%s %s %s", f.Rule, f.Namespace, f.Name, f.Field, f.Found.UTC().Format(time.RFC3339)))
			}
		}
		sink.mu.Unlock()
		if diff := cmp.Diff(step.want, got, cmp.AllowUnexported(want{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step.name, diff)
		}
		if off := figures(t, c, "off"); !cmp.Equal(cleared, off) {
			t.Errorf("%s: the policy no longer enforced has %+v, want its audit figures cleared", step.name, off)
		}
	}
	recs := rec.Ring.Query(audit.Query{})
	if len(recs) == 0 {
		t.Fatal("no audit records")
	}
	if r := recs[0]; r.Operation != api.AuditOperation || r.RequestUID != "uid-ns/a" || r.Rule != "R1" || r.Action != "Deny" || r.User != "" {
		t.Errorf("audit record %+v: want an AUDIT of R1's Deny on a, no user", r)
	}
	a.endTerm()
	if a.Results() != nil || len(gauge(t)) != 0 {
		t.Errorf("after the term: results %v, gauge %v; want neither", a.Results(), gauge(t))
	}
}

// TestTermRun: a term starts with a pass once the debounce is over, runs
// one when the rule set changes, when asked (an informer event) and on
// the interval (a new epoch), and forgets its results when it ends.
func TestTermRun(t *testing.T) {
	clk := testclock.NewFakeClock(t0)
	chain := &auditChain{}
	chain.version.Store(1)
	a := New(Options{Chain: chain, Clock: clk, Debounce: time.Second, Interval: time.Minute, CPUShare: 1})
	tm, _ := newTerm(t, a, policyClient(t), obj("ns", "a", 1, map[string][]string{"R1": {"spec.x"}}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tm.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	// waitPass lets the debounce timer fire and returns the pass's results.
	// The term's two tickers are always waiting; a third waiter is the
	// debounce. Stepping the clock by the debounce only keeps the fake
	// time exact: a pass's Time says when its debounce ended.
	waitPass := func(what string, prev *Results) *Results {
		t.Helper()
		var r *Results
		// Asked every millisecond, not Eventually's interval: each ask may
		// step the fake clock, and a test waits for many passes.
		if err := testkit.Poll(time.Millisecond, 20*time.Second, func() bool {
			if r = a.Results(); r != prev {
				return true
			}
			if clk.Waiters() > 2 {
				clk.Step(time.Second)
			}
			return false
		}); err != nil {
			t.Fatalf("%s: no pass: %v", what, err)
		}
		return r
	}
	var got []string
	r := waitPass("term start", nil)
	got = append(got, r.RuleSetVersion)

	chain.version.Store(2)
	clk.Step(versionPoll)
	r = waitPass("rule set changed", r)
	got = append(got, r.RuleSetVersion)

	a.trigger()
	r = waitPass("asked for", r)
	got = append(got, r.RuleSetVersion)

	clk.SetTime(t0.Add(time.Minute))
	r = waitPass("interval", r)
	got = append(got, r.RuleSetVersion)
	if diff := cmp.Diff([]string{"1.0", "2.0", "2.0", "2.1"}, got); diff != "" {
		t.Errorf("the passes' rule-set versions (-want +got):\n%s", diff)
	}
	if r.Violating != 1 || !r.Time.Equal(t0.Add(time.Minute+time.Second)) {
		t.Errorf("the interval's pass: %d violating at %v; want 1 at the end of its debounce", r.Violating, r.Time)
	}

	cancel()
	<-done
	if a.Results() != nil {
		t.Error("the term ended and its results are still served")
	}
}

func TestOnUpdateAsksForAPassOnlyWhenAVerdictCanChange(t *testing.T) {
	t.Parallel()
	base := obj("ns", "a", 1, nil)
	with := func(change func(u *unstructured.Unstructured)) any {
		u := base.DeepCopy()
		u.SetResourceVersion("2")
		change(u)
		return stored(t, u)[0]
	}
	for _, tc := range []struct {
		name string
		obj  any
		want bool
	}{
		{"a status write", with(func(u *unstructured.Unstructured) { u.Object["status"] = map[string]any{"x": "y"} }), false},
		{"a new generation", with(func(u *unstructured.Unstructured) { u.SetGeneration(2) }), true},
		{"a new label", with(func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"team": "x"}) }), true},
		{"a new annotation", with(func(u *unstructured.Unstructured) {
			u.SetAnnotations(map[string]string{"shepherd.dev/workload-type": "Training"})
		}), true},
		{"being deleted", with(func(u *unstructured.Unstructured) { u.SetDeletionTimestamp(&metav1.Time{Time: t0}) }), true},
		{"not an Object", toolscache.DeletedFinalStateUnknown{Key: "ns/a"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := New(Options{})
			a.onUpdate(stored(t, base)[0], tc.obj)
			if got := len(a.kick) == 1; got != tc.want {
				t.Errorf("asked for a pass: %t, want %t", got, tc.want)
			}
		})
	}
}

func TestWatchAddsEachKindOnceAndAsksForAPass(t *testing.T) {
	t.Parallel()
	tj := schema.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"}
	pcs := schema.GroupVersionKind{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"}
	a := New(Options{})
	a.Watch(tj, pcs)
	a.Watch(tj)
	if diff := cmp.Diff([]schema.GroupVersionKind{tj, pcs}, a.kinds); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	if len(a.kick) != 1 {
		t.Error("Watch did not ask for a pass")
	}
}

func TestServeHTTP(t *testing.T) {
	t.Parallel()
	c := &Core{}
	res, _, _, err := c.Pass(context.Background(), stored(t,
		obj("a", "x", 1, map[string][]string{"R1": {"spec.x"}}),
		obj("b", "y", 1, map[string][]string{"R2": {"spec.y"}}),
	), "1", (&fakeChain{}).validate, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, target string
		results              *Results
		code                 int
		namespaces           []string // of the served results
	}{
		{"before the first pass", http.MethodGet, "/audit/violations", nil, http.StatusServiceUnavailable, nil},
		{"not a GET", http.MethodPost, "/audit/violations", res, http.StatusMethodNotAllowed, nil},
		{"every namespace", http.MethodGet, "/audit/violations", res, http.StatusOK, []string{"a", "b"}},
		{"one namespace", http.MethodGet, "/audit/violations?namespace=b", res, http.StatusOK, []string{"b"}},
		{"a namespace without violations", http.MethodGet, "/audit/violations?namespace=c", res, http.StatusOK, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := New(Options{})
			a.results.Store(tc.results)
			w := httptest.NewRecorder()
			a.ServeHTTP(w, httptest.NewRequest(tc.method, tc.target, nil))
			if w.Code != tc.code {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.code, w.Body)
			}
			if tc.code == http.StatusMethodNotAllowed && w.Header().Get("Allow") != http.MethodGet {
				t.Errorf("Allow: %q, want GET", w.Header().Get("Allow"))
			}
			if tc.code != http.StatusOK {
				return
			}
			var got Results
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			ns := []string{}
			for n := range got.Namespaces {
				ns = append(ns, n)
			}
			slices.Sort(ns)
			if diff := cmp.Diff(tc.namespaces, ns); diff != "" {
				t.Errorf("namespaces (-want +got):\n%s", diff)
			}
			// The filter leaves the rest as it is, and the results it was
			// given too (they are the Auditor's, served again).
			if len(got.Rules) != 2 || got.Objects != 2 || len(res.Namespaces) != 2 {
				t.Errorf("rules %d, objects %d, namespaces left in the Auditor's results %d; want 2, 2, 2", len(got.Rules), got.Objects, len(res.Namespaces))
			}
		})
	}
}

// TestReportFindingsKeepTheFirstFoundTime: a violation keeps the time it
// was first found while it lasts, so an unchanged report is not
// rewritten; once gone it is forgotten, and found again it is new.
func TestReportFindingsKeepTheFirstFoundTime(t *testing.T) {
	t.Parallel()
	ref := ObjectRef{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Namespace: "ns", Name: "a", UID: "uid-a"}
	x := Finding{Rule: "R1", Action: "Deny", Field: "spec.x", Message: "m"}
	y := Finding{Rule: "R1", Action: "Deny", Field: "spec.y", Message: "m"}
	xOther := Finding{Rule: "R1", Action: "Deny", Field: "spec.x", Message: "another message"}
	f := firstSeen{}
	for i, step := range []struct {
		findings []Finding
		want     []string // field, message, minutes after t0 first found
	}{
		{[]Finding{x}, []string{"spec.x m 0"}},
		{[]Finding{x, y}, []string{"spec.x m 0", "spec.y m 1"}},
		{[]Finding{y}, []string{"spec.y m 1"}},
		{[]Finding{x, y}, []string{"spec.x m 3", "spec.y m 1"}},
		{[]Finding{xOther, y}, []string{"spec.x another message 4", "spec.y m 1"}},
		{nil, nil},
	} {
		now := t0.Add(time.Duration(i) * time.Minute)
		res := &Results{Time: now, Namespaces: map[string][]ObjectResult{}}
		if step.findings != nil {
			res.Namespaces["ns"] = []ObjectResult{{ObjectRef: ref, Findings: step.findings}}
		}
		var got []string
		f.stamp(res)
		for _, rf := range f.reportFindings(res) {
			if rf.UID != ref.UID || rf.Kind != ref.Kind || rf.Namespace != "ns" || rf.Name != "a" || rf.Rule != "R1" || rf.Action != "Deny" {
				t.Errorf("pass %d: finding %+v does not name its object and rule", i, rf)
			}
			got = append(got, fmt.Sprintf("%s %s %d", rf.Field, rf.Message, int(rf.Found.Sub(t0)/time.Minute)))
		}
		if diff := cmp.Diff(step.want, got); diff != "" {
			t.Errorf("pass %d (-want +got):\n%s", i, diff)
		}
	}
	if len(f) != 0 {
		t.Errorf("%d stamps kept after every violation is gone", len(f))
	}
}

func TestPaced(t *testing.T) {
	t.Parallel()
	// slow judges an object in a millisecond at least.
	slow := func(calls *atomic.Int32) ValidateFunc {
		return func(context.Context, *webhook.Request) *webhook.Verdict {
			calls.Add(1)
			time.Sleep(time.Millisecond)
			return nil
		}
	}
	t.Run("pauses after each batch for the batch to be its share", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		v := paced(slow(&calls), 0.5)
		start := time.Now()
		for i := 0; i <= pacedBatch; i++ {
			v(context.Background(), &webhook.Request{})
		}
		// A batch of at least pacedBatch ms, as long a pause, then one
		// more call: at half share, at least twice the batch.
		if took, least := time.Since(start), 2*pacedBatch*time.Millisecond; took < least || calls.Load() != pacedBatch+1 {
			t.Errorf("%d calls took %v, want %d calls taking at least %v", calls.Load(), took, pacedBatch+1, least)
		}
	})
	t.Run("a pause ends with the context", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		// At this share the pause after a batch would be hours.
		v := paced(slow(&calls), 1e-6)
		ctx, cancel := context.WithCancel(context.Background())
		for i := 0; i < pacedBatch; i++ {
			v(ctx, &webhook.Request{})
		}
		cancel()
		done := make(chan struct{})
		go func() {
			v(ctx, &webhook.Request{})
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the pause outlived its context")
		}
		if calls.Load() != pacedBatch+1 {
			t.Errorf("%d calls reached validate, want %d", calls.Load(), pacedBatch+1)
		}
	})
}

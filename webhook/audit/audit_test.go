package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/shepherd-k8s/shepherd/webhook"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func rec(i int, ns, rule, user string) Record {
	return Record{Time: t0.Add(time.Duration(i) * time.Minute), Namespace: ns, Rule: rule, User: user, RequestUID: string(rune('a' + i))}
}

func uids(rs []Record) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.RequestUID)
	}
	return b.String()
}

func TestRingKeepsTheNewestRecordsOldestFirst(t *testing.T) {
	r := NewRing(3)
	for i := range 5 {
		r.Add(rec(i, "ns", "R", "u"))
	}
	if got := uids(r.Query(Query{})); got != "cde" {
		t.Errorf("ring holds %q, want cde", got)
	}
	if r.Len() != 3 {
		t.Errorf("Len = %d, want 3", r.Len())
	}
	if got := uids(r.Query(Query{Limit: 2})); got != "de" {
		t.Errorf("limit 2 gives %q, want de", got)
	}
}

func TestQueryFilters(t *testing.T) {
	r := NewRing(10)
	r.Add(rec(0, "a", "V-TJ-1", "alice"))
	r.Add(rec(1, "b", "V-TJ-1", "bob"))
	r.Add(rec(2, "a", "V-PCS-1", "bob"))
	r.Add(rec(3, "a", "V-TJ-1", "bob"))
	for _, tc := range []struct {
		q    Query
		want string
	}{
		{Query{}, "abcd"},
		{Query{Namespace: "a"}, "acd"},
		{Query{Rule: "V-TJ-1"}, "abd"},
		{Query{User: "bob", Namespace: "a"}, "cd"},
		{Query{Since: t0.Add(2 * time.Minute)}, "cd"},
		{Query{Namespace: "none"}, ""},
	} {
		if got := uids(r.Query(tc.q)); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.q, got, tc.want)
		}
	}
}

func TestParseQuery(t *testing.T) {
	now := t0
	q, err := ParseQuery(url.Values{"namespace": {"a"}, "rule": {"R"}, "user": {"u"}, "since": {"15m"}, "limit": {"3"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Query{Namespace: "a", Rule: "R", User: "u", Since: now.Add(-15 * time.Minute), Limit: 3}, q); diff != "" {
		t.Error(diff)
	}
	// Values and ParseQuery round-trip.
	back, err := ParseQuery(q.Values(), now)
	if err != nil || !back.Since.Equal(q.Since) || back.Namespace != "a" || back.Limit != 3 {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	q, err = ParseQuery(url.Values{"since": {"2026-11-22T11:00:00Z"}}, now)
	if err != nil || !q.Since.Equal(t0.Add(-time.Hour)) {
		t.Errorf("RFC 3339 since: %+v, %v", q, err)
	}
	for _, bad := range []url.Values{{"since": {"yesterday"}}, {"since": {"-5m"}}, {"limit": {"x"}}} {
		if _, err := ParseQuery(bad, now); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func TestHandlerServesFilteredJSON(t *testing.T) {
	r := NewRing(10)
	r.Add(rec(0, "a", "V-TJ-1", "alice"))
	r.Add(rec(1, "b", "V-TJ-1", "bob"))
	h := &Handler{Ring: r, Clock: clocktesting.NewFakePassiveClock(t0)}

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/audit?namespace=b", nil))
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("HTTP %d %s", w.Code, w.Body.String())
	}
	var l List
	if err := json.Unmarshal(w.Body.Bytes(), &l); err != nil {
		t.Fatal(err)
	}
	if uids(l.Items) != "b" {
		t.Errorf("items %+v", l.Items)
	}

	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/audit?since=later", nil))
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `invalid since "later"`) {
		t.Errorf("bad since: HTTP %d %s", w.Code, w.Body.String())
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("DELETE", "/audit", nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE: HTTP %d", w.Code)
	}
}

func TestRecorderWritesEverySinkOncePerViolation(t *testing.T) {
	for _, tc := range []struct {
		name          string
		authenticated bool
		by            string // what the notes say of the caller
	}{
		{"authenticated caller", true, ""},
		{"unauthenticated caller", false, " (caller not authenticated)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := &fakeEvents{}
			r := NewRecorder(8, ev, clocktesting.NewFakePassiveClock(t0))
			req := &webhook.Request{
				UID: "u1", Operation: admissionv1.Update,
				Kind:      metav1.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"},
				Namespace: "ns", Name: "tj",
				OldObject:           []byte(`{"metadata":{"uid":"obj-uid"}}`),
				CallerAuthenticated: tc.authenticated,
			}
			v := &webhook.Verdict{Allowed: false, Violations: []webhook.Violation{
				{Rule: "V-TJ-2", Field: "spec.activeDeadlineSeconds", Message: "field is immutable", Action: webhook.ActionDeny},
				{Rule: "team-policy", Message: "noted", Action: webhook.ActionAudit},
			}}
			before := testutil.ToFloat64(verdicts.WithLabelValues("V-TJ-2", "Deny", "TrainJob"))
			got := r.Record(context.Background(), req, v)
			if len(got) != 2 || r.Ring.Len() != 2 {
				t.Fatalf("records %d, ring %d, want 2 and 2", len(got), r.Ring.Len())
			}
			for _, rec := range got {
				if rec.CallerAuthenticated != tc.authenticated {
					t.Errorf("record of %s: CallerAuthenticated %v, want %v", rec.Rule, rec.CallerAuthenticated, tc.authenticated)
				}
			}
			if d := testutil.ToFloat64(verdicts.WithLabelValues("V-TJ-2", "Deny", "TrainJob")) - before; d != 1 {
				t.Errorf("counter moved by %v, want 1", d)
			}
			want := []fakeEvent{
				{ref: corev1.ObjectReference{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Namespace: "ns", Name: "tj", UID: "obj-uid"}, typ: "Warning", reason: "PolicyViolation", action: "Deny",
					note: "V-TJ-2 Deny" + tc.by + " spec.activeDeadlineSeconds: field is immutable"},
				{ref: corev1.ObjectReference{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Namespace: "ns", Name: "tj", UID: "obj-uid"}, typ: "Normal", reason: "PolicyViolation", action: "Audit",
					note: "team-policy Audit" + tc.by + ": noted"},
			}
			if diff := cmp.Diff(want, ev.got, cmp.AllowUnexported(fakeEvent{})); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if r.Record(context.Background(), req, &webhook.Verdict{Allowed: true}) != nil || r.Ring.Len() != 2 {
				t.Error("a verdict without violations was audited")
			}
		})
	}
}

// The "policy verdict" line, logged as JSON by a logger that names the
// request (RequestLogValues, as the webhook handler and the audit sink
// attach it), has every key once, and names the request and the rule.
func TestVerdictLogLineHasEveryKeyOnce(t *testing.T) {
	var buf bytes.Buffer
	log := zap.New(zap.WriteTo(&buf), zap.JSONEncoder())
	req := &webhook.Request{UID: "u1", Operation: admissionv1.Create,
		Kind:      metav1.GroupVersionKind{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"},
		Namespace: "ns", Name: "js"}
	ctx := logf.IntoContext(context.Background(), log.WithValues(RequestLogValues(req)...))
	r := NewRecorder(8, nil, clocktesting.NewFakePassiveClock(t0))
	r.Record(ctx, req, &webhook.Verdict{Violations: []webhook.Violation{{Rule: "V-JS-5", Action: webhook.ActionWarn, Message: "deprecated"}}})

	line := strings.TrimSpace(buf.String())
	if strings.Count(line, "\n") != 0 || line == "" {
		t.Fatalf("want one log line, got %q", line)
	}
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object: %q", line)
	}
	seen := map[string]int{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		seen[tok.(string)]++
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("key %q appears %d times in %s", k, n, line)
		}
	}
	for _, k := range []string{"uid", "kind", "namespace", "name", "operation", "rule", "action", "message"} {
		if seen[k] != 1 {
			t.Errorf("key %q appears %d times, want once, in %s", k, seen[k], line)
		}
	}
}

// The record says whether the caller was authenticated, in /audit's JSON.
func TestRecordCarriesCallerAuthenticatedInJSON(t *testing.T) {
	for _, authenticated := range []bool{true, false} {
		b, err := json.Marshal(Record{CallerAuthenticated: authenticated})
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`"callerAuthenticated":%v`, authenticated)
		if !strings.Contains(string(b), want) {
			t.Errorf("record JSON %s does not hold %s", b, want)
		}
	}
}

// A flood of verdicts in one namespace writes its burst of Events, then
// one a second; the rest are dropped and counted, every record kept, and
// other namespaces keep their own budget.
func TestPolicyViolationEventsAreBoundedPerNamespace(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	ev := &fakeEvents{}
	r := NewRecorder(1000, ev, clk)
	r.EventLimit = NewNamespaceLimiter(1, 5, clk)
	deny := &webhook.Verdict{Violations: []webhook.Violation{{Rule: "V-TJ-1", Message: "m", Action: webhook.ActionDeny}}}
	send := func(ns string, n int) {
		for i := range n {
			r.Record(context.Background(), &webhook.Request{Operation: admissionv1.Create, Namespace: ns, Name: fmt.Sprint("o", i),
				Kind: metav1.GroupVersionKind{Kind: "TrainJob"}}, deny)
		}
	}
	perNS := func() map[string]int {
		n := map[string]int{}
		for _, e := range ev.got {
			n[e.ref.Namespace]++
		}
		return n
	}
	dropped := testutil.ToFloat64(eventsDropped)

	send("flooded", 200)
	send("quiet", 3)
	if diff := cmp.Diff(map[string]int{"flooded": 5, "quiet": 3}, perNS()); diff != "" {
		t.Errorf("Events by namespace after the flood (-want +got):\n%s", diff)
	}
	if d := testutil.ToFloat64(eventsDropped) - dropped; d != 195 {
		t.Errorf("shepherd_policy_violation_events_dropped_total moved by %v, want 195", d)
	}
	if r.Ring.Len() != 203 {
		t.Errorf("ring holds %d records, want all 203", r.Ring.Len())
	}
	clk.SetTime(t0.Add(3 * time.Second))
	send("flooded", 10)
	if got := perNS()["flooded"]; got != 8 {
		t.Errorf("3 s later the flooded namespace has %d Events, want 5 + 3", got)
	}
}

// The limiter's map stays bounded whatever namespaces a client names, and
// idle buckets go first.
func TestNamespaceLimiterStaysBounded(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	l := NewNamespaceLimiter(1, 2, clk)
	for i := range 3 * maxTrackedNamespaces {
		l.Allow(fmt.Sprint("ns-", i))
		if n := l.tracked(); n > maxTrackedNamespaces {
			t.Fatalf("%d buckets after %d namespaces, bound %d", n, i+1, maxTrackedNamespaces)
		}
	}
	// Busy namespaces keep their (empty) buckets while idle ones make room.
	l = NewNamespaceLimiter(1, 2, clk)
	for range 2 {
		l.Allow("busy")
	}
	for i := range maxTrackedNamespaces / 2 {
		l.Allow(fmt.Sprint("ns-", i))
	}
	clk.SetTime(t0.Add(time.Hour)) // every bucket full again: idle
	for range 2 {
		l.Allow("busy")
	}
	// Past the bound once: the idle half is dropped, busy stays.
	for i := range maxTrackedNamespaces/2 + 100 {
		l.Allow(fmt.Sprint("other-", i))
	}
	if n := l.tracked(); n > maxTrackedNamespaces/2+101 {
		t.Errorf("%d buckets after the idle ones were dropped, want at most %d", n, maxTrackedNamespaces/2+101)
	}
	if l.Allow("busy") {
		t.Error("a namespace that spent its burst was allowed again: its bucket was dropped while busy")
	}
	if NewNamespaceLimiter(0, 5, clk) != nil || !(*NamespaceLimiter)(nil).Allow("x") {
		t.Error("qps 0 does not disable the bound")
	}
}

func TestRegardingADeniedCreate(t *testing.T) {
	req := &webhook.Request{Operation: admissionv1.Create, Kind: metav1.GroupVersionKind{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"}, Namespace: "ns", Name: "p"}
	if diff := cmp.Diff(&corev1.ObjectReference{APIVersion: "grove.io/v1alpha1", Kind: "PodCliqueSet", Namespace: "ns", Name: "p"}, Regarding(req)); diff != "" {
		t.Error(diff)
	}
	req.Name = "" // generateName
	if diff := cmp.Diff(&corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: "ns"}, Regarding(req)); diff != "" {
		t.Error(diff)
	}
}

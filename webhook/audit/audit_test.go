package audit

import (
	"context"
	"encoding/json"
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
	ev := &fakeEvents{}
	r := NewRecorder(8, ev, clocktesting.NewFakePassiveClock(t0))
	req := &webhook.Request{
		UID: "u1", Operation: admissionv1.Update,
		Kind:      metav1.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"},
		Namespace: "ns", Name: "tj",
		OldObject: []byte(`{"metadata":{"uid":"obj-uid"}}`),
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
	if d := testutil.ToFloat64(verdicts.WithLabelValues("V-TJ-2", "Deny", "TrainJob")) - before; d != 1 {
		t.Errorf("counter moved by %v, want 1", d)
	}
	want := []fakeEvent{
		{ref: corev1.ObjectReference{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Namespace: "ns", Name: "tj", UID: "obj-uid"}, typ: "Warning", reason: "PolicyViolation", action: "Deny",
			note: "V-TJ-2 Deny spec.activeDeadlineSeconds: field is immutable"},
		{ref: corev1.ObjectReference{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Namespace: "ns", Name: "tj", UID: "obj-uid"}, typ: "Normal", reason: "PolicyViolation", action: "Audit",
			note: "team-policy Audit: noted"},
	}
	if diff := cmp.Diff(want, ev.got, cmp.AllowUnexported(fakeEvent{})); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if r.Record(context.Background(), req, &webhook.Verdict{Allowed: true}) != nil || r.Ring.Len() != 2 {
		t.Error("a verdict without violations was audited")
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

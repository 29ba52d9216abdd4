package audit

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/exceptions"
)

var tjKind = metav1.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"}

// A note says the rule, action, caller, dry run, field and message; an
// exempt one the exception and until when; the Events API's bound cuts a
// long one.
func TestEventNote(t *testing.T) {
	expires := time.Date(2027, 1, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		name string
		rec  Record
		want string
	}{
		{"authenticated, with a field", Record{Rule: "V-TJ-1", Action: "Deny", User: "alice", Field: "spec.x", Message: "m", CallerAuthenticated: true},
			"V-TJ-1 Deny by alice spec.x: m"},
		{"no user, not authenticated", Record{Rule: "V-TJ-1", Action: "Warn", Message: "m"},
			"V-TJ-1 Warn (caller not authenticated): m"},
		{"a dry run", Record{Rule: "p", Action: "Audit", User: "bob", DryRun: true, Message: "m", CallerAuthenticated: true},
			"p Audit by bob (dry run): m"},
		{"exempt, expiring", Record{Rule: "V-TJ-1", Action: "Exempt", User: "carol", Field: "spec.x", Message: "m", Exception: "legacy", ExceptionExpires: &expires, CallerAuthenticated: true},
			"V-TJ-1 Exempt by PolicyException legacy (until 2027-01-01T11:00:00Z) by carol spec.x: m"},
		{"exempt, forever, dry run", Record{Rule: "V-TJ-1", Action: "Exempt", Message: "m", Exception: "legacy", DryRun: true, CallerAuthenticated: true},
			"V-TJ-1 Exempt by PolicyException legacy (no expiry) (dry run): m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := eventNote(&tc.rec); got != tc.want {
				t.Errorf("note %q, want %q", got, tc.want)
			}
		})
	}
	long := eventNote(&Record{Rule: "R", Action: "Deny", Message: strings.Repeat("x", 2000), CallerAuthenticated: true})
	if len(long) != 1024 || !strings.HasSuffix(long, "...") || !strings.HasPrefix(long, "R Deny: xxx") {
		t.Errorf("a long note: %d bytes, ending %q", len(long), long[len(long)-5:])
	}
	exact := eventNote(&Record{Rule: "R", Action: "Deny", Message: strings.Repeat("x", 1024-len("R Deny: ")), CallerAuthenticated: true})
	if len(exact) != 1024 || strings.HasSuffix(exact, "...") {
		t.Errorf("a note of exactly 1024 bytes (the Events API's limit) was cut: %q", exact[len(exact)-5:])
	}
	// A policy's message need not be ASCII: the cut falls between
	// characters, so the note stays valid UTF-8 within the limit.
	wide := eventNote(&Record{Rule: "R", Action: "Deny", Message: strings.Repeat("名", 1000), CallerAuthenticated: true})
	if len(wide) > 1024 || !utf8.ValidString(wide) || !strings.HasSuffix(wide, "名...") {
		t.Errorf("a note of three-byte characters: %d bytes, valid UTF-8 %v, ending %q", len(wide), utf8.ValidString(wide), wide[len(wide)-8:])
	}
}

// The Event of an UPDATE or DELETE names the stored object's UID, read
// from the decoded old object, else the decoded object, else the raw JSON;
// a CREATE's names none (there is no object yet).
func TestRegardingUID(t *testing.T) {
	withUID := func(uid string) map[string]any { return map[string]any{"metadata": map[string]any{"uid": uid}} }
	for _, tc := range []struct {
		name string
		req  webhook.Request
		want types.UID
	}{
		{"decoded old object", webhook.Request{Operation: admissionv1.Update, OldObjectValue: withUID("old"), ObjectValue: withUID("new"), Object: []byte(`{"metadata":{"uid":"raw"}}`)}, "old"},
		{"decoded object when there is no old one", webhook.Request{Operation: admissionv1.Update, ObjectValue: withUID("new")}, "new"},
		{"raw old object", webhook.Request{Operation: admissionv1.Delete, OldObject: []byte(`{"metadata":{"uid":"raw-old"}}`), Object: []byte(`{"metadata":{"uid":"raw-new"}}`)}, "raw-old"},
		{"raw object", webhook.Request{Operation: admissionv1.Update, Object: []byte(`{"metadata":{"uid":"raw-new"}}`)}, "raw-new"},
		{"JSON that does not decode", webhook.Request{Operation: admissionv1.Update, Object: []byte(`{"metadata":`)}, ""},
		{"no object at all", webhook.Request{Operation: admissionv1.Delete}, ""},
		{"a CREATE", webhook.Request{Operation: admissionv1.Create, ObjectValue: withUID("new")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Kind, tc.req.Namespace, tc.req.Name = tjKind, "ns", "tj"
			ref, ok := Regarding(&tc.req).(*corev1.ObjectReference)
			if !ok || ref.UID != tc.want || ref.Name != "tj" || ref.Kind != "TrainJob" {
				t.Errorf("regarding %+v, want TrainJob tj with UID %q", ref, tc.want)
			}
		})
	}
}

// A dry-run request is audited, marked, counted, without an Event; with
// SkipDryRun it is not audited at all. Exempt violations are audited after
// the violations, action Exempt, with their exception, as Normal Events.
func TestRecordDryRunAndExemptions(t *testing.T) {
	expires := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	req := &webhook.Request{UID: "u1", Operation: admissionv1.Create, Kind: tjKind, Namespace: "ns", Name: "tj",
		UserInfo: authenticationv1.UserInfo{Username: "alice", Groups: []string{"dev"}}, CallerAuthenticated: true}
	v := &webhook.Verdict{
		Violations: []webhook.Violation{{Rule: "V-TJ-2", Action: webhook.ActionWarn, Message: "warned"}},
		Exempted: []webhook.ExemptViolation{{Violation: webhook.Violation{Rule: "V-TJ-1", Action: webhook.ActionDeny, Message: "exempt"},
			Exemption: exceptions.Exemption{Exception: "legacy", Expires: &expires}}},
	}
	ev := &fakeEvents{}
	r := NewRecorder(8, ev, clocktesting.NewFakePassiveClock(t0))
	got := r.Record(context.Background(), req, v)
	want := []Record{
		{Time: t0, RequestUID: "u1", User: "alice", Groups: []string{"dev"}, Operation: "CREATE", APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob",
			Namespace: "ns", Name: "tj", Rule: "V-TJ-2", Action: "Warn", Message: "warned", CallerAuthenticated: true},
		{Time: t0, RequestUID: "u1", User: "alice", Groups: []string{"dev"}, Operation: "CREATE", APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob",
			Namespace: "ns", Name: "tj", Rule: "V-TJ-1", Action: "Exempt", Message: "exempt", Exception: "legacy", ExceptionExpires: &expires, CallerAuthenticated: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if v.Exempted[0].Action != webhook.ActionDeny {
		t.Error("recording changed the verdict's exempt violation")
	}
	var types []string
	for _, e := range ev.got {
		types = append(types, e.typ+"/"+e.action)
	}
	if diff := cmp.Diff([]string{"Warning/Warn", "Normal/Exempt"}, types); diff != "" {
		t.Errorf("Events (-want +got):\n%s", diff)
	}

	dry := *req
	dry.DryRun = true
	before := testutil.ToFloat64(verdicts.WithLabelValues("V-TJ-2", "Warn", "TrainJob"))
	got = r.Record(context.Background(), &dry, v)
	if len(got) != 2 || !got[0].DryRun || !got[1].DryRun || r.Ring.Len() != 4 {
		t.Errorf("a dry run: %+v, ring %d; want two records marked dryRun, four in the ring", got, r.Ring.Len())
	}
	if len(ev.got) != 2 {
		t.Errorf("a dry run wrote %d Events", len(ev.got)-2)
	}
	if d := testutil.ToFloat64(verdicts.WithLabelValues("V-TJ-2", "Warn", "TrainJob")) - before; d != 1 {
		t.Errorf("a dry run's verdict counted %v times, want once", d)
	}

	r.SkipDryRun = true
	if got := r.Record(context.Background(), &dry, v); got != nil || r.Ring.Len() != 4 {
		t.Errorf("SkipDryRun: %+v, ring %d; want nothing audited", got, r.Ring.Len())
	}
	if got := r.Record(context.Background(), req, v); len(got) != 2 {
		t.Errorf("SkipDryRun skipped a real request: %+v", got)
	}
	if r.Record(context.Background(), req, nil) != nil {
		t.Error("a nil verdict was audited")
	}
}

// The stored objects the background audit found are audited as AUDIT
// records stamped now, into the ring only: no Event, no verdict count.
func TestRecordStored(t *testing.T) {
	ev := &fakeEvents{}
	clk := clocktesting.NewFakePassiveClock(t0)
	r := NewRecorder(8, ev, clk)
	before := testutil.ToFloat64(verdicts.WithLabelValues("V-TJ-9", "Deny", "TrainJob"))
	r.RecordStored(context.Background(), []Record{
		{Time: t0.Add(-time.Hour), Operation: "CREATE", Kind: "TrainJob", Namespace: "a", Name: "x", Rule: "V-TJ-9", Action: "Deny", Message: "m"},
		{Kind: "TrainJob", Namespace: "b", Name: "y", Rule: "V-TJ-9", Action: "Deny", Message: "m"},
	})
	got := r.Ring.Query(Query{})
	if len(got) != 2 {
		t.Fatalf("ring holds %d records, want 2", len(got))
	}
	for _, rec := range got {
		if rec.Operation != api.AuditOperation || !rec.Time.Equal(t0) {
			t.Errorf("record %s/%s: operation %s at %v, want %s at %v", rec.Namespace, rec.Name, rec.Operation, rec.Time, api.AuditOperation, t0)
		}
	}
	if len(ev.got) != 0 {
		t.Errorf("%d Events for stored objects", len(ev.got))
	}
	if d := testutil.ToFloat64(verdicts.WithLabelValues("V-TJ-9", "Deny", "TrainJob")) - before; d != 0 {
		t.Errorf("stored objects counted as %v admission verdicts", d)
	}
}

// A kind shepherd does not admit is "other" on the metrics; a ring asked
// for no room holds one record.
func TestKindLabelAndRingSize(t *testing.T) {
	if got := KindLabel("TrainJob"); got != "TrainJob" {
		t.Errorf("KindLabel(TrainJob) = %q", got)
	}
	for _, k := range []string{"Pod", "", "trainjob"} {
		if got := KindLabel(k); got != OtherLabel {
			t.Errorf("KindLabel(%q) = %q, want %q", k, got, OtherLabel)
		}
	}
	r := NewRing(0)
	r.Add(rec(0, "ns", "R", "u"))
	r.Add(rec(1, "ns", "R", "u"))
	if got := uids(r.Query(Query{})); got != "b" {
		t.Errorf("a ring of size 0 holds %q, want the newest record", got)
	}
}

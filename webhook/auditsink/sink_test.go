package auditsink_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/shepherd-k8s/shepherd/webhook/audit"
	"github.com/shepherd-k8s/shepherd/webhook/auditsink"
)

const token = "s3cret"

func newHandler(t *testing.T) (*auditsink.Handler, *audit.Recorder, *events.FakeRecorder) {
	t.Helper()
	ev := events.NewFakeRecorder(10)
	rec := audit.NewRecorder(16, ev, clocktesting.NewFakePassiveClock(time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)))
	h := &auditsink.Handler{
		Recorder: rec,
		Rules: func(policy string) (string, bool) {
			switch policy {
			case "shepherd-v-tj-1":
				return "V-TJ-1", true
			case "shepherd-v-pcs-9":
				return "V-PCS-9", true
			}
			return "", false
		},
		Token:        func() string { return token },
		MaxBodyBytes: 4096,
		Log:          logr.Discard(),
	}
	return h, rec, ev
}

// eventList is an EventList as the apiserver's audit webhook backend posts
// it: a denied TrainJob create (ResponseComplete, with the annotation of a
// Deny+Audit binding and one of another owner's policy), the same request's
// ResponseStarted stage, and an unrelated event.
const eventList = `{
  "kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {},
  "items": [
    {"level": "Metadata", "auditID": "a-1", "stage": "ResponseComplete",
     "requestURI": "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs?fieldManager=kubectl",
     "verb": "create", "user": {"username": "alice", "groups": ["dev"]},
     "objectRef": {"resource": "trainjobs", "namespace": "team-a", "name": "llama", "apiGroup": "trainer.kubeflow.org", "apiVersion": "v1alpha1"},
     "responseStatus": {"metadata": {}, "code": 422},
     "annotations": {"validation.policy.admission.k8s.io/validation_failure":
       "[{\"message\":\"activeDeadlineSeconds must be at least 1, got 0\",\"policy\":\"shepherd-v-tj-1\",\"binding\":\"shepherd-v-tj-1\",\"expressionIndex\":0,\"validationActions\":[\"Deny\",\"Audit\"]},{\"message\":\"not ours\",\"policy\":\"someone-else\",\"binding\":\"someone-else\",\"expressionIndex\":0,\"validationActions\":[\"Audit\"]}]"}},
    {"level": "Metadata", "auditID": "a-1", "stage": "ResponseStarted", "verb": "create",
     "objectRef": {"resource": "trainjobs", "namespace": "team-a", "name": "llama", "apiGroup": "trainer.kubeflow.org", "apiVersion": "v1alpha1"},
     "annotations": {"validation.policy.admission.k8s.io/validation_failure":
       "[{\"message\":\"activeDeadlineSeconds must be at least 1, got 0\",\"policy\":\"shepherd-v-tj-1\",\"binding\":\"shepherd-v-tj-1\",\"expressionIndex\":0,\"validationActions\":[\"Deny\",\"Audit\"]}]"}},
    {"level": "Metadata", "auditID": "a-2", "stage": "ResponseComplete",
     "requestURI": "/apis/grove.io/v1alpha1/namespaces/team-b/podcliquesets/pcs?dryRun=All",
     "verb": "patch", "user": {"username": "system:serviceaccount:ci:deployer"},
     "impersonatedUser": {"username": "bob"},
     "objectRef": {"resource": "podcliquesets", "namespace": "team-b", "name": "pcs", "apiGroup": "grove.io", "apiVersion": "v1alpha1"},
     "annotations": {"validation.policy.admission.k8s.io/validation_failure":
       "[{\"message\":\"a warning\",\"policy\":\"shepherd-v-pcs-9\",\"binding\":\"shepherd-v-pcs-9\",\"expressionIndex\":0,\"validationActions\":[\"Warn\",\"Audit\"]}]"}},
    {"level": "Metadata", "auditID": "a-3", "stage": "ResponseComplete", "verb": "get",
     "objectRef": {"resource": "pods", "namespace": "x", "name": "p", "apiVersion": "v1"}}
  ]}`

func post(h http.Handler, body, auth string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, auditsink.Path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestRecordsPolicyFailures(t *testing.T) {
	h, rec, ev := newHandler(t)
	w := post(h, eventList, "Bearer "+token)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	var got map[string]int
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got["events"] != 4 || got["records"] != 2 {
		t.Fatalf("answer %s, want 4 events and 2 records", w.Body)
	}
	recs := rec.Ring.Query(audit.Query{})
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2 (the ResponseStarted stage, another owner's policy and an event without failures are not recorded): %+v", len(recs), recs)
	}
	deny := recs[0]
	if deny.Rule != "V-TJ-1" || deny.Action != "Deny" || deny.User != "alice" || deny.Operation != "CREATE" ||
		deny.Kind != "TrainJob" || deny.APIVersion != "trainer.kubeflow.org/v1alpha1" || deny.Namespace != "team-a" ||
		deny.Name != "llama" || deny.RequestUID != "a-1" || deny.DryRun || deny.Message != "activeDeadlineSeconds must be at least 1, got 0" {
		t.Errorf("deny record = %+v", deny)
	}
	warn := recs[1]
	if warn.Rule != "V-PCS-9" || warn.Action != "Warn" || warn.User != "bob" || warn.Operation != "UPDATE" ||
		warn.Kind != "PodCliqueSet" || !warn.DryRun {
		t.Errorf("warn record = %+v (the impersonated user, patch as UPDATE, dryRun from the URI)", warn)
	}
	// One Event: the dry-run verdict writes none, as for the webhook.
	if n := len(ev.Events); n != 1 {
		t.Errorf("%d Events, want 1", n)
	}
}

func TestRefuses(t *testing.T) {
	h, rec, _ := newHandler(t)
	for _, tc := range []struct {
		name, method, body, auth string
		code                     int
		msg                      string
	}{
		{"no token", http.MethodPost, eventList, "", http.StatusUnauthorized, "--audit-sink-token-file"},
		{"wrong token", http.MethodPost, eventList, "Bearer nope", http.StatusUnauthorized, "bearer token"},
		{"basic auth", http.MethodPost, eventList, "Basic " + token, http.StatusUnauthorized, "bearer token"},
		{"GET", http.MethodGet, "", "Bearer " + token, http.StatusMethodNotAllowed, "POST"},
		{"not JSON", http.MethodPost, "{", "Bearer " + token, http.StatusBadRequest, "audit.k8s.io/v1 EventList"},
		{"another kind", http.MethodPost, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, "Bearer " + token, http.StatusBadRequest, "want an audit.k8s.io/v1 EventList, got admission.k8s.io/v1, Kind=AdmissionReview"},
		{"an Event, not a list", http.MethodPost, `{"apiVersion":"audit.k8s.io/v1","kind":"Event"}`, "Bearer " + token, http.StatusBadRequest, "got audit.k8s.io/v1, Kind=Event"},
		{"too large", http.MethodPost, strings.Repeat(" ", 5000) + eventList, "Bearer " + token, http.StatusRequestEntityTooLarge, "--audit-webhook-batch-max-size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, auditsink.Path, strings.NewReader(tc.body))
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.msg) {
				t.Errorf("got %d %q, want %d containing %q", w.Code, w.Body, tc.code, tc.msg)
			}
		})
	}
	if n := rec.Ring.Len(); n != 0 {
		t.Errorf("%d records from refused requests", n)
	}
	// No token configured refuses even a caller that sends an empty one.
	h.Token = func() string { return "" }
	if w := post(h, eventList, "Bearer "); w.Code != http.StatusUnauthorized {
		t.Errorf("empty configured token: got %d, want 401", w.Code)
	}
}

// carolsCreate is an EventList of one allowed TrainJob create by carol
// whose audit event carries annotations (JSON object members).
func carolsCreate(annotations string) string {
	return `{"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": {}, "items": [
    {"level": "Metadata", "auditID": "e-1", "stage": "ResponseComplete",
     "requestURI": "/apis/trainer.kubeflow.org/v1alpha1/namespaces/legacy/trainjobs",
     "verb": "create", "user": {"username": "carol"},
     "objectRef": {"resource": "trainjobs", "namespace": "legacy", "name": "old", "apiGroup": "trainer.kubeflow.org", "apiVersion": "v1alpha1"},
     "responseStatus": {"metadata": {}, "code": 201},
     "annotations": {` + annotations + `}}]}`
}

// TestRecordsExemptions: the audit annotation a policy rewritten for a
// PolicyException publishes ("<policy>/exempt") becomes an Exempt record
// naming the exception and its expiry; another owner's, and a malformed
// value, are not recorded.
func TestRecordsExemptions(t *testing.T) {
	h, rec, _ := newHandler(t)
	list := carolsCreate(`
       "shepherd-v-tj-1/exempt": "legacy-jobs\n2027-01-01T00:00:00Z\nactiveDeadlineSeconds must be at least 1 (shepherd V-TJ-1)",
       "someone-else/exempt": "x\n\ny",
       "shepherd-v-pcs-9/exempt": "no newline"`)
	if w := post(h, list, "Bearer "+token); w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	recs := rec.Ring.Query(audit.Query{})
	if len(recs) != 1 {
		t.Fatalf("%d records, want the one exemption: %+v", len(recs), recs)
	}
	r := recs[0]
	want := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	if r.Rule != "V-TJ-1" || r.Action != "Exempt" || r.Exception != "legacy-jobs" || r.ExceptionExpires == nil || !r.ExceptionExpires.Equal(want) ||
		r.User != "carol" || r.Name != "old" || r.Message != "activeDeadlineSeconds must be at least 1 (shepherd V-TJ-1)" {
		t.Errorf("exempt record = %+v", r)
	}
}

// TestUnreadableFailuresKeepExemptions: an event whose validation failure
// annotation does not parse still has its exemptions recorded (they are
// annotations of their own); the failures it could not read are not made up.
func TestUnreadableFailuresKeepExemptions(t *testing.T) {
	h, rec, _ := newHandler(t)
	list := carolsCreate(`
       "validation.policy.admission.k8s.io/validation_failure": "[{not json",
       "shepherd-v-tj-1/exempt": "legacy-jobs\n2027-01-01T00:00:00Z\nactiveDeadlineSeconds must be at least 1 (shepherd V-TJ-1)"`)
	w := post(h, list, "Bearer "+token)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	recs := rec.Ring.Query(audit.Query{})
	if len(recs) != 1 || recs[0].Action != "Exempt" || recs[0].Rule != "V-TJ-1" || recs[0].Exception != "legacy-jobs" {
		t.Fatalf("records %+v, want the one exemption of V-TJ-1 by legacy-jobs", recs)
	}
}

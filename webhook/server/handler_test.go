package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

// fakeAdmitter answers with fixed verdicts and remembers the request; a
// pure unit-test stand-in for the chain, whose real behaviour the
// integration tests in test/webhook cover.
type fakeAdmitter struct {
	def, val *webhook.Verdict
	panics   bool
	got      *webhook.Request
}

func (f *fakeAdmitter) record(r *webhook.Request) { f.got = r }

func (f *fakeAdmitter) Default(_ context.Context, r *webhook.Request) *webhook.Verdict {
	f.record(r)
	if f.panics {
		panic("boom")
	}
	return f.def
}

func (f *fakeAdmitter) Validate(_ context.Context, r *webhook.Request) *webhook.Verdict {
	f.record(r)
	if f.panics {
		panic("boom")
	}
	return f.val
}

func (f *fakeAdmitter) Admit(ctx context.Context, r *webhook.Request) *webhook.Verdict {
	return f.Validate(ctx, r)
}

const pcsJSON = `{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"p","namespace":"ns"},"spec":{"replicas":1,"x-unknown":{"a":1}}}`

func review(t *testing.T, op admissionv1.Operation, dryRun bool) []byte {
	t.Helper()
	rv := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "uid-1",
			Kind:      metav1.GroupVersionKind{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"},
			Resource:  metav1.GroupVersionResource{Group: "grove.io", Version: "v1alpha1", Resource: "podcliquesets"},
			Namespace: "ns",
			Name:      "p",
			Operation: op,
			UserInfo:  authenticationv1.UserInfo{Username: "alice", Groups: []string{"team-a"}},
			Object:    runtime.RawExtension{Raw: []byte(pcsJSON)},
			DryRun:    &dryRun,
		},
	}
	b, err := json.Marshal(rv)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func serve(t *testing.T, h http.Handler, method, contentType string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, "/validate", bytes.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func decodeResponse(t *testing.T, w *httptest.ResponseRecorder) *admissionv1.AdmissionResponse {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", w.Code, w.Body.String())
	}
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(w.Body.Bytes(), &rv); err != nil {
		t.Fatalf("response is not an AdmissionReview: %v: %s", err, w.Body.String())
	}
	if rv.APIVersion != "admission.k8s.io/v1" || rv.Kind != "AdmissionReview" || rv.Response == nil {
		t.Fatalf("response envelope: %s", w.Body.String())
	}
	if rv.Response.UID != "uid-1" {
		t.Errorf("response uid = %q, want the request's uid-1", rv.Response.UID)
	}
	return rv.Response
}

func TestMutatingAnswersWithJSONPatchAndWarnings(t *testing.T) {
	patch := []jsonpatch.JsonPatchOperation{
		{Operation: "add", Path: "/spec/template/terminationDelay", Value: "0s"},
		{Operation: "add", Path: "/spec/workloadType", Value: "Training"},
	}
	f := &fakeAdmitter{def: &webhook.Verdict{Allowed: true, Patch: patch, Warnings: []string{"startupPolicy is deprecated"}}}
	h := &Handler{Mode: Mutating, Admitter: f, Log: logr.Discard()}
	resp := decodeResponse(t, serve(t, h, http.MethodPost, "application/json", review(t, admissionv1.Create, false)))

	if !resp.Allowed {
		t.Fatalf("not allowed: %+v", resp.Result)
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patchType = %v, want JSONPatch", resp.PatchType)
	}
	var got []jsonpatch.JsonPatchOperation
	if err := json.Unmarshal(resp.Patch, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(patch, got); diff != "" {
		t.Errorf("patch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"startupPolicy is deprecated"}, resp.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	// The chain gets the object as sent, unknown fields included, decoded
	// once with the review.
	var want map[string]any
	if err := utiljson.Unmarshal([]byte(pcsJSON), &want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, f.got.ObjectValue); diff != "" || f.got.Kind.Kind != "PodCliqueSet" || f.got.UserInfo.Username != "alice" {
		t.Errorf("request passed to the chain: %+v\nobject (-want +got):\n%s", f.got, diff)
	}
}

func TestMutatingWithoutDefaultsSendsNoPatch(t *testing.T) {
	h := &Handler{Mode: Mutating, Admitter: &fakeAdmitter{def: &webhook.Verdict{Allowed: true}}, Log: logr.Discard()}
	resp := decodeResponse(t, serve(t, h, http.MethodPost, "application/json", review(t, admissionv1.Update, false)))
	if !resp.Allowed || resp.Patch != nil || resp.PatchType != nil {
		t.Errorf("want allowed with no patch, got %+v", resp)
	}
}

func TestValidatingDeniesWithOneInvalidStatus(t *testing.T) {
	f := &fakeAdmitter{val: &webhook.Verdict{
		Allowed: false,
		Violations: []webhook.Violation{
			{Rule: "V-PCS-2", Field: "spec.trainingSpec.maxRestarts", Message: "must be at least 0", Action: webhook.ActionDeny},
			{Rule: "V-JS-5", Field: "spec.startupPolicy", Message: "deprecated", Action: webhook.ActionWarn},
			{Rule: "V-PCS-8", Field: "spec.template.cliques[0].spec.podSpec.restartPolicy", Message: "must be Never", Action: webhook.ActionDeny, Reason: "FieldValueForbidden"},
			{Rule: "audit-only", Field: "spec", Message: "seen", Action: webhook.ActionAudit},
		},
		Warnings: []string{"spec.startupPolicy: deprecated"},
	}}
	h := &Handler{Mode: Validating, Admitter: f, Log: logr.Discard()}
	resp := decodeResponse(t, serve(t, h, http.MethodPost, "application/json; charset=utf-8", review(t, admissionv1.Create, false)))

	if resp.Allowed {
		t.Fatal("allowed, want denied")
	}
	st := resp.Result
	if st == nil || st.Code != http.StatusUnprocessableEntity || st.Reason != metav1.StatusReasonInvalid || st.Status != metav1.StatusFailure {
		t.Fatalf("status = %+v, want Failure 422 Invalid", st)
	}
	if st.Details == nil || st.Details.Kind != "PodCliqueSet" || st.Details.Group != "grove.io" || st.Details.Name != "p" {
		t.Fatalf("details = %+v", st.Details)
	}
	want := []metav1.StatusCause{
		{Type: "FieldValueInvalid", Field: "spec.trainingSpec.maxRestarts", Message: "Invalid value: must be at least 0"},
		{Type: "FieldValueForbidden", Field: "spec.template.cliques[0].spec.podSpec.restartPolicy", Message: "Forbidden: must be Never"},
	}
	if diff := cmp.Diff(want, st.Details.Causes); diff != "" {
		t.Errorf("causes (-want +got):\n%s", diff)
	}
	for _, s := range []string{`PodCliqueSet.grove.io "p" is invalid`, "spec.trainingSpec.maxRestarts: Invalid value: must be at least 0", "restartPolicy: Forbidden: must be Never"} {
		if !strings.Contains(st.Message, s) {
			t.Errorf("message %q lacks %q", st.Message, s)
		}
	}
	if diff := cmp.Diff([]string{"spec.startupPolicy: deprecated"}, resp.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	if resp.Patch != nil {
		t.Error("validating response carries a patch")
	}
}

func TestBadInputIsAnHTTPError(t *testing.T) {
	valid := review(t, admissionv1.Create, false)
	for _, tc := range []struct {
		name, method, contentType string
		body                      []byte
		max                       int64
		code                      int
		msg                       string
	}{
		{"not JSON", "POST", "application/json", []byte("{not json"), 0, 400, "malformed AdmissionReview"},
		{"empty body", "POST", "application/json", nil, 0, 400, "body is empty"},
		{"v1beta1", "POST", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}`), 0, 400, "want admission.k8s.io/v1 AdmissionReview"},
		{"no request", "POST", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), 0, 400, "request is missing"},
		{"no uid", "POST", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"kind":{"kind":"X"},"operation":"CREATE"}}`), 0, 400, "request.uid is missing"},
		{"dryRun not a boolean", "POST", "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"X"},"operation":"CREATE","dryRun":"yes"}}`), 0, 400, "request.dryRun"},
		{"GET", "GET", "", nil, 0, 405, "accept POST"},
		{"YAML", "POST", "application/yaml", valid, 0, 415, "Content-Type"},
		{"too large", "POST", "application/json", valid, 64, 413, "larger than the 64 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeAdmitter{val: &webhook.Verdict{Allowed: true}}
			h := &Handler{Mode: Validating, Admitter: f, MaxBodyBytes: tc.max, Log: logr.Discard()}
			w := serve(t, h, tc.method, tc.contentType, tc.body)
			if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.msg) {
				t.Errorf("got HTTP %d %q, want %d containing %q", w.Code, w.Body.String(), tc.code, tc.msg)
			}
			if f.got != nil {
				t.Error("a rejected request reached the chain")
			}
		})
	}
}

func TestPanicIsRecoveredCountedAndDenied(t *testing.T) {
	before := testutil.ToFloat64(admissionPanics.WithLabelValues(string(Validating)))
	h := &Handler{Mode: Validating, Admitter: &fakeAdmitter{panics: true}, Log: logr.Discard()}
	resp := decodeResponse(t, serve(t, h, http.MethodPost, "application/json", review(t, admissionv1.Create, false)))
	if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusInternalServerError {
		t.Errorf("want a 500 denial, got %+v", resp)
	}
	if got := testutil.ToFloat64(admissionPanics.WithLabelValues(string(Validating))) - before; got != 1 {
		t.Errorf("panics counted = %v, want 1", got)
	}
}

func TestNilVerdictIsAnInternalError(t *testing.T) {
	h := &Handler{Mode: Mutating, Admitter: &fakeAdmitter{}, Log: logr.Discard()}
	resp := decodeResponse(t, serve(t, h, http.MethodPost, "application/json", review(t, admissionv1.Create, false)))
	if resp.Allowed || resp.Result.Code != http.StatusInternalServerError {
		t.Errorf("want a 500 denial, got %+v", resp)
	}
}

func TestDryRunIsAnsweredTheSameAndAuditedAsDryRun(t *testing.T) {
	verdict := &webhook.Verdict{Allowed: false, Violations: []webhook.Violation{
		{Rule: "V-PCS-1", Field: "spec.workloadType", Message: "must be Inference or Training", Action: webhook.ActionDeny},
	}}
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	ev := events.NewFakeRecorder(10)
	rec := audit.NewRecorder(16, ev, clocktesting.NewFakePassiveClock(now))
	h := &Handler{Mode: Validating, Admitter: &fakeAdmitter{val: verdict}, Audit: rec, Log: logr.Discard()}

	real := decodeResponse(t, serve(t, h, http.MethodPost, "application/json", review(t, admissionv1.Create, false)))
	dry := decodeResponse(t, serve(t, h, http.MethodPost, "application/json", review(t, admissionv1.Create, true)))
	if diff := cmp.Diff(real, dry); diff != "" {
		t.Errorf("dry-run answer differs (-real +dry):\n%s", diff)
	}

	got := rec.Ring.Query(audit.Query{})
	want := []audit.Record{
		{Time: now, RequestUID: "uid-1", User: "alice", Groups: []string{"team-a"}, Operation: "CREATE", APIVersion: "grove.io/v1alpha1",
			Kind: "PodCliqueSet", Namespace: "ns", Name: "p", Rule: "V-PCS-1", Action: "Deny", Field: "spec.workloadType", Message: "must be Inference or Training"},
	}
	want = append(want, want[0])
	want[1].DryRun = true
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit records (-want +got):\n%s", diff)
	}
	// One Event: the dry-run request must not write one (NoneOnDryRun).
	if n := len(ev.Events); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
	if e := <-ev.Events; !strings.Contains(e, "PolicyViolation") || !strings.Contains(e, "V-PCS-1") {
		t.Errorf("event %q", e)
	}
}

// BenchmarkHandlerOverhead is the handler alone (decode the AdmissionReview,
// encode the response with a patch) around a chain that answers at once:
// what the server adds to the chain's own time.
func BenchmarkHandlerOverhead(b *testing.B) {
	patch := []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/spec/workloadType", Value: "Inference"}}
	h := &Handler{Mode: Mutating, Admitter: &fakeAdmitter{def: &webhook.Verdict{Allowed: true, Patch: patch}}, Log: logr.Discard()}
	body := review(&testing.T{}, admissionv1.Create, false)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatal(w.Body.String())
		}
	}
}

// echoAdmitter answers each request with a patch and a warning made from
// the request itself.
type echoAdmitter struct{}

func (echoAdmitter) Default(_ context.Context, r *webhook.Request) *webhook.Verdict {
	name, _, _ := unstructured.NestedString(r.ObjectValue, "metadata", "name")
	return &webhook.Verdict{Allowed: true, Warnings: []string{"name " + name},
		Patch: []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", "/metadata/uid", string(r.UID))}}
}
func (e echoAdmitter) Validate(ctx context.Context, r *webhook.Request) *webhook.Verdict {
	return e.Default(ctx, r)
}
func (e echoAdmitter) Admit(ctx context.Context, r *webhook.Request) *webhook.Verdict {
	return e.Default(ctx, r)
}

// One handler serves every request of its path at once: concurrent
// requests, each of a different size, get exactly their own answers.
func TestConcurrentRequestsGetTheirOwnAnswers(t *testing.T) {
	h := &Handler{Mode: Mutating, Admitter: echoAdmitter{}}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				uid := fmt.Sprintf("uid-%d-%d", g, i)
				name := strings.Repeat("n", 1+(g*200+i)%300) // bodies of many sizes
				obj := fmt.Sprintf(`{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":%q}}`, name)
				body := fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":%q,`+
					`"kind":{"group":"grove.io","version":"v1alpha1","kind":"PodCliqueSet"},"operation":"CREATE","object":%s}}`, uid, obj)
				r := httptest.NewRequest(http.MethodPost, "/mutate", strings.NewReader(body))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				var rv admissionv1.AdmissionReview
				if err := json.Unmarshal(w.Body.Bytes(), &rv); err != nil || rv.Response == nil {
					t.Errorf("%s: answer %q: %v", uid, w.Body.String(), err)
					return
				}
				wantPatch := fmt.Sprintf(`[{"op":"add","path":"/metadata/uid","value":%q}]`, uid)
				if got := rv.Response; string(got.UID) != uid || string(got.Patch) != wantPatch || len(got.Warnings) != 1 || got.Warnings[0] != "name "+name {
					t.Errorf("%s: answered uid %q, patch %s, warnings %q", uid, got.UID, got.Patch, got.Warnings)
					return
				}
			}
		})
	}
	wg.Wait()
}

package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The hand-written review decoder reads every field the handlers use
// exactly as encoding/json reads them into the typed AdmissionReview.
func TestDecodeReviewMatchesEncodingJSON(t *testing.T) {
	dry := true
	gvk := metav1.GroupVersionKind{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"}
	gvr := metav1.GroupVersionResource{Group: "grove.io", Version: "v1alpha1", Resource: "podcliquesets"}
	sent := &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "u-1", Kind: gvk, Resource: gvr, SubResource: "status",
			RequestKind: &gvk, RequestResource: &gvr, RequestSubResource: "status",
			Name: "p", Namespace: "ns", Operation: admissionv1.Update,
			UserInfo: authenticationv1.UserInfo{Username: "alice", UID: "a-1", Groups: []string{"g1", "g2"},
				Extra: map[string]authenticationv1.ExtraValue{"scopes": {"x", "y"}}},
			Object:    runtime.RawExtension{Raw: []byte(`{"spec":{"replicas":2,"x-unknown":[1,"a",null]}}`)},
			OldObject: runtime.RawExtension{Raw: []byte(`{"spec":{"replicas":1}}`)},
			DryRun:    &dry,
		},
	}
	body, err := json.Marshal(sent)
	if err != nil {
		t.Fatal(err)
	}
	want := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(body, want); err != nil {
		t.Fatal(err)
	}
	got, err := DecodeReview(body)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON := cmp.Comparer(func(a, b runtime.RawExtension) bool {
		var av, bv any
		return json.Unmarshal(a.Raw, &av) == nil && json.Unmarshal(b.Raw, &bv) == nil && cmp.Equal(av, bv)
	})
	if diff := cmp.Diff(want, got, sameJSON, cmpopts.IgnoreFields(admissionv1.AdmissionRequest{}, "Options")); diff != "" {
		t.Errorf("decoded review (-encoding/json +shepherd):\n%s", diff)
	}
	rv, err := decodeReview(body, new(exchange))
	if err != nil {
		t.Fatal(err)
	}
	if rv.object["spec"].(map[string]any)["replicas"] != int64(2) || rv.oldObject == nil {
		t.Errorf("decoded objects %v, %v", rv.object, rv.oldObject)
	}
}

func TestDecodeReviewNamesTheMalformedField(t *testing.T) {
	const head = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":`
	for req, want := range map[string]string{
		`{"uid":"u","kind":{"kind":"X"},"operation":"CREATE","dryRun":"yes"}`:                 "request.dryRun: want a boolean, got a string",
		`{"uid":"u","kind":"X","operation":"CREATE"}`:                                         "request.kind: want an object, got a string",
		`{"uid":7,"kind":{"kind":"X"},"operation":"CREATE"}`:                                  "request.uid: want a string, got a number",
		`{"uid":"u","kind":{"kind":"X"},"operation":"CREATE","userInfo":{"groups":["a",1]}}`:  "request.userInfo.groups[1]: want a string, got a number",
		`{"uid":"u","kind":{"kind":"X"},"operation":"CREATE","userInfo":{"extra":{"k":"v"}}}`: "request.userInfo.extra.k: want an array of strings, got a string",
		`[]`: "request: want an object, got an array",
	} {
		_, err := DecodeReview([]byte(head + req + "}"))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "malformed AdmissionReview") {
			t.Errorf("%s: error %v, want one containing %q", req, err, want)
		}
	}
}

// An object that is not a JSON object reaches the chain as raw JSON, which
// denies it with its decode error, as it did with encoding/json.
func TestNonObjectObjectIsPassedOnRaw(t *testing.T) {
	rv, err := decodeReview([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"X"},"operation":"CREATE","object":[1,2]}}`), new(exchange))
	if err != nil {
		t.Fatal(err)
	}
	if rv.object != nil || string(rv.Request.Object.Raw) != "[1,2]" {
		t.Errorf("object %v, raw %q; want nil and [1,2]", rv.object, rv.Request.Object.Raw)
	}
}

// Errors come in the order of the checks, not of the document's fields: a
// syntax error anywhere first, then the envelope, then the request.
func TestDecodeReviewReportsErrorsInCheckOrder(t *testing.T) {
	for body, want := range map[string]string{
		// A type error early, a syntax error late: the syntax error.
		`{"request":{"uid":7},"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",}`: "invalid character '}' looking for the beginning of an object key",
		// A malformed request and a wrong apiVersion: the apiVersion.
		`{"request":[],"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}`: `apiVersion "admission.k8s.io/v1beta1"`,
		// A type error in the request reported before a missing field.
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":1}}`: "request.operation: want a string, got a number",
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}`:            "request is missing",
		`null`: "the request body is null",
		`[]`:   "want a JSON object, got an array",
	} {
		_, err := DecodeReview([]byte(body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", body, err, want)
		}
	}
}

// The last of duplicate keys wins, as in a map: a whole request, not a
// merge of two.
func TestDecodeReviewDuplicateRequestLastWins(t *testing.T) {
	rv, err := DecodeReview([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",` +
		`"request":{"uid":"first","name":"a","kind":{"kind":"X"},"operation":"CREATE"},` +
		`"request":{"uid":"second","kind":{"kind":"Y"},"operation":"UPDATE"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if r := rv.Request; r.UID != "second" || r.Name != "" || r.Kind.Kind != "Y" || r.Operation != admissionv1.Update {
		t.Errorf("request %+v; want only the second one", r)
	}
}

// The handler recycles the body's buffer once the review is decoded, so
// nothing decoded may point into it: overwriting the body afterwards
// changes nothing decoded.
func TestDecodedReviewDoesNotAliasTheBody(t *testing.T) {
	body := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1","name":"my-set",` +
		`"namespace":"team-a","kind":{"group":"grove.io","version":"v1alpha1","kind":"PodCliqueSet"},"operation":"CREATE",` +
		`"userInfo":{"username":"alice","groups":["ml-team"],"extra":{"scopes":["s1"]}},` +
		`"object":{"metadata":{"name":"my-set","labels":{"team":"x"}},"spec":{"replicas":3,"image":"trainer:v2","f":1.5}},"oldObject":[1,"z"]}}`)
	decode := func(b []byte) *decodedReview {
		rv, err := decodeReview(b, new(exchange))
		if err != nil {
			t.Fatal(err)
		}
		return rv
	}
	want := decode(append([]byte(nil), body...))
	rv := decode(body)
	for i := range body {
		body[i] = 'X'
	}
	opts := cmp.AllowUnexported(decodedReview{})
	if diff := cmp.Diff(want, rv, opts); diff != "" {
		t.Fatalf("a decoded review changed when its body was overwritten (-before +after):\n%s", diff)
	}
	if rv.object["spec"].(map[string]any)["image"] != "trainer:v2" || string(rv.Request.OldObject.Raw) != `[1,"z"]` {
		t.Fatalf("decoded %v, %s", rv.object, rv.Request.OldObject.Raw)
	}
}

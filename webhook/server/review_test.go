package server

import (
	"strings"
	"testing"
)

// Every malformed review is refused with a message naming what is wrong.
func TestDecodeReviewNamesWhatIsWrong(t *testing.T) {
	const head = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":`
	for body, want := range map[string]string{
		``:                     "the request body is empty",
		head:                   "unexpected end of JSON input",
		head + `{"uid":"u",}}`: "(at byte 83)",
		`[]`:                   "cannot unmarshal array",
		`null`:                 `apiVersion "", kind "": want admission.k8s.io/v1 AdmissionReview`,
		`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}`: `apiVersion "admission.k8s.io/v1beta1"`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"Review"}`:                                     `kind "Review"`,
		head + `null}`: "request is missing",
		// Field names are case-sensitive, as the apiserver reads them.
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","Request":{"uid":"u"}}`: "request is missing",
		head + `[]}`:                                         "request of type v1.AdmissionRequest",
		head + `{"uid":7}}`:                                  "request.uid",
		head + `{"uid":"u","kind":"X"}}`:                     "request.kind",
		head + `{"uid":"u","dryRun":"yes"}}`:                 "request.dryRun",
		head + `{"uid":"u","userInfo":{"groups":["a",1]}}}`:  "request.userInfo.groups",
		head + `{"kind":{"kind":"X"},"operation":"CREATE"}}`: "request.uid is missing",
		head + `{"uid":"u","operation":"CREATE"}}`:           "request.kind.kind is missing",
		head + `{"uid":"u","kind":{"kind":"X"}}}`:            "request.operation is missing",
	} {
		_, err := DecodeReview([]byte(body))
		if err == nil || !strings.HasPrefix(err.Error(), "malformed AdmissionReview: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want a malformed AdmissionReview naming %q", body, err, want)
		}
	}
}

// The request's objects reach the chain exactly as sent, for it to decode
// once; a value that is not an object is the chain's to deny.
func TestDecodeReviewKeepsTheObjectsAsSent(t *testing.T) {
	const obj, old = `{"spec":{"replicas":2,"x-unknown":[1,"a",null,1.5]}}`, `["not","an","object"]`
	rv, err := DecodeReview([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u",` +
		`"kind":{"kind":"X"},"operation":"UPDATE","object":` + obj + `,"oldObject":` + old + `}}`))
	if err != nil {
		t.Fatal(err)
	}
	req := RequestFrom(rv.Request)
	if string(req.Object) != obj || string(req.OldObject) != old {
		t.Errorf("object %s, old object %s; want %s and %s", req.Object, req.OldObject, obj, old)
	}
}

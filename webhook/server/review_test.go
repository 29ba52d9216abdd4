package server

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shepherd-k8s/shepherd/webhook"
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
		head + `[]}`:                                                       "request of type v1.AdmissionRequest",
		head + `{"uid":7}}`:                                                "request.uid",
		head + `{"uid":"u","kind":"X"}}`:                                   "request.kind",
		head + `{"uid":"u","dryRun":"yes"}}`:                               "request.dryRun",
		head + `{"uid":"u","userInfo":{"groups":["a",1]}}}`:                "request.userInfo.groups",
		head + `{"kind":{"kind":"X"},"operation":"CREATE"}}`:               "request.uid is missing",
		head + `{"uid":"u","operation":"CREATE"}}`:                         "request.kind.kind is missing",
		head + `{"uid":"u","kind":{"kind":"X"}}}`:                          "request.operation is missing",
		head + `{"uid":"u","kind":{"kind":"X"},"operation":"FROBNICATE"}}`: `request.operation "FROBNICATE" is not one of CREATE, UPDATE, DELETE, CONNECT`,
		head + `{"uid":"u","kind":{"kind":"X"},"operation":"create"}}`:     `request.operation "create" is not one of`,
	} {
		_, err := DecodeReview([]byte(body))
		if err == nil || !strings.HasPrefix(err.Error(), "malformed AdmissionReview: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want a malformed AdmissionReview naming %q", body, err, want)
		}
	}
}

// The request's objects are decoded with the review, as the chain decodes
// them (integers as int64); a value that is not an object reaches the
// chain as its JSON, for the chain to deny.
func TestDecodeReviewDecodesTheObjectsOnce(t *testing.T) {
	const obj, old = `{"spec":{"replicas":2,"x-unknown":[1,"a",null,1.5]}}`, `["not","an","object"]`
	rv, err := DecodeReview([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u",` +
		`"kind":{"kind":"X"},"operation":"UPDATE","object":` + obj + `,"oldObject":` + old + `}}`))
	if err != nil {
		t.Fatal(err)
	}
	req := RequestFrom(rv)
	want := map[string]any{"spec": map[string]any{"replicas": int64(2), "x-unknown": []any{int64(1), "a", nil, 1.5}}}
	if diff := cmp.Diff(want, req.ObjectValue); diff != "" || req.Object != nil {
		t.Errorf("object (-want +got):\n%s\nraw %s, want none", diff, req.Object)
	}
	if req.OldObjectValue != nil || string(req.OldObject) != old {
		t.Errorf("old object %v, raw %s; want no value and the raw %s", req.OldObjectValue, req.OldObject, old)
	}
	chain, err := webhook.NewChain(webhook.ChainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v := chain.Validate(context.Background(), req)
	if v.Allowed || len(v.Violations) != 1 || !strings.Contains(v.Violations[0].Message, "cannot decode the old object: want a JSON object, got an array") {
		t.Errorf("the chain's verdict on an array as old object: %+v", v)
	}
}

package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	kjson "sigs.k8s.io/json"

	"github.com/shepherd-k8s/shepherd/webhook"
)

// Review is a decoded AdmissionReview: its request, whose object and
// oldObject are left empty, and those two decoded once, as JSON values.
type Review struct {
	Request *admissionv1.AdmissionRequest
	// Object and OldObject are the request's objects as decoded JSON
	// (numbers as int64 or float64, as apimachinery decodes them); nil
	// when absent or null. The chain denies one that is not an object.
	Object, OldObject any
}

// reviewIn is the AdmissionReview as it is decoded: the request's object
// and oldObject straight into JSON values (the outer fields win over the
// embedded request's RawExtensions). Decoding them as RawExtensions and
// then again as maps scanned every object twice more and copied it: a
// seventh of serve's CPU went to JSON in make bench-admission.
type reviewIn struct {
	metav1.TypeMeta `json:",inline"`
	Request         *requestIn `json:"request,omitempty"`
}

type requestIn struct {
	admissionv1.AdmissionRequest `json:",inline"`
	Object                       any `json:"object,omitempty"`
	OldObject                    any `json:"oldObject,omitempty"`
}

// DecodeReview parses an admission.k8s.io/v1 AdmissionReview and checks
// what the handlers rely on; every error is a message for a 400 answer.
// It decodes as the apiserver does (field names case-sensitive, integers
// as int64), the request's objects included, in one pass.
func DecodeReview(body []byte) (*Review, error) {
	if len(body) == 0 {
		return nil, errors.New("malformed AdmissionReview: the request body is empty")
	}
	rv := &reviewIn{}
	if err := utiljson.Unmarshal(body, rv); err != nil {
		if syntax, offset := kjson.SyntaxErrorOffset(err); syntax {
			return nil, fmt.Errorf("malformed AdmissionReview: %w (at byte %d)", err, offset)
		}
		// A type error names the Go field path, in which the embedded
		// request shows: name the JSON path instead.
		msg := strings.ReplaceAll(err.Error(), "request.AdmissionRequest.", "request.")
		msg = strings.ReplaceAll(msg, "requestIn.", "AdmissionRequest.")
		msg = strings.ReplaceAll(msg, "server.requestIn", "v1.AdmissionRequest")
		return nil, fmt.Errorf("malformed AdmissionReview: %s", msg)
	}
	if rv.GroupVersionKind() != admissionv1.SchemeGroupVersion.WithKind("AdmissionReview") {
		return nil, fmt.Errorf("malformed AdmissionReview: apiVersion %q, kind %q: want admission.k8s.io/v1 AdmissionReview (list only v1 in the webhook's admissionReviewVersions)",
			rv.APIVersion, rv.Kind)
	}
	if rv.Request == nil {
		return nil, errors.New("malformed AdmissionReview: request is missing")
	}
	r := &rv.Request.AdmissionRequest
	switch {
	case r.UID == "":
		return nil, errors.New("malformed AdmissionReview: request.uid is missing")
	case r.Kind.Kind == "":
		return nil, errors.New("malformed AdmissionReview: request.kind.kind is missing")
	case r.Operation == "":
		return nil, errors.New("malformed AdmissionReview: request.operation is missing")
	}
	switch r.Operation {
	case admissionv1.Create, admissionv1.Update, admissionv1.Delete, admissionv1.Connect:
	default:
		// A verdict on an operation the apiserver never sends would be an
		// answer to nobody: a made-up request gets no "allowed".
		return nil, fmt.Errorf("malformed AdmissionReview: request.operation %q is not one of CREATE, UPDATE, DELETE, CONNECT", r.Operation)
	}
	return &Review{Request: r, Object: rv.Request.Object, OldObject: rv.Request.OldObject}, nil
}

// RequestFrom turns a Review into the chain's Request, the objects as
// decoded. A value that is not an object is handed on as its JSON, for
// the chain to deny with a message saying what it is.
func RequestFrom(rv *Review) *webhook.Request {
	r := rv.Request
	req := &webhook.Request{
		UID:       r.UID,
		Operation: r.Operation,
		Kind:      r.Kind,
		Resource:  r.Resource,
		Namespace: r.Namespace,
		Name:      r.Name,
		DryRun:    r.DryRun != nil && *r.DryRun,
		UserInfo:  r.UserInfo,
	}
	req.ObjectValue, req.Object = objectOf(rv.Object)
	req.OldObjectValue, req.OldObject = objectOf(rv.OldObject)
	return req
}

// objectOf is a decoded object as the chain takes it: a map, or the JSON
// of anything else.
func objectOf(v any) (map[string]any, []byte) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case map[string]any:
		return v, nil
	default:
		raw, err := json.Marshal(v)
		if err != nil {
			// Decoded JSON values always encode; a bug otherwise, which
			// the handler's recover turns into a denial.
			panic(fmt.Sprintf("encoding a decoded JSON value: %v", err))
		}
		return nil, raw
	}
}

// writeReview answers with the AdmissionReview carrying resp.
func writeReview(w http.ResponseWriter, resp *admissionv1.AdmissionResponse) {
	out, err := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: resp,
	})
	if err != nil {
		// Every field is a plain string, number or []byte: this cannot
		// fail short of a bug, which the handler's recover turns into a 500.
		panic(fmt.Sprintf("encoding AdmissionReview: %v", err))
	}
	w.Header().Set("Content-Type", "application/json")
	// A write error is the apiserver having gone away; nobody is left to tell.
	_, _ = w.Write(out)
}

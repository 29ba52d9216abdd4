package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	kjson "sigs.k8s.io/json"

	"github.com/shepherd-k8s/shepherd/webhook"
)

// DecodeReview parses an admission.k8s.io/v1 AdmissionReview and checks
// what the handlers rely on; every error is a message for a 400 answer.
// It decodes as the apiserver does (field names case-sensitive); the
// request's object and oldObject stay raw JSON, which the chain decodes.
func DecodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	if len(body) == 0 {
		return nil, errors.New("malformed AdmissionReview: the request body is empty")
	}
	rv := &admissionv1.AdmissionReview{}
	if err := utiljson.Unmarshal(body, rv); err != nil {
		if syntax, offset := kjson.SyntaxErrorOffset(err); syntax {
			return nil, fmt.Errorf("malformed AdmissionReview: %w (at byte %d)", err, offset)
		}
		return nil, fmt.Errorf("malformed AdmissionReview: %w", err)
	}
	if rv.GroupVersionKind() != admissionv1.SchemeGroupVersion.WithKind("AdmissionReview") {
		return nil, fmt.Errorf("malformed AdmissionReview: apiVersion %q, kind %q: want admission.k8s.io/v1 AdmissionReview (list only v1 in the webhook's admissionReviewVersions)",
			rv.APIVersion, rv.Kind)
	}
	r := rv.Request
	switch {
	case r == nil:
		return nil, errors.New("malformed AdmissionReview: request is missing")
	case r.UID == "":
		return nil, errors.New("malformed AdmissionReview: request.uid is missing")
	case r.Kind.Kind == "":
		return nil, errors.New("malformed AdmissionReview: request.kind.kind is missing")
	case r.Operation == "":
		return nil, errors.New("malformed AdmissionReview: request.operation is missing")
	}
	return rv, nil
}

// RequestFrom turns an AdmissionRequest into the chain's Request; the
// objects stay raw JSON so the chain patches exactly what was sent.
func RequestFrom(r *admissionv1.AdmissionRequest) *webhook.Request {
	return &webhook.Request{
		UID:       r.UID,
		Operation: r.Operation,
		Kind:      r.Kind,
		Resource:  r.Resource,
		Namespace: r.Namespace,
		Name:      r.Name,
		Object:    r.Object.Raw,
		OldObject: r.OldObject.Raw,
		DryRun:    r.DryRun != nil && *r.DryRun,
		UserInfo:  r.UserInfo,
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

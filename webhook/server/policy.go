package server

import (
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// PolicyPath is where WorkloadPolicies are validated at admission
// (deploy/webhook's workloadpolicies.validate.shepherd.dev).
const PolicyPath = "/validate-workloadpolicy"

// PolicyChecker compiles a WorkloadPolicy as serve would load it and
// returns the errors, keeping nothing (webhook.Chain.CheckPolicy).
type PolicyChecker interface {
	CheckPolicy(p *shepherdv1alpha1.WorkloadPolicy) field.ErrorList
}

// Policies validates WorkloadPolicies: the Mode of a Handler whose
// Policies checker answers instead of the chain.
const Policies Mode = "workloadpolicy"

// policyResponse answers the admission of a WorkloadPolicy: one that does
// not compile (a kind no CRD serves, CEL that does not parse or type-check
// against the kind's schema, a reserved name, an operation the webhooks
// never see) is denied with apierrors.NewInvalid of the compile errors, so
// every cause is the field path and the message its status would carry
// (policies.DesiredStatus's compileErrors), and kubectl apply shows them
// instead of accepting a policy that is never applied.
func policyResponse(checker PolicyChecker, r *admissionv1.AdmissionRequest, rv *Review) (*admissionv1.AdmissionResponse, string) {
	resp := &admissionv1.AdmissionResponse{UID: r.UID, Allowed: true}
	if r.Kind.Group != api.ShepherdGroup || r.Kind.Kind != api.KindWorkloadPolicy || rv.Object == nil {
		// Only WorkloadPolicy CREATE and UPDATE are sent here; anything
		// else is not this handler's to judge.
		return resp, verdictAllowed
	}
	raw, err := json.Marshal(rv.Object)
	if err != nil {
		panic(fmt.Sprintf("encoding a decoded JSON value: %v", err))
	}
	p := &shepherdv1alpha1.WorkloadPolicy{}
	if err := json.Unmarshal(raw, p); err != nil {
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest,
			Message: fmt.Sprintf("cannot decode the WorkloadPolicy: %v", err)}
		return resp, verdictDenied
	}
	if p.Name == "" {
		p.Name = r.Name
	}
	errs := checker.CheckPolicy(p)
	if len(errs) == 0 {
		return resp, verdictAllowed
	}
	st := apierrors.NewInvalid(shepherdv1alpha1.GroupVersion.WithKind(api.KindWorkloadPolicy).GroupKind(), p.Name, errs).ErrStatus
	resp.Allowed, resp.Result = false, &st
	return resp, verdictDenied
}

package server

import (
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/shepherd-k8s/shepherd/webhook"
)

// Response renders a verdict as an AdmissionResponse. A denial is one
// 422 Invalid status (the shape of apierrors.NewInvalid) with a cause per
// Deny violation, so users see every violation at once with its field path;
// warnings become admission warnings; the mutating webhook's defaults become
// a JSON patch.
func Response(mode Mode, req *webhook.Request, v *webhook.Verdict) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{
		UID:      req.UID,
		Allowed:  v.Allowed,
		Warnings: v.Warnings,
	}
	if !v.Allowed {
		resp.Result = InvalidStatus(req, v.Violations)
		return resp
	}
	if mode == Mutating && len(v.Patch) > 0 {
		patch, err := json.Marshal(v.Patch)
		if err != nil {
			// Patch values come from decoded JSON; failing to re-encode
			// them is a bug, recovered and answered as an internal error.
			panic(fmt.Sprintf("encoding the JSON patch: %v", err))
		}
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &pt
	}
	return resp
}

// InvalidStatus is the 422 Invalid status of apierrors.NewInvalid for the
// Deny violations: Details.Causes holds one cause per violation.
func InvalidStatus(req *webhook.Request, violations []webhook.Violation) *metav1.Status {
	var errs field.ErrorList
	for _, vi := range violations {
		if vi.Action != webhook.ActionDeny {
			continue
		}
		errs = append(errs, &field.Error{
			Type:     causeType(vi.Reason),
			Field:    vi.Field,
			BadValue: field.OmitValueType{},
			Detail:   vi.Message,
		})
	}
	gk := schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}
	st := apierrors.NewInvalid(gk, req.Name, errs).ErrStatus
	return &st
}

// causeType maps a violation's reason — a field.ErrorType
// ("FieldValueForbidden") or, as WorkloadPolicies and
// ValidatingAdmissionPolicy spell it, a StatusReason ("Forbidden") — to the
// cause type; anything else is Invalid.
func causeType(reason string) field.ErrorType {
	switch reason {
	case "", "Invalid", string(field.ErrorTypeInvalid):
		return field.ErrorTypeInvalid
	case "Forbidden", string(field.ErrorTypeForbidden):
		return field.ErrorTypeForbidden
	case "Required", string(field.ErrorTypeRequired):
		return field.ErrorTypeRequired
	case "Duplicate", string(field.ErrorTypeDuplicate):
		return field.ErrorTypeDuplicate
	case "NotSupported", string(field.ErrorTypeNotSupported):
		return field.ErrorTypeNotSupported
	case "NotFound", string(field.ErrorTypeNotFound):
		return field.ErrorTypeNotFound
	case "TooLong", string(field.ErrorTypeTooLong):
		return field.ErrorTypeTooLong
	case "TooMany", string(field.ErrorTypeTooMany):
		return field.ErrorTypeTooMany
	case "TypeInvalid", string(field.ErrorTypeTypeInvalid):
		return field.ErrorTypeTypeInvalid
	case "Internal", string(field.ErrorTypeInternal):
		return field.ErrorTypeInternal
	}
	return field.ErrorTypeInvalid
}

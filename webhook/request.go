package webhook

import (
	"context"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
)

// Request is one admission request: decoded from an AdmissionReview by the
// server, or built from manifests by `shepherd check`.
type Request struct {
	UID       types.UID
	Operation admissionv1.Operation
	Kind      metav1.GroupVersionKind
	Resource  metav1.GroupVersionResource
	Namespace string
	Name      string
	// Object is the raw JSON of the object (empty on DELETE).
	Object []byte
	// OldObject is the raw JSON of the stored object (UPDATE and DELETE).
	OldObject []byte
	// ObjectValue and OldObjectValue are Object and OldObject already
	// decoded, when the caller has them (Admit hands Validate the object
	// Default decoded and defaulted): the chain then uses them instead of
	// the raw JSON, and the defaulters change ObjectValue in place.
	ObjectValue    map[string]any
	OldObjectValue map[string]any
	DryRun         bool
	UserInfo       authenticationv1.UserInfo
	// CallerAuthenticated says the request came from an authenticated
	// caller: over TLS with a client certificate the webhook server
	// verified (--webhook-client-ca), or through the audit sink's token.
	// Without it UserInfo is whatever the caller wrote: anyone who reaches
	// the webhook port can claim any user.
	CallerAuthenticated bool
}

// Action is what a rule does when its validation fails. It is the
// WorkloadPolicy API's action, so built-in rules and admins' policies share
// one set of values.
type Action = shepherdv1alpha1.Action

const (
	ActionDeny  = shepherdv1alpha1.ActionDeny
	ActionWarn  = shepherdv1alpha1.ActionWarn
	ActionAudit = shepherdv1alpha1.ActionAudit
)

// Violation is one failed validation: the rule (a built-in ID such as
// "V-TJ-1", or "<WorkloadPolicy name>" for admins' rules), the field path
// ("spec.activeDeadlineSeconds"), the message users see, and the action.
type Violation struct {
	Rule    string `json:"rule"`
	Field   string `json:"field"`
	Message string `json:"message"`
	Action  Action `json:"action"`
	// Reason is the metav1.StatusReason-like cause type for the field error
	// (FieldValueInvalid, FieldValueForbidden, ...); empty means Invalid.
	Reason string `json:"reason,omitempty"`
}

// Verdict is the answer of the chain for one request.
type Verdict struct {
	// Allowed is false when any violation has action Deny.
	Allowed bool
	// Violations lists every Deny, Warn and Audit verdict, in rule order.
	Violations []Violation
	// Exempted are the violations a PolicyException exempts: they neither
	// deny nor warn as their rule would, and are audited as Exempt.
	Exempted []ExemptViolation
	// Warnings are the admission warnings: Warn violations rendered for
	// users, and defaulter warnings (e.g. D-JS-2's deprecation notice).
	Warnings []string
	// Patch is the RFC 6902 patch the defaulters applied to Request.Object
	// (empty when nothing was defaulted or the request was not mutated).
	Patch []jsonpatch.JsonPatchOperation
	// Object is the object after defaulting (nil on DELETE).
	Object map[string]any
}

// Admitter is the admission chain. Default runs only the defaulters (the
// mutating webhook); Validate only the validation (the validating webhook,
// which sees the already-defaulted object); Admit both in that order, as
// `shepherd check` does. None of them returns an error for bad input: an
// undecodable object or a CEL failure is a Deny violation naming the cause.
type Admitter interface {
	Default(ctx context.Context, req *Request) *Verdict
	Validate(ctx context.Context, req *Request) *Verdict
	Admit(ctx context.Context, req *Request) *Verdict
}

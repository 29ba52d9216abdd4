package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Action is what a policy does when one of its validations fails.
// +kubebuilder:validation:Enum=Deny;Warn;Audit
type Action string

const (
	// ActionDeny rejects the request.
	ActionDeny Action = "Deny"
	// ActionWarn admits the request with an admission warning.
	ActionWarn Action = "Warn"
	// ActionAudit admits the request and only records the verdict.
	ActionAudit Action = "Audit"
)

// FailurePolicy says what happens when an expression fails to evaluate (a
// runtime error or a cost-budget overrun).
// +kubebuilder:validation:Enum=Fail;Ignore
type FailurePolicy string

const (
	// FailurePolicyFail denies the request, naming the rule.
	FailurePolicyFail FailurePolicy = "Fail"
	// FailurePolicyIgnore admits the request with a warning naming the rule.
	FailurePolicyIgnore FailurePolicy = "Ignore"
)

// WorkloadPolicySpec is one rule: which requests it applies to, and the CEL
// validations they must pass. The shape follows ValidatingAdmissionPolicy so a
// policy exports as one directly.
type WorkloadPolicySpec struct {
	// Action is what a failed validation does: Deny (default), Warn or Audit.
	// +kubebuilder:default=Deny
	// +optional
	Action Action `json:"action,omitempty"`

	// FailurePolicy is Fail (default: an evaluation error denies) or Ignore
	// (an evaluation error admits with a warning).
	// +kubebuilder:default=Fail
	// +optional
	FailurePolicy FailurePolicy `json:"failurePolicy,omitempty"`

	// Match selects the requests the policy applies to.
	Match Match `json:"match"`

	// MatchConditions further filter requests; all must be true. Same
	// semantics as a ValidatingAdmissionPolicy's matchConditions.
	// +listType=map
	// +listMapKey=name
	// +optional
	MatchConditions []MatchCondition `json:"matchConditions,omitempty"`

	// Variables are named CEL expressions available to later variables and
	// to validations as variables.<name>.
	// +listType=map
	// +listMapKey=name
	// +optional
	Variables []Variable `json:"variables,omitempty"`

	// Validations are the CEL expressions every matched request must pass.
	// +kubebuilder:validation:MinItems=1
	Validations []Validation `json:"validations"`
}

// Match selects requests by resource, namespace and object labels.
type Match struct {
	// Resources lists the kinds or resources matched; at least one entry.
	// +kubebuilder:validation:MinItems=1
	Resources []ResourceRule `json:"resources"`

	// NamespaceSelector matches the labels of the request's namespace;
	// cluster-scoped objects always match.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// ObjectSelector matches the labels of the object (or of the old object).
	// +optional
	ObjectSelector *metav1.LabelSelector `json:"objectSelector,omitempty"`
}

// ResourceRule matches requests for kinds and/or resources of API groups.
type ResourceRule struct {
	// APIGroups are the groups matched ("" is the core group, "*" any).
	// +kubebuilder:validation:MinItems=1
	APIGroups []string `json:"apiGroups"`

	// Kinds are the kinds matched ("*" any).
	// +optional
	Kinds []string `json:"kinds,omitempty"`

	// Resources are the lower-case plural resources matched ("*" any).
	// +optional
	Resources []string `json:"resources,omitempty"`

	// Operations are CREATE, UPDATE, DELETE or "*"; default CREATE and UPDATE.
	// +optional
	Operations []string `json:"operations,omitempty"`
}

// MatchCondition is a named CEL expression that must be true for the policy
// to apply.
type MatchCondition struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	Expression string `json:"expression"`
}

// Variable is a named CEL expression.
type Variable struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	Expression string `json:"expression"`
}

// Validation is one CEL expression that must evaluate to true.
type Validation struct {
	// Expression must evaluate to true for the request to pass.
	// +kubebuilder:validation:MinLength=1
	Expression string `json:"expression"`

	// Message is shown when the expression is false.
	// +optional
	Message string `json:"message,omitempty"`

	// MessageExpression computes the message; it wins over Message when it
	// evaluates to a non-empty string.
	// +optional
	MessageExpression string `json:"messageExpression,omitempty"`

	// Reason is the HTTP status reason of a denial: Invalid (default),
	// Forbidden, Unauthorized or RequestEntityTooLarge.
	// +optional
	Reason *metav1.StatusReason `json:"reason,omitempty"`

	// FieldPath is the field the violation is reported on, e.g.
	// "spec.activeDeadlineSeconds".
	// +optional
	FieldPath string `json:"fieldPath,omitempty"`

	// FieldPathsExpression is shepherd's extension to FieldPath: a CEL
	// expression returning the list of offending field paths (for example
	// "spec.template.cliques[1].spec.minAvailable"), evaluated only when the
	// validation fails; one violation is reported per path. It is not part of
	// an exported ValidatingAdmissionPolicy, which reports FieldPath instead.
	// +optional
	FieldPathsExpression string `json:"fieldPathsExpression,omitempty"`
}

// WorkloadPolicyStatus reports whether the policy compiled and is applied.
type WorkloadPolicyStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready is True when the policy compiled and is enforced,
	// False (reason CompileError) when it is not applied at all.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// CompileErrors lists every expression that failed to compile or to
	// type-check, by field path (spec.validations[0].expression).
	// +optional
	CompileErrors []CompileError `json:"compileErrors,omitempty"`

	// Violations is how many stored objects fail the policy now, as the
	// background audit (the leader replica) last found them: every object
	// of a kind the policy matches, judged as a create of it. Unset until
	// the policy has been audited, and while it does not compile. The
	// audit alone writes Violations, ViolationSamples, AuditedGeneration and
	// LastAuditTime; the compile status above leaves them as they are.
	// +optional
	Violations *int32 `json:"violations,omitempty"`

	// ViolationSamples are the first violations (at most 5), ordered by
	// namespace, name, kind and field: enough to find the offenders
	// without listing thousands in one object.
	// +kubebuilder:validation:MaxItems=5
	// +listType=atomic
	// +optional
	ViolationSamples []ViolationSample `json:"violationSamples,omitempty"`

	// AuditedGeneration is the generation of the policy the audit figures
	// were found with.
	// +optional
	AuditedGeneration int64 `json:"auditedGeneration,omitempty"`

	// LastAuditTime is when the audit pass that found the figures ran.
	// +optional
	LastAuditTime *metav1.Time `json:"lastAuditTime,omitempty"`
}

// ViolationSample is one stored object's failed validation.
type ViolationSample struct {
	// APIVersion and Kind of the object, e.g. trainer.kubeflow.org/v1alpha1 TrainJob.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Namespace of the object; empty for a cluster-scoped one.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Field is the offending field path, e.g. spec.trainer.numNodes.
	// +optional
	Field string `json:"field,omitempty"`
	// Message is the validation's message (at most 1024 characters).
	Message string `json:"message"`
}

// CompileError is one expression that failed to compile.
type CompileError struct {
	// FieldPath locates the expression, e.g. spec.validations[1].expression.
	FieldPath string `json:"fieldPath"`
	// Message is the compiler's message.
	Message string `json:"message"`
}

// WorkloadPolicy is an admin's cluster-wide CEL rule on AI workloads.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=wp
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="True when the policy compiled and is enforced"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,description="Compiled, or CompileError: the policy is not applied at all"
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.action`,description="What a failed validation does: Deny, Warn or Audit"
// +kubebuilder:printcolumn:name="Violations",type=integer,JSONPath=`.status.violations`,description="Stored objects that fail the policy now (the background audit; empty until audited)"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WorkloadPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WorkloadPolicySpec   `json:"spec,omitempty"`
	Status WorkloadPolicyStatus `json:"status,omitempty"`
}

// WorkloadPolicyList is a list of WorkloadPolicies.
// +kubebuilder:object:root=true
type WorkloadPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkloadPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&WorkloadPolicy{}, &WorkloadPolicyList{})
}

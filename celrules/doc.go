// Package celrules is shepherd's CEL policy engine: the rule model (the shape
// of a ValidatingAdmissionPolicy: match, matchConditions, variables,
// validations, action, failurePolicy), its compiler (cel-go with the
// Kubernetes CEL environment and libraries of k8s.io/apiserver, the same
// compiler a kube-apiserver uses for ValidatingAdmissionPolicies),
// type-checking against the structural schemas of shepherd's CRDs, evaluation
// with per-expression cost limits and a per-request budget, the built-in rule
// library (one embedded YAML file per rule family), and the export of rules
// as native ValidatingAdmissionPolicies.
//
// The engine only knows CEL rules. Checks that need other objects or
// discovery (V-TJ-3, V-TJ-4, V-PCLQ-1, V-TR-7) live in package webhook.
package celrules

// Package celrules is shepherd's CEL policy engine: the rule model (a
// WorkloadPolicy spec: the shape of a ValidatingAdmissionPolicy plus an
// action and field paths), the built-in rule library (one YAML file per
// kind, which each integration embeds beside it: BuiltinRules), and the export of rules as native
// ValidatingAdmissionPolicies — and the defaults (D-*), defined once by
// their integrations as the MutatingAdmissionPolicies they export as
// (integrations/mapdefault; defaults.go exports them) and applied
// in-process by the apiserver's own mutating code (defaulting.go).
//
// The engine is the apiserver's admission-policy machinery, not a copy of
// it. Every rule is turned into the ValidatingAdmissionPolicy it exports as
// (export.go) and that one definition is what shepherd compiles, matches and
// runs: k8s.io/apiserver's composited compiler with lazy variables,
// matchconditions matcher and validating.Validator (compile.go), its policy
// matcher for resources, operations and the namespace and object selectors
// (eval.go), and its validating.TypeChecker against the schemas the target
// cluster serves (schemas.go). Budgets, matchConditions, failurePolicy,
// messages and selectors therefore behave as a VAP binding does because they
// are the same code. shepherd wraps it only where a ValidatingAdmissionPolicy
// has nothing to offer: the field path of each violation (fieldPath,
// fieldPathsExpression, evaluated for failed validations only), load-time
// compile errors with the path of each expression (the apiserver reports them
// at evaluation), and refusing rules its webhook would never be sent
// (scope.go).
//
// The engine only knows CEL rules. Checks that need other objects or
// discovery (V-TJ-3, V-TJ-4, V-PCLQ-1, V-TR-7, and the default D-WL-1) are
// Go checks their integrations register (integrations/trainer,
// integrations/grove; package gocheck), which package webhook runs.
package celrules

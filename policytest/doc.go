// Package policytest runs declarative test suites of shepherd's admission
// chain: `shepherd test`. A suite is a YAML file that names WorkloadPolicy
// files and context objects, and lists cases, each an object (and, for an
// UPDATE, its stored version) with the expected result: allowed or denied,
// the exact set of violations (rule and field), the warnings, and values
// of the object after defaulting. FORMAT.md documents the format.
//
// The package loads and checks suites (every error names the file and
// line, unknown keys included), runs their cases through an AdmitFunc, and
// reports every mismatch between expectation and result as text, JSON or
// JUnit XML. Building the chain is the caller's: `shepherd test` builds it
// exactly as `shepherd check` does, so a suite's verdicts are check's.
//
// A minimal suite:
//
//	apiVersion: shepherd.dev/v1alpha1
//	kind: PolicyTest
//	policies: [policy.yaml]
//	context: [runtimes.yaml]
//	cases:
//	- name: zero-deadline-denied
//	  object:
//	    apiVersion: trainer.kubeflow.org/v1alpha1
//	    kind: TrainJob
//	    metadata: {name: tj}
//	    spec: {runtimeRef: {name: torch}, activeDeadlineSeconds: 0}
//	  expect:
//	    allowed: false
//	    violations: [{rule: V-TJ-1, field: spec.activeDeadlineSeconds}]
//
// Suites are found by name: Discover walks directories for files named
// *-test.yaml, so each policy directory can carry its own suite (as
// kyverno-test.yaml does for Kyverno).
package policytest

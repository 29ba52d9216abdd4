// Package api holds the Go types of every resource shepherd admits or
// reconciles, one package per API group/version beneath it, and — in this
// package — the constants shared by every part of shepherd: API groups, label
// keys, condition types and reasons, and event reasons. They are defined once
// here so the webhook, the reconcilers and the tests cannot drift apart.
//
// The third-party types of Kubeflow Trainer and Grove model only the fields
// shepherd reads or writes; their CRDs preserve every other field so a real
// object survives a round trip unchanged (test/foundation checks it;
// docs/architecture.md, "Test suites"). JobSet's types are the upstream
// module's (sigs.k8s.io/jobset); api/trainer/v1alpha1 says why Trainer's are
// not.
package api

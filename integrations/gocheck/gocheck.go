// Package gocheck is the shape of a rule an integration writes in Go because
// no admission policy can express it: it looks up another object, or asks
// discovery. An integration (integrations/trainer, integrations/grove) lists
// its checks in the Framework it registers (integrations.Register), and the
// admission chain (package webhook) runs whatever is registered without
// naming a framework. Everything a policy can express is a built-in CEL
// rule (its rules/*.yaml) or a default (package mapdefault) of its
// integration instead, which package celrules runs.
package gocheck

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Lookups is everything a check needs beyond the request: other objects,
// and discovery. Absent objects are apierrors NotFound. The objects returned
// may be the informer cache's own: read them, never modify them.
type Lookups interface {
	// Get returns the object of kind gvk (the typed object when the
	// scheme knows the kind) named namespace/name.
	Get(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (client.Object, error)
	// WorkloadAPIServed reports whether the cluster serves the Workload
	// API (integrations.WorkloadAPIProbe).
	WorkloadAPIServed() bool
}

// Request is an admission request as a check sees it: the objects decoded
// as apimachinery decodes JSON (integers as int64).
type Request struct {
	Operation string // CREATE, UPDATE
	Namespace string
	Kind      schema.GroupKind
	Object    map[string]any
	OldObject map[string]any // nil unless UPDATE
}

// Finding is what a check denies: the chain names the check's rule.
type Finding struct {
	Field, Message string
	// Reason is the field error type of the 422 cause (apierrors), empty
	// for Invalid.
	Reason string
}

// Check is one rule written in Go.
type Check struct {
	ID          string
	Group       string
	Kinds       []string
	Description string
	// Reason says why no admission policy can express it.
	Reason string
	// Operations are those the check judges (CREATE, UPDATE).
	Operations []string
	// UpstreamWebhook names the upstream validating webhook that enforces
	// the same thing where it is registered with failurePolicy Fail
	// (UpstreamOperation its operation): shepherd then stands down.
	UpstreamWebhook, UpstreamOperation string

	// Validate judges a request (a validating check).
	Validate func(ctx context.Context, l Lookups, r *Request) []Finding
	// Default changes r.Object in place (a defaulting check) and reports
	// whether it did, with warnings for the user; a non-nil Finding denies
	// the request (a lookup that failed, so the creator retries).
	Default func(ctx context.Context, l Lookups, r *Request) (changed bool, warnings []string, deny *Finding)
}

// Judges reports whether c judges an op request on a kind of group.
func (c *Check) Judges(group, kind, op string) bool {
	if group != c.Group {
		return false
	}
	kindOK, opOK := false, false
	for _, k := range c.Kinds {
		kindOK = kindOK || k == kind
	}
	for _, o := range c.Operations {
		opOK = opOK || o == op
	}
	return kindOK && opOK
}

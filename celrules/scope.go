package celrules

import (
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/shepherd-k8s/shepherd/integrations"
)

// WebhookOperations are the operations shepherd's webhook configurations
// (deploy/webhook) send; a rule asking for any other could never fire in the
// webhook, so it is refused rather than accepted silently.
var WebhookOperations = []string{"CREATE", "UPDATE"}

// ScopedKind is a kind shepherd's webhook is sent, with its plural resource.
type ScopedKind struct {
	schema.GroupKind
	Resource string
}

// WebhookKinds are the kinds, with their plural resources, shepherd's webhook
// configurations send: every registered framework's (deploy/webhook;
// test/deploy checks the two agree). A rule may only name these: anything
// else could never fire in the webhook.
var WebhookKinds = webhookKinds()

func webhookKinds() []ScopedKind {
	var out []ScopedKind
	for _, f := range integrations.Frameworks {
		for i, k := range f.Kinds {
			out = append(out, ScopedKind{schema.GroupKind{Group: f.Group, Kind: k}, f.Resources[i]})
		}
	}
	return out
}

// scopeErrors refuses what the webhook is never sent: operations other
// than CREATE and UPDATE, groups, kinds and resources outside WebhookKinds,
// and wildcards (which would make the exported policy apply to far more
// than the webhook sees). Each error names the field and the values that
// would work, with a close match for a misspelling.
func scopeErrors(r Rule, spec *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, rr := range r.Match.Resources {
		p := spec.Child("match", "resources").Index(i)
		for j, op := range rr.Operations {
			if !slices.Contains(WebhookOperations, op) {
				errs = append(errs, field.Invalid(p.Child("operations").Index(j), op,
					"shepherd's webhook configurations send only CREATE and UPDATE, so this rule would never run for "+op+"; list CREATE and/or UPDATE, or write a ValidatingAdmissionPolicy directly for "+op))
			}
		}
		var groups []string
		for j, g := range rr.APIGroups {
			if !slices.ContainsFunc(WebhookKinds, func(k ScopedKind) bool { return k.Group == g }) {
				errs = append(errs, field.NotSupported(p.Child("apiGroups").Index(j), g, webhookGroups()))
				continue
			}
			groups = append(groups, g)
		}
		for j, k := range rr.Kinds {
			if !inScope(groups, func(gk schema.GroupKind, _ string) bool { return gk.Kind == k }) {
				errs = append(errs, field.NotSupported(p.Child("kinds").Index(j), k, scopeNames(groups, false)))
			}
		}
		for j, res := range rr.Resources {
			if !inScope(groups, func(_ schema.GroupKind, resource string) bool { return resource == res }) {
				errs = append(errs, field.NotSupported(p.Child("resources").Index(j), res, scopeNames(groups, true)))
			}
		}
	}
	return errs
}

// inScope reports whether, in every one of groups, some kind of the webhook's
// scope satisfies match: a kind listed with two groups must exist in both.
func inScope(groups []string, match func(schema.GroupKind, string) bool) bool {
	if len(groups) == 0 {
		return true // the group itself is reported
	}
	for _, g := range groups {
		found := false
		for _, k := range WebhookKinds {
			if k.Group == g && match(k.GroupKind, k.Resource) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func webhookGroups() []string {
	var out []string
	for _, k := range WebhookKinds {
		if !slices.Contains(out, k.Group) {
			out = append(out, k.Group)
		}
	}
	return out
}

// scopeNames lists the kinds (or resources) of groups, for a NotSupported
// error.
func scopeNames(groups []string, resources bool) []string {
	var out []string
	for _, k := range WebhookKinds {
		if len(groups) > 0 && !slices.Contains(groups, k.Group) {
			continue
		}
		name := k.Kind
		if resources {
			name = k.Resource
		}
		out = append(out, name)
	}
	return out
}

// webhookResource returns the plural resource of a kind in the webhook's
// scope.
func webhookResource(gk schema.GroupKind) (string, bool) {
	for _, k := range WebhookKinds {
		if k.GroupKind == gk {
			return k.Resource, true
		}
	}
	return "", false
}

// Package mapdefault is the shape of a default an integration defines
// once, as the MutatingAdmissionPolicy it exports as: the part of the
// policy the default decides (variables, matchConditions, JSON patches),
// built for a configuration and the knobs' forms on the target schemas.
// An integration (integrations/jobset, integrations/grove) lists its
// defaults in the Framework it registers (integrations.Register); package
// celrules type-checks them, runs them in-process with the apiserver's
// mutating code and exports them (`shepherd export map`) without naming a
// framework. A default that needs a lookup is a gocheck.Check instead.
package mapdefault

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// Rule is one defaulting rule.
type Rule struct {
	ID   string
	Kind schema.GroupKind
	// Build returns the policy's body for the context, or why nothing is
	// exported under it (a rule that would never change an object there).
	Build func(c Context) (Body, string)
	// Description is the rule's line in listings.
	Description string
	// Warning is what the webhook and `shepherd check` tell the user when
	// the rule changed the object; an exported policy cannot warn.
	Warning string
}

// Body is the part of a MutatingAdmissionPolicy spec a rule decides.
type Body struct {
	Variables       []admissionregistrationv1.Variable
	MatchConditions []admissionregistrationv1.MatchCondition
	// Patches are JSONPatch expressions, applied in order.
	Patches []string
}

// Context is what a rule's policy depends on: the configuration (which
// rules are on, D-PCS-5's default, D-JS-2's rewrite) and the target
// schemas (the knobs' forms).
type Context struct {
	Schemas knob.FieldSchemas
	// Enabled reports whether a rule is on.
	Enabled func(id string) bool
	// InferenceTerminationDelay is serve's --inference-termination-delay.
	InferenceTerminationDelay *metav1.Duration
	// DisableStartupPolicyRewrite is serve's
	// --disable-startup-policy-rewrite.
	DisableStartupPolicyRewrite bool
}

// Cond is a named matchCondition.
func Cond(name, expression string) admissionregistrationv1.MatchCondition {
	return admissionregistrationv1.MatchCondition{Name: name, Expression: expression}
}

// HasSpec is the condition of a default that does nothing to an object
// without a spec.
func HasSpec() []admissionregistrationv1.MatchCondition {
	return []admissionregistrationv1.MatchCondition{Cond("has-spec", "has(object.spec)")}
}

// KnobRaw is the optional of a knob's stored value as package knob reads
// it (Lookup): the seed field, else the carrier; only the carrier where
// the schema lacks the field (which the apiserver has pruned, and which an
// expression may not name).
func (c Context) KnobRaw(k knob.Knob) string {
	if k.Form(c.Schemas) == knob.Annotation {
		return k.CELRaw(knob.Annotation, "object")
	}
	return k.CELRaw(knob.Field, "object") + ".or(" + k.CELRaw(knob.Annotation, "object") + ")"
}

// SetKnob is the JSON patch that sets an unset knob of a top-level spec
// field to value (a CEL string literal for the carrier, the typed literal
// for the field), in the form the schema keeps.
func (c Context) SetKnob(k knob.Knob, value string) string {
	if k.Form(c.Schemas) == knob.Field {
		return fmt.Sprintf("[JSONPatch{op: 'add', path: '/%s', value: %s}]", strings.Join(k.Path, "/"), value)
	}
	return fmt.Sprintf(`has(object.metadata.annotations) ?
  [JSONPatch{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('%[1]s'), value: %[2]s}] :
  [JSONPatch{op: 'add', path: '/metadata/annotations', value: {'%[1]s': %[2]s}}]`, k.Annotation, value)
}

package webhook

import (
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// RuleSchema names the violations of an object that does not fit its
// kind's schema: a field of the wrong type, or (from check) a field the
// schema does not have.
const RuleSchema = "schema"

// schemaCheck denies an object with a field of the wrong type for its
// kind's schema, with the field errors the apiserver's own validation of
// the custom resource gives (celrules.Schemas.ValidateObject), so the user
// reads "spec.trainer.numNodes ... must be of type integer", not what a
// rule's expression makes of a string ("no such overload"). Such an object
// is not judged further: no defaulter or rule runs on it.
//
// Only a type error stops the chain. The apiserver reports its other
// schema errors (enum, minimum, required, ...) too, and they are listed
// with the type errors then; on their own they leave the object to the
// chain, whose rules report several of them in shepherd's words (V-TJ-1
// is the schema's minimum of activeDeadlineSeconds), and the apiserver
// rejects the rest itself before the object is stored.
//
// It returns nil when the object is fine or is not checked: no object
// (DELETE), or a kind without a schema in the chain's schemas. It changes
// obj and old as the apiserver's decoding would (see DropNulls below).
//
// Only a chain built with CheckSchemas runs it (`shepherd check`): in the
// webhook the apiserver has validated the object against its schema before
// the validating webhook is called, and the mutating webhook's defaulters
// leave a field of the wrong type alone, so the check would only repeat,
// at about half a millisecond per object, what the apiserver does next.
func (c *Chain) schemaCheck(req *Request, obj, old map[string]any) *Verdict {
	if obj == nil || !c.checkSchemas {
		return nil
	}
	gvk := schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind}
	s := c.engine.Schemas()
	// The apiserver drops the nulls of fields that are neither nullable nor
	// defaulted when it decodes a custom resource, before any webhook sees
	// it (Go clients send them for every nil slice): do the same for
	// callers that hand the chain an object straight from a client, so a
	// null is not taken for a value of the wrong type. A no-op on what the
	// apiserver sends.
	s.DropNulls(gvk, obj)
	if old != nil {
		s.DropNulls(gvk, old)
	}
	var errs field.ErrorList
	if req.Operation == admissionv1.Update && old != nil {
		// As the apiserver: errors in values the update did not change are
		// ratcheted, so an object stored under an older schema stays
		// updatable.
		errs = s.ValidateObjectUpdate(gvk, obj, old)
	} else {
		errs = s.ValidateObject(gvk, obj)
	}
	wrongType := false
	for _, e := range errs {
		wrongType = wrongType || e.Type == field.ErrorTypeTypeInvalid
	}
	if !wrongType {
		return nil
	}
	v := &Verdict{Allowed: false, Object: obj}
	for _, e := range errs {
		fieldPath := e.Field
		if fieldPath == (*field.Path)(nil).String() {
			fieldPath = "" // the apiserver's "<nil>": an error about the object as a whole
		}
		v.Violations = append(v.Violations, Violation{
			Rule:    RuleSchema,
			Field:   fieldPath,
			Message: e.ErrorBody(),
			Action:  ActionDeny,
			Reason:  string(e.Type),
		})
	}
	return v
}

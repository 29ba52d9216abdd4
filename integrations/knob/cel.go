package knob

import (
	"fmt"
	"strings"
)

// The CEL forms of a knob, for the built-in rules (celrules expands them
// against the schemas of the cluster, so a rule type-checks there and an
// exported ValidatingAdmissionPolicy reads the same form).

// CELRaw is an optional of the knob's stored value on obj (a CEL variable
// such as object or oldObject): the field's value, or the annotation's
// string.
func (k Knob) CELRaw(f Form, obj string) string {
	if f == Annotation {
		return fmt.Sprintf("%s.metadata.?annotations[?'%s']", obj, k.Annotation)
	}
	return obj + ".?" + strings.Join(k.Path, ".?")
}

// CELValue is the knob's typed value on obj in form f: optional<int> for
// Int, optional<string> for String, optional<duration> for Duration, bool
// for Presence. A carrier that does not parse reads as absent; CELValid
// reports it.
func (k Knob) CELValue(f Form, obj string) string {
	raw := k.CELRaw(f, obj)
	switch k.Type {
	case Presence:
		if f == Annotation {
			return fmt.Sprintf("%s.orValue('') == '%s'", raw, k.Value)
		}
		return raw + ".hasValue()"
	case Int:
		if f == Annotation {
			return fmt.Sprintf("((%s).orValue('').matches(r'%s') ? optional.of(int((%s).orValue(''))) : optional.none())", raw, IntRegex, raw)
		}
		return raw
	case Duration:
		if f == Annotation {
			return fmt.Sprintf("((%s).orValue('').matches(r'%s') ? optional.of(duration((%s).orValue(''))) : optional.none())", raw, DurationRegex, raw)
		}
		return fmt.Sprintf("((%s).hasValue() ? optional.of(duration((%s).orValue(''))) : optional.none())", raw, raw)
	}
	return raw
}

// CELText is the knob's stored value on obj as a CEL string, for
// messages (” when absent). (optional.value() is typed dyn, and some
// functions then find no overload at run time; orValue keeps the type.)
func (k Knob) CELText(f Form, obj string) string {
	raw := k.CELRaw(f, obj)
	if f == Field && k.Type == Int {
		return fmt.Sprintf("string((%s).orValue(0))", raw)
	}
	if f == Field && k.Type == Presence {
		return fmt.Sprintf("((%s).hasValue() ? 'set' : '')", raw)
	}
	return fmt.Sprintf("(%s).orValue('')", raw)
}

// CELValid is true unless obj carries the knob in an annotation that does
// not parse (the field form is typed by the schema).
func (k Knob) CELValid(f Form, obj string) string {
	if f == Field {
		return "true"
	}
	raw := k.CELRaw(f, obj)
	switch k.Type {
	case Int:
		return fmt.Sprintf("(!(%s).hasValue() || (%s).orValue('').matches(r'%s'))", raw, raw, IntRegex)
	case Duration:
		return fmt.Sprintf("(!(%s).hasValue() || (%s).orValue('').matches(r'%s'))", raw, raw, DurationRegex)
	case Presence:
		return fmt.Sprintf("(!(%s).hasValue() || (%s).orValue('') == '%s')", raw, raw, k.Value)
	}
	return "true"
}

// ValidDescription says what a well-formed carrier holds, for messages.
func (k Knob) ValidDescription() string {
	switch k.Type {
	case Int:
		return "an integer"
	case Duration:
		return "a duration such as 90m or 1h30m"
	case Presence:
		return fmt.Sprintf("%q", k.Value)
	}
	return "a string"
}

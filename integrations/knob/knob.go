// Package knob is the one place that knows a seed knob's forms. A knob is a
// setting the seed designs put in a field of another project's object
// (a runtime's ttlSecondsAfterFinished, a PodCliqueSet's workloadType, ...).
// Where the schema the cluster serves has that field, the field is the
// knob; where it does not (today's upstream CRDs), an annotation on the same
// object carries it (docs/concepts.md, "Carriers: seed knobs in
// shepherd.dev/ annotations"). Every reader — defaulters, CEL rules, export,
// reconcilers — goes through a Knob, so a new upstream shape of a knob is
// one more form here, not a change everywhere.
//
// Reading accepts both forms (the field wins): an object stored before a
// CRD upgrade keeps its annotation. Writing and the CEL rules use the form
// the served schema has, decided by Form.
package knob

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Type is a knob's value type.
type Type int

const (
	// Int is an integer (seconds, a count).
	Int Type = iota
	// String is a string (an enumeration).
	String
	// Duration is a Go duration string ("90m", "1h30m").
	Duration
	// Presence is an object whose presence is the setting (the field form
	// podGroupPolicy.workload: {}); its carrier holds Value.
	Presence
)

// Form is where a knob lives on a cluster.
type Form int

const (
	// Field is the seed field.
	Field Form = iota
	// Annotation is the carrier annotation.
	Annotation
)

func (f Form) String() string {
	if f == Field {
		return "field"
	}
	return "annotation"
}

// Knob is one seed setting on another project's object.
type Knob struct {
	// Name is the seed field's name; it names the knob in logs and docs.
	Name string
	// Group and Kinds are the objects that carry it.
	Group string
	Kinds []string
	// Path is the seed field's path from the object's root.
	Path []string
	// Annotation is the carrier.
	Annotation string
	Type       Type
	// Value is what the carrier holds for a Presence knob.
	Value string
}

// FieldSchemas answers whether a served schema has a field: the schemas
// the cluster serves (celrules.Schemas implements it).
type FieldSchemas interface {
	// HasField reports whether gk's schema (any served version) has path;
	// "[]" in path steps into a list's items.
	HasField(gk schema.GroupKind, path []string) bool
}

// Form is the form the knob takes on a cluster serving s: the seed field
// when every kind's schema has it, else the annotation. A nil s (no schema
// known) means the field.
func (k Knob) Form(s FieldSchemas) Form {
	if s == nil {
		return Field
	}
	for _, kind := range k.Kinds {
		if !s.HasField(schema.GroupKind{Group: k.Group, Kind: kind}, k.Path) {
			return Annotation
		}
	}
	return Field
}

// FieldPath is the knob's location in form f, as a field path for messages
// and CEL fieldPath: spec.ttlSecondsAfterFinished, or
// metadata.annotations['shepherd.dev/ttl-seconds-after-finished'].
func (k Knob) FieldPath(f Form) string {
	if f == Annotation {
		return "metadata.annotations['" + k.Annotation + "']"
	}
	return strings.Join(k.Path, ".")
}

// Describe names the knob in form f for a user, as messages start: the
// field's name ("workloadType"; the message's field path says where), or
// "annotation shepherd.dev/workload-type".
func (k Knob) Describe(f Form) string {
	if f == Annotation {
		return "annotation " + k.Annotation
	}
	return k.Path[len(k.Path)-1]
}

// Raw is a knob's value as found on an object.
type Raw struct {
	// Value is the field's decoded JSON value, or the annotation's string.
	Value any
	// Form says where it was found.
	Form Form
}

// Lookup finds the knob on obj (the decoded JSON of the object): the field
// first, then the annotation.
func (k Knob) Lookup(obj map[string]any) (Raw, bool) {
	if v, ok, _ := unstructured.NestedFieldNoCopy(obj, k.Path...); ok && v != nil {
		return Raw{Value: v, Form: Field}, true
	}
	if a, ok, _ := unstructured.NestedString(obj, "metadata", "annotations", k.Annotation); ok {
		return Raw{Value: a, Form: Annotation}, true
	}
	return Raw{}, false
}

// Int reads an Int knob. A carrier that is not an integer is an error
// naming the annotation (admission rejects it; a reconciler reports it).
func (k Knob) Int(obj map[string]any) (*int64, error) {
	raw, ok := k.Lookup(obj)
	if !ok {
		return nil, nil
	}
	switch v := raw.Value.(type) {
	case int64:
		return &v, nil
	case float64:
		n := int64(v)
		return &n, nil
	case int:
		n := int64(v)
		return &n, nil
	case string:
		n, err := ParseInt(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.Describe(raw.Form), err)
		}
		return &n, nil
	}
	return nil, fmt.Errorf("%s: want an integer, got %T", k.Describe(raw.Form), raw.Value)
}

// Duration reads a Duration knob.
func (k Knob) Duration(obj map[string]any) (*time.Duration, error) {
	raw, ok := k.Lookup(obj)
	if !ok {
		return nil, nil
	}
	s, isString := raw.Value.(string)
	if !isString {
		return nil, fmt.Errorf("%s: want a duration string, got %T", k.Describe(raw.Form), raw.Value)
	}
	d, err := ParseDuration(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %q is not a duration (e.g. 90m, 1h30m)", k.Describe(raw.Form), s)
	}
	return &d, nil
}

// ParseDuration parses a duration as the rules' CEL reads one: by
// time.ParseDuration and the pattern DurationRegex, since ParseDuration
// alone also takes forms the CEL refuses (0, +5s, .5h), and the two must
// agree on every carrier.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil && !durationPattern.MatchString(s) {
		err = fmt.Errorf("%q does not match %s", s, DurationRegex)
	}
	return d, err
}

// String reads a String knob.
func (k Knob) String(obj map[string]any) (string, bool) {
	raw, ok := k.Lookup(obj)
	if !ok {
		return "", false
	}
	s, isString := raw.Value.(string)
	return s, isString
}

// Present reads a Presence knob: the field exists, or the carrier holds
// Value.
func (k Knob) Present(obj map[string]any) bool {
	if v, ok, _ := unstructured.NestedFieldNoCopy(obj, k.Path...); ok && v != nil {
		return true
	}
	a, ok, _ := unstructured.NestedString(obj, "metadata", "annotations", k.Annotation)
	return ok && a == k.Value
}

// ParseInt parses a carrier's integer: decimal, optional sign, at most 18
// digits (always fits an int64; the CEL rules use the same pattern).
func ParseInt(s string) (int64, error) {
	if !intPattern(s) {
		return 0, fmt.Errorf("%q is not an integer", s)
	}
	return strconv.ParseInt(s, 10, 64)
}

func intPattern(s string) bool {
	d := strings.TrimPrefix(s, "-")
	if d == "" || len(d) > 18 {
		return false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// IntRegex is intPattern as a regular expression, for CEL.
const IntRegex = `^-?[0-9]{1,18}$`

// DurationRegex is what a Duration knob accepts, in the rules' CEL (which
// checks it before calling duration()) and in Go (Knob.Duration): what
// time.ParseDuration and CEL's duration() both parse, less the forms
// nobody writes and the rules refuse (a bare "0", a leading "+", a number
// without integer digits as ".5h", the Greek "μs"). A negative value
// matches, and the rules then report it as out of range rather than
// malformed.
const DurationRegex = `^-?([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`

var durationPattern = regexp.MustCompile(DurationRegex)

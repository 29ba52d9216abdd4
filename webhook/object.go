package webhook

import (
	"gomodules.xyz/jsonpatch/v2"

	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// Helpers to read and default the raw object. Defaulters work on the decoded
// JSON, not on shepherd's partial Go types, so fields shepherd does not model
// survive untouched.

// obj returns m[key] as an object, or nil.
func obj(m map[string]any, key string) map[string]any {
	if m == nil {
		return nil
	}
	o, _ := m[key].(map[string]any)
	return o
}

// path walks nested objects, or returns nil.
func path(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		m = obj(m, k)
	}
	return m
}

// ensure returns m[key] as an object, creating it when absent. It returns
// nil when m[key] is present but not an object: such a field is left for
// validation to report.
func ensure(m map[string]any, key string) map[string]any {
	v, ok := m[key]
	if !ok || v == nil {
		o := map[string]any{}
		m[key] = o
		return o
	}
	o, _ := v.(map[string]any)
	return o
}

// items returns m[key] as a list of objects (non-objects skipped).
func items(m map[string]any, key string) []map[string]any {
	if m == nil {
		return nil
	}
	l, _ := m[key].([]any)
	out := make([]map[string]any, 0, len(l))
	for _, e := range l {
		if o, ok := e.(map[string]any); ok {
			out = append(out, o)
		}
	}
	return out
}

// unset reports whether m has no value at key (absent or null).
func unset(m map[string]any, key string) bool {
	v, ok := m[key]
	return !ok || v == nil
}

// setDefault sets m[key] = v when unset and reports whether it did.
func setDefault(m map[string]any, key string, v any) bool {
	if m == nil || !unset(m, key) {
		return false
	}
	m[key] = v
	return true
}

// recorder collects the JSON patch of a defaulter that only fills unset
// fields, as it fills them: such a kind needs neither a copy of the object
// nor a diff.
type recorder struct {
	ops []jsonpatch.JsonPatchOperation
}

// setDefault is the package's setDefault that also records the operation;
// at are the JSON pointer segments of m in the object.
func (r *recorder) setDefault(m map[string]any, key string, v any, at ...string) bool {
	_, null := m[key] // present but unset: null
	if !setDefault(m, key, v) {
		return false
	}
	op := "add"
	if null {
		op = "replace"
	}
	r.ops = append(r.ops, jsonpatch.NewOperation(op, pointer(at, key), v))
	return true
}

// setKnobDefault defaults a seed knob that is set in neither form: the
// field (value, under parent's pointer at) where the schema s keeps it,
// else the carrier annotation (carrier). Only top-level spec fields take
// the field path here; deeper ones are written by their defaulter.
func (r *recorder) setKnobDefault(o map[string]any, k knob.Knob, s knob.FieldSchemas, value any, carrier string, at ...string) bool {
	if _, set := k.Lookup(o); set {
		return false
	}
	if k.Form(s) == knob.Field {
		return r.setDefault(path(o, at...), k.Path[len(k.Path)-1], value, at...)
	}
	return r.setAnnotation(o, k.Annotation, carrier)
}

// setAnnotation adds an annotation that is not there, creating
// metadata.annotations (and metadata) as needed, and records the patch.
func (r *recorder) setAnnotation(o map[string]any, key, value string) bool {
	md, ok := o["metadata"].(map[string]any)
	if !ok {
		md = map[string]any{}
		o["metadata"] = md
		r.ops = append(r.ops, jsonpatch.NewOperation("add", "/metadata", map[string]any{}))
	}
	ann, ok := md["annotations"].(map[string]any)
	if !ok {
		ann = map[string]any{}
		op := "add"
		if _, null := md["annotations"]; null {
			op = "replace"
		}
		md["annotations"] = ann
		r.ops = append(r.ops, jsonpatch.NewOperation(op, "/metadata/annotations", map[string]any{}))
	}
	return r.setDefault(ann, key, value, "metadata", "annotations")
}

func str(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

// integer reads a JSON number decoded by apimachinery (int64 or float64).
func integer(m map[string]any, key string) (int64, bool) {
	switch n := m[key].(type) {
	case int64:
		return n, true
	case float64:
		return int64(n), true
	}
	return 0, false
}

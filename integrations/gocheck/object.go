package gocheck

// Helpers to read and default the decoded JSON of an object. Checks work on
// it, not on Go types, so fields shepherd does not model survive untouched.

// Obj returns m[key] as an object, or nil.
func Obj(m map[string]any, key string) map[string]any {
	if m == nil {
		return nil
	}
	o, _ := m[key].(map[string]any)
	return o
}

// Path walks nested objects, or returns nil.
func Path(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		m = Obj(m, k)
	}
	return m
}

// Ensure returns m[key] as an object, creating it when absent. It returns
// nil when m[key] is present but not an object: such a field is left for
// validation to report.
func Ensure(m map[string]any, key string) map[string]any {
	v, ok := m[key]
	if !ok || v == nil {
		o := map[string]any{}
		m[key] = o
		return o
	}
	o, _ := v.(map[string]any)
	return o
}

// Items returns m[key] as a list of objects (non-objects skipped).
func Items(m map[string]any, key string) []map[string]any {
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

// Unset reports whether m has no value at key (absent or null).
func Unset(m map[string]any, key string) bool {
	v, ok := m[key]
	return !ok || v == nil
}

// Str returns m[key] as a string, or "".
func Str(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

// Int reads a JSON number decoded by apimachinery (int64 or float64).
func Int(m map[string]any, key string) (int64, bool) {
	switch n := m[key].(type) {
	case int64:
		return n, true
	case float64:
		return int64(n), true
	}
	return 0, false
}

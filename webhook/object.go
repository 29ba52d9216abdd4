package webhook

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

package webhook

import (
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
)

// jsonPatch returns the JSON patch (RFC 6902) that turns original into
// mutated, both decoded JSON objects, sorted by path. Objects are compared
// key by key and arrays of equal length element by element, so a default
// set deep inside an object is one "add" at its own path; anything else that
// differs is replaced whole. The defaulters only set, rewrite and remove
// fields, which this covers exactly; it works on the decoded values the
// chain already holds instead of encoding and re-parsing both documents.
func jsonPatch(original, mutated map[string]any) []jsonpatch.JsonPatchOperation {
	d := differ{path: make([]string, 0, 16)}
	d.objects(original, mutated)
	return sortedOps(d.ops)
}

// sortedOps orders a patch by path: a stable order keeps responses and
// `shepherd check` output diffable.
func sortedOps(ops []jsonpatch.JsonPatchOperation) []jsonpatch.JsonPatchOperation {
	slices.SortStableFunc(ops, func(a, b jsonpatch.JsonPatchOperation) int { return strings.Compare(a.Path, b.Path) })
	return ops
}

// differ walks two documents side by side. The JSON pointer of the current
// position is kept as segments and joined only when an operation is
// emitted: most of a document is unchanged, and a string per visited field
// would be most of the diff's cost.
type differ struct {
	path []string
	ops  []jsonpatch.JsonPatchOperation
}

func (d *differ) emit(op, key string, v any) {
	d.ops = append(d.ops, jsonpatch.NewOperation(op, pointer(d.path, key), v))
}

func (d *differ) objects(a, b map[string]any) {
	for k, av := range a {
		bv, ok := b[k]
		if !ok {
			d.emit("remove", k, nil)
			continue
		}
		d.values(k, av, bv)
	}
	for k, bv := range b {
		if _, ok := a[k]; !ok {
			d.emit("add", k, bv)
		}
	}
}

// values compares a[key] with b[key] of the objects or arrays at d.path.
func (d *differ) values(key string, a, b any) {
	switch av := a.(type) {
	case map[string]any:
		if bv, ok := b.(map[string]any); ok {
			d.path = append(d.path, key)
			d.objects(av, bv)
			d.path = d.path[:len(d.path)-1]
			return
		}
	case []any:
		if bv, ok := b.([]any); ok && len(av) == len(bv) {
			d.path = append(d.path, key)
			for i := range av {
				d.values(strconv.Itoa(i), av[i], bv[i])
			}
			d.path = d.path[:len(d.path)-1]
			return
		}
	}
	if !equalJSON(a, b) {
		d.emit("replace", key, b)
	}
}

// pointer is the JSON pointer (RFC 6901) of key under the segments.
func pointer(segments []string, key string) string {
	var sb strings.Builder
	n := len(segments) + 1 + len(key) // one '/' each; escapes grow it rarely
	for _, s := range segments {
		n += len(s)
	}
	sb.Grow(n)
	for _, s := range segments {
		sb.WriteByte('/')
		writeEscaped(&sb, s)
	}
	sb.WriteByte('/')
	writeEscaped(&sb, key)
	return sb.String()
}

// equalJSON compares decoded JSON values without reflection.
func equalJSON(a, b any) bool {
	switch av := a.(type) {
	case string:
		bv, ok := b.(string)
		return ok && av == bv
	case int64:
		bv, ok := b.(int64)
		return ok && av == bv
	case bool:
		bv, ok := b.(bool)
		return ok && av == bv
	case float64:
		bv, ok := b.(float64)
		return ok && av == bv
	case nil:
		return b == nil
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for k, x := range av {
			y, ok := bv[k]
			if !ok || !equalJSON(x, y) {
				return false
			}
		}
		return true
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for i := range av {
			if !equalJSON(av[i], bv[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// writeEscaped writes a key as a JSON pointer segment (RFC 6901: '~' is
// "~0", '/' is "~1"). Keys almost never need it; two byte scans tell.
func writeEscaped(sb *strings.Builder, k string) {
	if strings.IndexByte(k, '~') < 0 && strings.IndexByte(k, '/') < 0 {
		sb.WriteString(k)
		return
	}
	for i := 0; i < len(k); i++ {
		switch k[i] {
		case '~':
			sb.WriteString("~0")
		case '/':
			sb.WriteString("~1")
		default:
			sb.WriteByte(k[i])
		}
	}
}

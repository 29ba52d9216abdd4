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
	var ops []jsonpatch.JsonPatchOperation
	diffObjects(&ops, "", original, mutated)
	// A stable order keeps responses and `shepherd check` output diffable.
	slices.SortStableFunc(ops, func(a, b jsonpatch.JsonPatchOperation) int { return strings.Compare(a.Path, b.Path) })
	return ops
}

func diffObjects(ops *[]jsonpatch.JsonPatchOperation, path string, a, b map[string]any) {
	for k, av := range a {
		p := path + "/" + escapePointer(k)
		bv, ok := b[k]
		if !ok {
			*ops = append(*ops, jsonpatch.NewOperation("remove", p, nil))
			continue
		}
		diffValues(ops, p, av, bv)
	}
	for k, bv := range b {
		if _, ok := a[k]; !ok {
			*ops = append(*ops, jsonpatch.NewOperation("add", path+"/"+escapePointer(k), bv))
		}
	}
}

func diffValues(ops *[]jsonpatch.JsonPatchOperation, path string, a, b any) {
	switch av := a.(type) {
	case map[string]any:
		if bv, ok := b.(map[string]any); ok {
			diffObjects(ops, path, av, bv)
			return
		}
	case []any:
		if bv, ok := b.([]any); ok && len(av) == len(bv) {
			for i := range av {
				diffValues(ops, path+"/"+strconv.Itoa(i), av[i], bv[i])
			}
			return
		}
	}
	if !equalJSON(a, b) {
		*ops = append(*ops, jsonpatch.NewOperation("replace", path, b))
	}
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

// escapePointer escapes a key for a JSON pointer (RFC 6901).
func escapePointer(k string) string {
	if !strings.ContainsAny(k, "~/") {
		return k
	}
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

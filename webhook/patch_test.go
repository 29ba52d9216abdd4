package webhook

import (
	"encoding/json"
	"reflect"
	"testing"

	evanphx "github.com/evanphx/json-patch/v5"
	"gomodules.xyz/jsonpatch/v2"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// Every patch, applied to the original document by an RFC 6902
// implementation, gives the mutated one; and the paths are the narrowest
// ones.
func TestJSONPatchTurnsOriginalIntoMutated(t *testing.T) {
	for name, tt := range map[string]struct {
		original, mutated string
		wantPaths         []string
	}{
		"unchanged":               {`{"a":1,"b":{"c":[1,2]}}`, `{"a":1,"b":{"c":[1,2]}}`, nil},
		"default deep inside":     {`{"spec":{"template":{"cliques":[{"name":"a"},{"name":"b"}]}}}`, `{"spec":{"template":{"cliques":[{"name":"a"},{"name":"b","spec":{"minAvailable":1}}]}}}`, []string{"/spec/template/cliques/1/spec"}},
		"field rewritten":         {`{"spec":{"startupPolicy":{"startupPolicyOrder":"InOrder"}}}`, `{"spec":{"startupPolicy":{"startupPolicyOrder":"AnyOrder"}}}`, []string{"/spec/startupPolicy/startupPolicyOrder"}},
		"field removed":           {`{"spec":{"startupPolicy":{"startupPolicyOrder":"InOrder"},"x":1}}`, `{"spec":{"x":1}}`, []string{"/spec/startupPolicy"}},
		"null replaced":           {`{"spec":{"terminationDelay":null}}`, `{"spec":{"terminationDelay":"4h"}}`, []string{"/spec/terminationDelay"}},
		"type changed":            {`{"a":{"b":1}}`, `{"a":[1]}`, []string{"/a"}},
		"array length changed":    {`{"a":[1,2]}`, `{"a":[1,2,3]}`, []string{"/a"}},
		"keys needing escapes":    {`{"metadata":{"labels":{}}}`, `{"metadata":{"labels":{"a/b~c":"x"}}}`, []string{"/metadata/labels/a~1b~0c"}},
		"several, sorted by path": {`{"b":1,"a":{}}`, `{"b":2,"a":{"z":1,"y":2}}`, []string{"/a/y", "/a/z", "/b"}},
	} {
		t.Run(name, func(t *testing.T) {
			ops := jsonPatch(object(t, tt.original), object(t, tt.mutated))
			var paths []string
			for _, op := range ops {
				paths = append(paths, op.Path)
			}
			if !reflect.DeepEqual(paths, tt.wantPaths) {
				t.Errorf("paths %v, want %v", paths, tt.wantPaths)
			}
			applied := apply(t, tt.original, ops)
			if want := object(t, tt.mutated); !reflect.DeepEqual(applied, want) {
				t.Errorf("patched original = %v, want %v", applied, want)
			}
		})
	}
}

// object decodes a JSON object as the chain does (integers as int64).
func object(t *testing.T, doc string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := utiljson.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func apply(t *testing.T, doc string, ops []jsonpatch.JsonPatchOperation) map[string]any {
	t.Helper()
	raw, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	p, err := evanphx.DecodePatch(raw)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply([]byte(doc))
	if err != nil {
		t.Fatalf("applying %s: %v", raw, err)
	}
	return object(t, string(out))
}

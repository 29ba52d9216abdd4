package printers

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestJSONIsIndentedLikeMarshalIndent: the depth-capped indenter
// writes what json.MarshalIndent writes for objects of ordinary depth.
func TestJSONIsIndentedLikeMarshalIndent(t *testing.T) {
	v := []any{map[string]any{"a": []any{}, "b": map[string]any{}, "c": []any{1, "x\"y,{z}", map[string]any{"d": nil, "e": true}}, "f": "\\"}}
	want, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	compact, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	indentJSON(&got, compact, maxIndentDepth)
	if diff := cmp.Diff(string(want), got.String()); diff != "" {
		t.Errorf("(-MarshalIndent +indentJSON):\n%s", diff)
	}
	got.Reset()
	indentJSON(&got, compact, 2)
	if w := "[\n  {\n    \"a\": [],\n    \"b\": {},\n    \"c\": [1,\"x\\\"y,{z}\",{\"d\":null,\"e\":true}],\n    \"f\": \"\\\\\"\n  }\n]"; got.String() != w {
		t.Errorf("capped at depth 2:\n%s\nwant\n%s", got.String(), w)
	}
}

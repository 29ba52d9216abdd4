package offline

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParseDocumentsAndLines: documents are split on "---" lines
// (with CRLF too) and each object is placed on its first line of content.
func TestParseDocumentsAndLines(t *testing.T) {
	cm := func(name string) string { return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + "}\n" }
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"one", cm("a"), []string{"f:1 a"}},
		{"no trailing newline", strings.TrimSuffix(cm("a"), "\n"), []string{"f:1 a"}},
		{"leading separator", "---\n" + cm("a"), []string{"f:2 a"}},
		{"trailing separator", cm("a") + "---", []string{"f:1 a"}},
		{"two", cm("a") + "---\n" + cm("b"), []string{"f:1 a", "f:5 b"}},
		{"separator with a comment", cm("a") + "--- # next\n" + cm("b"), []string{"f:1 a", "f:5 b"}},
		{"comments and blank lines first", "# head\n\n" + cm("a") + "---\n\n# b\n" + cm("b"), []string{"f:3 a", "f:9 b"}},
		{"empty and comment-only documents", "---\n---\n# nothing\n---\n" + cm("a") + "---\n", []string{"f:5 a"}},
		{"CRLF", strings.ReplaceAll(cm("a")+"---\n"+cm("b"), "\n", "\r\n"), []string{"f:1 a", "f:5 b"}},
		{"not a separator", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  x: |\n    ---x\n", []string{"f:1 a"}},
		{"list", "apiVersion: v1\nkind: List\nitems:\n- " + strings.ReplaceAll(strings.TrimSuffix(cm("a"), "\n"), "\n", "\n  ") + "\n- " + strings.ReplaceAll(strings.TrimSuffix(cm("b"), "\n"), "\n", "\n  ") + "\n", []string{"f:1 a", "f:1 b"}},
		{"empty", "", nil},
	} {
		ms, err := Parse("f", []byte(tc.in))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var got []string
		for _, m := range ms {
			got = append(got, m.String()+" "+m.Obj.GetName())
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	// An error names the absolute line, in a later document too.
	_, err := Parse("f", []byte(cm("a")+"---\n"+cm("b")+"spec: [\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "f:8: invalid YAML") {
		t.Errorf("error %v, want one at f:8", err)
	}
}

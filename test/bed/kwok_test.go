package bed

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// TestKwokStagesParse: the stages the bed gives kwok are well-formed YAML,
// one per name, each selecting pods or nodes; kwok itself rejects a
// malformed file only at start, with the whole bed waiting on it.
func TestKwokStagesParse(t *testing.T) {
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(kwokStages), 4096)
	var names []string
	for {
		u := &unstructured.Unstructured{}
		err := d.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("stage %d: %v", len(names)+1, err)
		}
		if u.GetKind() != "Stage" {
			t.Errorf("%s is a %s, want a Stage", u.GetName(), u.GetKind())
		}
		names = append(names, u.GetName())
	}
	want := []string{"bed-node-ready", "bed-pod-ready", "bed-pod-succeed", "bed-pod-succeed-slow", "bed-pod-delete"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("stages (-want +got):\n%s", diff)
	}
}

package mapdefault

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/common/types"
	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shepherd-k8s/shepherd/integrations/knob"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

var workloadType = knob.Knob{Name: "workloadType", Group: "grove.io", Kinds: []string{"PodCliqueSet"},
	Path: []string{"spec", "workloadType"}, Annotation: "shepherd.dev/workload-type", Type: knob.String}

// schemas is a served schema that has the listed field paths.
type schemas []string

func (s schemas) HasField(_ schema.GroupKind, path []string) bool {
	return slices.Contains(s, strings.Join(path, "."))
}

// KnobRaw reads the seed field, else the carrier, where the schema has the
// field, and only the carrier where it does not (the apiserver pruned the
// field there, and an expression may not name it).
func TestKnobRaw(t *testing.T) {
	field, carrier := schemas{"spec.workloadType"}, schemas{}
	obj := func(fieldValue, annotation string) map[string]any {
		o := map[string]any{"metadata": map[string]any{}, "spec": map[string]any{}}
		if fieldValue != "" {
			o["spec"] = map[string]any{"workloadType": fieldValue}
		}
		if annotation != "" {
			o["metadata"] = map[string]any{"annotations": map[string]any{"shepherd.dev/workload-type": annotation}}
		}
		return o
	}
	for _, tc := range []struct {
		name    string
		schemas knob.FieldSchemas
		obj     map[string]any
		want    any // nil: none
	}{
		{"field form, the field", field, obj("Training", ""), "Training"},
		{"field form, the carrier of an object stored before the field", field, obj("", "Inference"), "Inference"},
		{"field form, the field wins", field, obj("Training", "Inference"), "Training"},
		{"field form, neither", field, obj("", ""), nil},
		{"carrier form, the carrier", carrier, obj("", "Training"), "Training"},
		{"carrier form, neither", carrier, obj("", ""), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := testkit.EvalCEL(t, Context{Schemas: tc.schemas}.KnobRaw(workloadType), map[string]any{"object": tc.obj})
			opt, ok := v.(*types.Optional)
			if !ok {
				t.Fatalf("KnobRaw is a %T, want an optional", v)
			}
			var got any
			if opt.HasValue() {
				got = opt.GetValue().Value()
			}
			if got != tc.want {
				t.Errorf("KnobRaw = %v, want %v", got, tc.want)
			}
		})
	}
	if got := (Context{Schemas: carrier}).KnobRaw(workloadType); strings.Contains(got, "spec") {
		t.Errorf("the carrier form names the field the schema lacks: %s", got)
	}
}

// SetKnob writes the field where the schema has it, else the carrier,
// creating the annotations when the object has none.
func TestSetKnob(t *testing.T) {
	if got, want := (Context{Schemas: schemas{"spec.workloadType"}}).SetKnob(workloadType, "'Inference'"),
		"[JSONPatch{op: 'add', path: '/spec/workloadType', value: 'Inference'}]"; got != want {
		t.Errorf("field form: %s, want %s", got, want)
	}
	want := `has(object.metadata.annotations) ?
  [JSONPatch{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('shepherd.dev/workload-type'), value: 'Inference'}] :
  [JSONPatch{op: 'add', path: '/metadata/annotations', value: {'shepherd.dev/workload-type': 'Inference'}}]`
	if diff := cmp.Diff(want, (Context{Schemas: schemas{}}).SetKnob(workloadType, "'Inference'")); diff != "" {
		t.Errorf("carrier form (-want +got):\n%s", diff)
	}
}

func TestConditions(t *testing.T) {
	if diff := cmp.Diff(admissionregistrationv1.MatchCondition{Name: "n", Expression: "true"}, Cond("n", "true")); diff != "" {
		t.Errorf("Cond (-want +got):\n%s", diff)
	}
	hs := HasSpec()
	if len(hs) != 1 || hs[0].Name != "has-spec" {
		t.Fatalf("HasSpec = %+v", hs)
	}
	for _, tc := range []struct {
		obj  map[string]any
		want bool
	}{{map[string]any{"spec": map[string]any{}}, true}, {map[string]any{"metadata": map[string]any{}}, false}} {
		if got := testkit.EvalCEL(t, hs[0].Expression, map[string]any{"object": tc.obj}).Value(); got != tc.want {
			t.Errorf("has-spec of %v = %v, want %v", tc.obj, got, tc.want)
		}
	}
}

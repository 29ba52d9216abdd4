package celrules

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// widgetCRD has a field of every type a schema check tells apart.
const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
              name: {type: string}
              ratio: {type: number}
              enabled: {type: boolean}
              mode: {type: string, enum: [Fast, Slow]}
              port: {x-kubernetes-int-or-string: true}
              note: {type: string, nullable: true}
              tags: {type: array, items: {type: string}}
              limits: {type: object, additionalProperties: {type: integer}}
              template:
                type: object
                properties:
                  replicas: {type: integer}
`

func widgetSchemas(t *testing.T) *Schemas {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict([]byte(widgetCRD), &crd); err != nil {
		t.Fatal(err)
	}
	s, err := NewSchemas([]*apiextensionsv1.CustomResourceDefinition{&crd}, "test")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var widgetGVK = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}

func widget(spec map[string]any) map[string]any {
	return map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"}, "spec": spec}
}

// errorStrings renders errs as the apiserver renders each cause.
func errorStrings(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

func TestValidateObject(t *testing.T) {
	s := widgetSchemas(t)
	for _, tc := range []struct {
		name string
		gvk  schema.GroupVersionKind
		obj  map[string]any
		want []string
	}{{
		name: "every field of its type",
		gvk:  widgetGVK,
		obj: widget(map[string]any{"size": int64(3), "name": "a", "ratio": 0.5, "enabled": true, "mode": "Fast", "port": "http",
			"note": nil, "tags": []any{"x"}, "limits": map[string]any{"gpu": int64(8)}, "template": map[string]any{"replicas": int64(2)}}),
	}, {
		name: "int-or-string takes an integer",
		gvk:  widgetGVK,
		obj:  widget(map[string]any{"size": int64(1), "port": int64(8080)}),
	}, {
		name: "integer given a string",
		gvk:  widgetGVK,
		obj:  widget(map[string]any{"size": "three"}),
		want: []string{`spec.size: Invalid value: "string": spec.size in body must be of type integer: "string"`},
	}, {
		name: "integer given a fraction",
		gvk:  widgetGVK,
		obj:  widget(map[string]any{"size": 1.5}),
		// The apiserver's validator says it twice, the second time without
		// a field path ("<nil>").
		want: []string{
			`<nil>: Invalid value: "": Checked value must be of type integer (default format) in spec.size`,
			`spec.size: Invalid value: "number": spec.size in body must be of type integer: "number"`,
		},
	}, {
		name: "string given a number, boolean given a string",
		gvk:  widgetGVK,
		obj:  widget(map[string]any{"size": int64(1), "name": int64(7), "enabled": "yes"}),
		want: []string{
			`spec.enabled: Invalid value: "string": spec.enabled in body must be of type boolean: "string"`,
			`spec.name: Invalid value: "integer": spec.name in body must be of type string: "integer"`,
		},
	}, {
		name: "object given a list, list given an object",
		gvk:  widgetGVK,
		obj:  widget(map[string]any{"size": int64(1), "template": []any{int64(1)}, "tags": map[string]any{"a": "b"}}),
		want: []string{
			`spec.tags: Invalid value: "object": spec.tags in body must be of type array: "object"`,
			`spec.template: Invalid value: "array": spec.template in body must be of type object: "array"`,
		},
	}, {
		name: "wrong type deep inside: list item, map value, nested object",
		gvk:  widgetGVK,
		obj: widget(map[string]any{"size": int64(1), "tags": []any{"ok", int64(2)}, "limits": map[string]any{"gpu": "eight"},
			"template": map[string]any{"replicas": "two"}}),
		want: []string{
			`spec.limits.gpu: Invalid value: "string": spec.limits.gpu in body must be of type integer: "string"`,
			`spec.tags[1]: Invalid value: "integer": spec.tags[1] in body must be of type string: "integer"`,
			`spec.template.replicas: Invalid value: "string": spec.template.replicas in body must be of type integer: "string"`,
		},
	}, {
		name: "null where the schema does not allow it",
		gvk:  widgetGVK,
		obj:  widget(map[string]any{"size": int64(1), "name": nil}),
		want: []string{`spec.name: Invalid value: "null": spec.name in body must be of type string: "null"`},
	}, {
		name: "not only types: the apiserver's enum, minimum and required too",
		gvk:  widgetGVK,
		obj:  widget(map[string]any{"mode": "Medium", "template": map[string]any{}}),
		want: []string{
			`spec.mode: Unsupported value: "Medium": supported values: "Fast", "Slow"`,
			`spec.size: Required value`,
		},
	}, {
		name: "minimum",
		gvk:  widgetGVK,
		obj:  widget(map[string]any{"size": int64(0)}),
		want: []string{`spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1`},
	}, {
		name: "a kind without a schema is not checked",
		gvk:  schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		obj:  map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": int64(1)},
	}, {
		name: "a version the schemas do not serve is not checked",
		gvk:  widgetGVK.GroupKind().WithVersion("v2"),
		obj:  widget(map[string]any{"size": "three"}),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := errorStrings(s.ValidateObject(tc.gvk, tc.obj))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ValidateObject (-want +got):\n%s", diff)
			}
		})
	}
}

// TestValidateObjectUpdateRatchets: as the apiserver, an UPDATE is denied
// for the values it changes, not for those it keeps (an object stored
// under an older schema stays updatable).
func TestValidateObjectUpdateRatchets(t *testing.T) {
	s := widgetSchemas(t)
	stored := widget(map[string]any{"size": int64(1), "mode": "Legacy"})
	for _, tc := range []struct {
		name string
		obj  map[string]any
		want []string
	}{{
		name: "unchanged invalid value is kept",
		obj:  widget(map[string]any{"size": int64(2), "mode": "Legacy"}),
	}, {
		name: "changed value is validated",
		obj:  widget(map[string]any{"size": "two", "mode": "Legacy"}),
		want: []string{`spec.size: Invalid value: "string": spec.size in body must be of type integer: "string"`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := errorStrings(s.ValidateObjectUpdate(widgetGVK, tc.obj, stored))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ValidateObjectUpdate (-want +got):\n%s", diff)
			}
		})
	}
	if got := errorStrings(s.ValidateObject(widgetGVK, stored)); len(got) != 1 {
		t.Errorf("the stored object on create: %v, want its enum error", got)
	}
}

// TestValidateObjectOnTrainJob: the error of a wrongly typed TrainJob
// field, against Trainer's schema.
func TestValidateObjectOnTrainJob(t *testing.T) {
	s := seedSchemas(t)
	gvk := schema.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"}
	obj := map[string]any{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": map[string]any{"name": "tj"},
		"spec": map[string]any{"runtimeRef": map[string]any{"name": "torch"}, "trainer": map[string]any{"numNodes": "string"}}}
	want := []string{`spec.trainer.numNodes: Invalid value: "string": spec.trainer.numNodes in body must be of type integer: "string"`}
	if diff := cmp.Diff(want, errorStrings(s.ValidateObject(gvk, obj))); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestDropNulls(t *testing.T) {
	s := widgetSchemas(t)
	obj := widget(map[string]any{"size": int64(1), "name": nil, "note": nil})
	s.DropNulls(widgetGVK, obj)
	want := widget(map[string]any{"size": int64(1), "note": nil})
	if diff := cmp.Diff(want, obj); diff != "" {
		t.Errorf("DropNulls drops the null of name (not nullable), keeps note's (nullable) (-want +got):\n%s", diff)
	}
	if errs := s.ValidateObject(widgetGVK, obj); len(errs) != 0 {
		t.Errorf("after DropNulls: %v", errs)
	}
}

// BenchmarkObjectValidator is a diagnostic: what building a kind's
// validator costs (paid once per schema set, then cached) against what
// validating an object with it costs (paid on every call).
func BenchmarkObjectValidator(b *testing.B) {
	s := seedSchemas(b)
	podTemplate := map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "i"}}}}
	for _, bc := range []struct {
		kind string
		spec map[string]any
	}{
		{"TrainJob", map[string]any{"runtimeRef": map[string]any{"name": "torch"}, "trainer": map[string]any{"numNodes": int64(2)}}},
		{"TrainingRuntime", map[string]any{"template": map[string]any{"spec": map[string]any{"replicatedJobs": []any{map[string]any{
			"name": "node", "template": map[string]any{"spec": map[string]any{"template": podTemplate}}}}}}}},
	} {
		gvk := schema.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: bc.kind}
		obj := map[string]any{"apiVersion": gvk.GroupVersion().String(), "kind": gvk.Kind, "metadata": map[string]any{"name": "x"}, "spec": bc.spec}
		b.Run(bc.kind+"/build", func(b *testing.B) {
			for b.Loop() {
				if _, err := newObjectValidator(s.structural[gvk]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.kind+"/validate", func(b *testing.B) {
			s.ValidateObject(gvk, obj) // builds the cached validator
			b.ResetTimer()
			for b.Loop() {
				if errs := s.ValidateObject(gvk, obj); len(errs) > 0 {
					b.Fatal(errs)
				}
			}
		})
	}
}

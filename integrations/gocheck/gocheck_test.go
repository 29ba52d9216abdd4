package gocheck

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestJudges(t *testing.T) {
	c := &Check{Group: "trainer.kubeflow.org", Kinds: []string{"TrainingRuntime", "ClusterTrainingRuntime"}, Operations: []string{"CREATE", "UPDATE"}}
	for _, tc := range []struct {
		group, kind, op string
		want            bool
	}{
		{"trainer.kubeflow.org", "TrainingRuntime", "CREATE", true},
		{"trainer.kubeflow.org", "ClusterTrainingRuntime", "UPDATE", true},
		{"trainer.kubeflow.org", "TrainJob", "CREATE", false},
		{"trainer.kubeflow.org", "TrainingRuntime", "DELETE", false},
		{"example.com", "TrainingRuntime", "CREATE", false},
		{"", "", "", false},
	} {
		if got := c.Judges(tc.group, tc.kind, tc.op); got != tc.want {
			t.Errorf("Judges(%s, %s, %s) = %v, want %v", tc.group, tc.kind, tc.op, got, tc.want)
		}
	}
}

// The readers never panic on a shape they do not expect: they return the
// zero value, so a check reads what is there and validation reports the
// rest.
func TestReaders(t *testing.T) {
	o := map[string]any{
		"spec": map[string]any{
			"name":     "a",
			"replicas": int64(3),
			"ratio":    float64(2),
			"text":     "3",
			"null":     nil,
			"items":    []any{map[string]any{"name": "x"}, "not an object", map[string]any{"name": "y"}},
		},
		"status": "not an object",
	}
	if got := Obj(o, "spec"); got == nil || got["name"] != "a" {
		t.Errorf("Obj(spec) = %v", got)
	}
	for _, key := range []string{"status", "absent"} {
		if got := Obj(o, key); got != nil {
			t.Errorf("Obj(%s) = %v, want nil", key, got)
		}
	}
	if Obj(nil, "spec") != nil {
		t.Error("Obj of nil is not nil")
	}
	if got := Path(o, "spec"); got["name"] != "a" {
		t.Errorf("Path(spec) = %v", got)
	}
	if got := Path(o, "spec", "name", "x"); got != nil {
		t.Errorf("Path through a string = %v, want nil", got)
	}
	if got := Path(o); got["spec"] == nil {
		t.Errorf("Path() = %v, want the object", got)
	}
	if diff := cmp.Diff([]map[string]any{{"name": "x"}, {"name": "y"}}, Items(Obj(o, "spec"), "items")); diff != "" {
		t.Errorf("Items (-want +got):\n%s", diff)
	}
	if got := Items(nil, "items"); got != nil {
		t.Errorf("Items of nil = %v", got)
	}
	if got := Items(Obj(o, "spec"), "name"); len(got) != 0 {
		t.Errorf("Items of a string = %v, want none", got)
	}
	spec := Obj(o, "spec")
	for key, want := range map[string]bool{"null": true, "absent": true, "name": false, "replicas": false} {
		if got := Unset(spec, key); got != want {
			t.Errorf("Unset(%s) = %v, want %v", key, got, want)
		}
	}
	if Str(spec, "name") != "a" || Str(spec, "replicas") != "" || Str(nil, "name") != "" {
		t.Errorf("Str: %q, %q", Str(spec, "name"), Str(spec, "replicas"))
	}
	for key, want := range map[string]struct {
		n  int64
		ok bool
	}{"replicas": {3, true}, "ratio": {2, true}, "text": {0, false}, "absent": {0, false}} {
		if n, ok := Int(spec, key); n != want.n || ok != want.ok {
			t.Errorf("Int(%s) = %d, %v; want %d, %v", key, n, ok, want.n, want.ok)
		}
	}
}

// Ensure creates what is missing (or null) and leaves a field that is not
// an object alone, for validation to report.
func TestEnsure(t *testing.T) {
	o := map[string]any{"kept": map[string]any{"a": "b"}, "null": nil, "text": "x"}
	if got := Ensure(o, "kept"); got["a"] != "b" {
		t.Errorf("Ensure(kept) = %v", got)
	}
	created := Ensure(o, "new")
	created["k"] = "v"
	if diff := cmp.Diff(map[string]any{"k": "v"}, o["new"]); diff != "" {
		t.Errorf("the created object is not the one stored (-want +got):\n%s", diff)
	}
	if got := Ensure(o, "null"); got == nil || o["null"] == nil {
		t.Errorf("Ensure(null) = %v, stored %v; want a new object", got, o["null"])
	}
	if got := Ensure(o, "text"); got != nil || o["text"] != "x" {
		t.Errorf("Ensure(text) = %v, stored %v; want nil and the string kept", got, o["text"])
	}
}

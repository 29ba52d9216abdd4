package knob

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/common/types"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// The knobs are shaped as Trainer's and Grove's (integrations/*/knobs.go),
// which cannot be imported here: they import this package.
var (
	ttl = Knob{Name: "ttlSecondsAfterFinished", Group: "trainer.kubeflow.org", Kinds: []string{"TrainingRuntime", "ClusterTrainingRuntime"},
		Path: []string{"spec", "ttlSecondsAfterFinished"}, Annotation: "shepherd.dev/ttl-seconds-after-finished", Type: Int}
	workload = Knob{Name: "podGroupPolicy.workload", Group: "trainer.kubeflow.org", Kinds: []string{"TrainingRuntime"},
		Path: []string{"spec", "podGroupPolicy", "workload"}, Annotation: "shepherd.dev/pod-group-policy", Type: Presence, Value: "workload"}
	maxRuntime = Knob{Name: "maxRuntime", Group: "grove.io", Kinds: []string{"PodCliqueSet"},
		Path: []string{"spec", "maxRuntime"}, Annotation: "shepherd.dev/max-runtime", Type: Duration}
	workloadType = Knob{Name: "workloadType", Group: "grove.io", Kinds: []string{"PodCliqueSet"},
		Path: []string{"spec", "workloadType"}, Annotation: "shepherd.dev/workload-type", Type: String}
)

// obj is an object carrying value at k's field (when field is not nil)
// and annotations.
func obj(k Knob, field any, annotations map[string]string) map[string]any {
	o := map[string]any{"metadata": map[string]any{}}
	if annotations != nil {
		a := map[string]any{}
		for key, v := range annotations {
			a[key] = v
		}
		o["metadata"].(map[string]any)["annotations"] = a
	}
	if field != nil {
		cur := o
		for _, p := range k.Path[:len(k.Path)-1] {
			next := map[string]any{}
			cur[p] = next
			cur = next
		}
		cur[k.Path[len(k.Path)-1]] = field
	}
	return o
}

// schemas is a FieldSchemas holding the listed kinds' fields.
type schemas map[string][]string

func (s schemas) HasField(gk schema.GroupKind, path []string) bool {
	return slices.Contains(s[gk.Group+"/"+gk.Kind], strings.Join(path, "."))
}

func TestForm(t *testing.T) {
	t.Parallel()
	path := "spec.ttlSecondsAfterFinished"
	for _, tc := range []struct {
		name string
		s    FieldSchemas
		want Form
	}{
		{"no schema known: the field", nil, Field},
		{"every kind has the field", schemas{"trainer.kubeflow.org/TrainingRuntime": {path}, "trainer.kubeflow.org/ClusterTrainingRuntime": {path}}, Field},
		// Writing the field to the one kind that lacks it would be pruned.
		{"one kind lacks it: the annotation", schemas{"trainer.kubeflow.org/TrainingRuntime": {path}}, Annotation},
		{"no kind has it", schemas{}, Annotation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := ttl.Form(tc.s); got != tc.want {
				t.Errorf("Form = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFieldPathAndDescribe(t *testing.T) {
	t.Parallel()
	got := []string{workload.FieldPath(Field), workload.FieldPath(Annotation), workload.Describe(Field), workload.Describe(Annotation)}
	want := []string{"spec.podGroupPolicy.workload", "metadata.annotations['shepherd.dev/pod-group-policy']", "workload", "annotation shepherd.dev/pod-group-policy"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	ann := map[string]string{ttl.Annotation: "60"}
	for _, tc := range []struct {
		name   string
		obj    map[string]any
		want   Raw
		wantOK bool
	}{
		{"the field", obj(ttl, int64(30), nil), Raw{Value: int64(30), Form: Field}, true},
		// An object stored before a CRD upgrade keeps its annotation; once
		// the field is set it wins.
		{"the field wins over the annotation", obj(ttl, int64(30), ann), Raw{Value: int64(30), Form: Field}, true},
		{"the annotation", obj(ttl, nil, ann), Raw{Value: "60", Form: Annotation}, true},
		{"a null field falls back to the annotation", map[string]any{
			"spec":     map[string]any{"ttlSecondsAfterFinished": nil},
			"metadata": map[string]any{"annotations": map[string]any{ttl.Annotation: "60"}},
		}, Raw{Value: "60", Form: Annotation}, true},
		{"a carrier that is not a string is none", map[string]any{
			"metadata": map[string]any{"annotations": map[string]any{ttl.Annotation: int64(60)}},
		}, Raw{}, false},
		{"neither", obj(ttl, nil, map[string]string{"other": "1"}), Raw{}, false},
		{"a parent that is not an object", map[string]any{"spec": "x"}, Raw{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ttl.Lookup(tc.obj)
			if diff := cmp.Diff(tc.want, got); diff != "" || ok != tc.wantOK {
				t.Errorf("Lookup = %v (-want +got):\n%s", ok, diff)
			}
		})
	}
}

func TestInt(t *testing.T) {
	t.Parallel()
	carrier := func(v string) map[string]any { return obj(ttl, nil, map[string]string{ttl.Annotation: v}) }
	for _, tc := range []struct {
		name    string
		obj     map[string]any
		want    *int64
		wantErr string
	}{
		{"absent", obj(ttl, nil, nil), nil, ""},
		{"field int64 (unstructured)", obj(ttl, int64(600), nil), ptr.To[int64](600), ""},
		{"field float64 (encoding/json)", obj(ttl, float64(600), nil), ptr.To[int64](600), ""},
		{"field int", obj(ttl, 600, nil), ptr.To[int64](600), ""},
		{"carrier", carrier("600"), ptr.To[int64](600), ""},
		{"negative carrier", carrier("-5"), ptr.To[int64](-5), ""},
		{"carrier not an integer", carrier("10m"), nil, `annotation shepherd.dev/ttl-seconds-after-finished: "10m" is not an integer`},
		{"field of the wrong type", obj(ttl, true, nil), nil, "ttlSecondsAfterFinished: want an integer, got bool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ttl.Int(tc.obj)
			if gotErr := errString(err); gotErr != tc.wantErr {
				t.Errorf("error %q, want %q", gotErr, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("value (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDuration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		obj     map[string]any
		want    *time.Duration
		wantErr string
	}{
		{"absent", obj(maxRuntime, nil, nil), nil, ""},
		{"field", obj(maxRuntime, "1h30m", nil), ptr.To(90 * time.Minute), ""},
		{"carrier", obj(maxRuntime, nil, map[string]string{maxRuntime.Annotation: "90m"}), ptr.To(90 * time.Minute), ""},
		{"carrier not a duration", obj(maxRuntime, nil, map[string]string{maxRuntime.Annotation: "90"}), nil,
			`annotation shepherd.dev/max-runtime: "90" is not a duration (e.g. 90m, 1h30m)`},
		{"field not a string", obj(maxRuntime, int64(5400), nil), nil, "maxRuntime: want a duration string, got int64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := maxRuntime.Duration(tc.obj)
			if gotErr := errString(err); gotErr != tc.wantErr {
				t.Errorf("error %q, want %q", gotErr, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("value (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStringAndPresent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		k      Knob
		obj    map[string]any
		wantS  string
		wantOK bool
	}{
		{"string field", workloadType, obj(workloadType, "Training", nil), "Training", true},
		{"string carrier", workloadType, obj(workloadType, nil, map[string]string{workloadType.Annotation: "Inference"}), "Inference", true},
		{"string field not a string", workloadType, obj(workloadType, int64(1), nil), "", false},
		{"string absent", workloadType, obj(workloadType, nil, nil), "", false},
		// Presence: the field's presence (even empty) or the carrier's Value.
		{"presence field", workload, obj(workload, map[string]any{}, nil), "", true},
		{"presence carrier", workload, obj(workload, nil, map[string]string{workload.Annotation: "workload"}), "", true},
		{"presence carrier of another value", workload, obj(workload, nil, map[string]string{workload.Annotation: "coscheduling"}), "", false},
		{"presence absent", workload, obj(workload, nil, nil), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var s string
			var ok bool
			if tc.k.Type == Presence {
				ok = tc.k.Present(tc.obj)
			} else {
				s, ok = tc.k.String(tc.obj)
			}
			if s != tc.wantS || ok != tc.wantOK {
				t.Errorf("got %q, %v; want %q, %v", s, ok, tc.wantS, tc.wantOK)
			}
		})
	}
}

func TestParseInt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"-42", -42, true},
		{"999999999999999999", 999999999999999999, true}, // 18 digits
		{"-999999999999999999", -999999999999999999, true},
		// 19 digits may overflow an int64: rejected as the CEL rules do.
		{"1000000000000000000", 0, false},
		{"", 0, false},
		{"-", 0, false},
		{"+1", 0, false},
		{"1.0", 0, false},
		{" 1", 0, false},
		{"0x10", 0, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseInt(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("ParseInt(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "not an integer") {
				t.Errorf("error %q does not say it is not an integer", err)
			}
		})
	}
}

// celEval evaluates expr with object bound to o (testkit.EvalCEL), an
// optional as its value or nil.
func celEval(t *testing.T, expr string, o map[string]any) any {
	t.Helper()
	v := testkit.EvalCEL(t, expr, map[string]any{"object": o})
	if opt, ok := v.(*types.Optional); ok {
		if !opt.HasValue() {
			return nil
		}
		return opt.GetValue().Value()
	}
	return v.Value()
}

// TestCELAgreesWithGo: the CEL forms the rules and exported policies read a
// knob with give what the Go readers (defaulters, reconcilers) give for the
// same object, in the form it is stored in: the value, absent for a
// carrier that does not parse, CELValid false exactly when the Go reader
// errs, and CELText the stored text.
func TestCELAgreesWithGo(t *testing.T) {
	t.Parallel()
	type out struct {
		Value any
		Valid bool
		Text  string
	}
	for _, tc := range []struct {
		name string
		k    Knob
		f    Form
		obj  map[string]any
		want out
	}{
		{"int field", ttl, Field, obj(ttl, int64(300), nil), out{int64(300), true, "300"}},
		{"int field absent", ttl, Field, obj(ttl, nil, nil), out{nil, true, "0"}},
		{"int carrier", ttl, Annotation, obj(ttl, nil, map[string]string{ttl.Annotation: "300"}), out{int64(300), true, "300"}},
		{"int carrier negative", ttl, Annotation, obj(ttl, nil, map[string]string{ttl.Annotation: "-1"}), out{int64(-1), true, "-1"}},
		{"int carrier malformed", ttl, Annotation, obj(ttl, nil, map[string]string{ttl.Annotation: "5m"}), out{nil, false, "5m"}},
		{"int carrier absent", ttl, Annotation, obj(ttl, nil, nil), out{nil, true, ""}},
		{"duration field", maxRuntime, Field, obj(maxRuntime, "1h30m", nil), out{90 * time.Minute, true, "1h30m"}},
		{"duration carrier", maxRuntime, Annotation, obj(maxRuntime, nil, map[string]string{maxRuntime.Annotation: "1.5h"}), out{90 * time.Minute, true, "1.5h"}},
		{"duration carrier in µs", maxRuntime, Annotation, obj(maxRuntime, nil, map[string]string{maxRuntime.Annotation: "10µs"}), out{10 * time.Microsecond, true, "10µs"}},
		{"duration carrier malformed", maxRuntime, Annotation, obj(maxRuntime, nil, map[string]string{maxRuntime.Annotation: "an hour"}), out{nil, false, "an hour"}},
		// Forms time.ParseDuration takes and the pattern does not: refused
		// in Go as in CEL.
		{"duration carrier 0", maxRuntime, Annotation, obj(maxRuntime, nil, map[string]string{maxRuntime.Annotation: "0"}), out{nil, false, "0"}},
		{"duration carrier +5s", maxRuntime, Annotation, obj(maxRuntime, nil, map[string]string{maxRuntime.Annotation: "+5s"}), out{nil, false, "+5s"}},
		{"duration carrier .5h", maxRuntime, Annotation, obj(maxRuntime, nil, map[string]string{maxRuntime.Annotation: ".5h"}), out{nil, false, ".5h"}},
		{"duration carrier in Greek μs", maxRuntime, Annotation, obj(maxRuntime, nil, map[string]string{maxRuntime.Annotation: "5μs"}), out{nil, false, "5μs"}},
		{"presence field", workload, Field, obj(workload, map[string]any{}, nil), out{true, true, "set"}},
		{"presence field absent", workload, Field, obj(workload, nil, nil), out{false, true, ""}},
		{"presence carrier", workload, Annotation, obj(workload, nil, map[string]string{workload.Annotation: "workload"}), out{true, true, "workload"}},
		{"presence carrier of another value", workload, Annotation, obj(workload, nil, map[string]string{workload.Annotation: "yes"}), out{false, false, "yes"}},
		{"string carrier", workloadType, Annotation, obj(workloadType, nil, map[string]string{workloadType.Annotation: "Training"}), out{"Training", true, "Training"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := out{
				Value: celEval(t, tc.k.CELValue(tc.f, "object"), tc.obj),
				Valid: celEval(t, tc.k.CELValid(tc.f, "object"), tc.obj).(bool),
				Text:  celEval(t, tc.k.CELText(tc.f, "object"), tc.obj).(string),
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("CEL (-want +got):\n%s", diff)
			}
			// The Go reader of the same object.
			var goValue any
			var goErr error
			switch tc.k.Type {
			case Int:
				var v *int64
				if v, goErr = tc.k.Int(tc.obj); v != nil {
					goValue = *v
				}
			case Duration:
				var v *time.Duration
				if v, goErr = tc.k.Duration(tc.obj); v != nil {
					goValue = *v
				}
			case Presence:
				goValue = tc.k.Present(tc.obj)
			case String:
				if s, ok := tc.k.String(tc.obj); ok {
					goValue = s
				}
			}
			if tc.k.Type != Presence && goErr == nil && !cmp.Equal(goValue, got.Value) {
				t.Errorf("Go reads %v, CEL %v", goValue, got.Value)
			}
			if tc.k.Type == Presence && goValue != got.Value {
				t.Errorf("Go Present = %v, CEL %v", goValue, got.Value)
			}
			if tc.k.Type != Presence && (goErr == nil) != got.Valid {
				t.Errorf("Go error %v, CEL valid %v", goErr, got.Valid)
			}
		})
	}
}

func TestValidDescription(t *testing.T) {
	t.Parallel()
	got := []string{ttl.ValidDescription(), maxRuntime.ValidDescription(), workload.ValidDescription(), workloadType.ValidDescription()}
	want := []string{"an integer", "a duration such as 90m or 1h30m", `"workload"`, "a string"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

package grove

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

func TestParseScalingGroupDelays(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    map[string]time.Duration
		wantErr string
	}{
		{in: "", want: map[string]time.Duration{}},
		{in: "  ", want: map[string]time.Duration{}},
		{in: "prefill=30s", want: map[string]time.Duration{"prefill": 30 * time.Second}},
		{in: "prefill=30s, decode-0=1m30s ", want: map[string]time.Duration{"prefill": 30 * time.Second, "decode-0": 90 * time.Second}},
		{in: "prefill", wantErr: `annotation shepherd.dev/termination-delay: "prefill" is not group=duration`},
		// An empty pair is skipped, as the CEL reads the carrier.
		{in: "prefill=30s,", want: map[string]time.Duration{"prefill": 30 * time.Second}},
		{in: "a=1s,,b=2s", want: map[string]time.Duration{"a": time.Second, "b": 2 * time.Second}},
		// The bounds V-PCS-3 sets: 64 pairs, 4096 characters.
		{in: pairs(65), wantErr: `annotation shepherd.dev/termination-delay holds more than 4096 characters or 64 pairs`},
		{in: "a=1s" + strings.Repeat(" ", 4093), wantErr: `holds more than 4096 characters`},
		{in: "Prefill=30s", wantErr: `"Prefill=30s" is not group=duration`},
		{in: "-a=30s", wantErr: `"-a=30s" is not group=duration`},
		{in: "a=soon", wantErr: `annotation shepherd.dev/termination-delay: "a=soon": "soon" is not a duration (e.g. 30s, 5m)`},
		// A group listed twice is an error, as V-PCS-3's CEL judges it.
		{in: "a=1s,a=2s", wantErr: `annotation shepherd.dev/termination-delay: group "a" is listed twice; give each group once`},
		// Forms time.ParseDuration takes and the rules' CEL refuses.
		{in: "a=0", wantErr: `"a=0": "0" is not a duration`},
		{in: "a=+5s", wantErr: `"a=+5s": "+5s" is not a duration`},
		{in: "a=.5h", wantErr: `"a=.5h": ".5h" is not a duration`},
	} {
		got, err := ParseScalingGroupDelays(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseScalingGroupDelays(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseScalingGroupDelays(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseScalingGroupDelays(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

// delaySet is a PodCliqueSet (decoded JSON) with scaling groups groups and
// the carrier annotation (when not "").
func delaySet(carrier string, groups ...map[string]any) map[string]any {
	list := make([]any, 0, len(groups))
	for _, g := range groups {
		list = append(list, g)
	}
	o := map[string]any{"metadata": map[string]any{}, "spec": map[string]any{"template": map[string]any{"podCliqueScalingGroups": list}}}
	if carrier != "" {
		o["metadata"] = map[string]any{"annotations": map[string]any{api.AnnotationTerminationDelay: carrier}}
	}
	return o
}

func TestScalingGroupDelay(t *testing.T) {
	for _, tc := range []struct {
		name    string
		obj     map[string]any
		group   string
		want    *time.Duration
		wantErr string
	}{
		{name: "nothing set", obj: delaySet("", map[string]any{"name": "a"}), group: "a"},
		{name: "no scaling groups at all", obj: map[string]any{}, group: "a"},
		{name: "the seed field", obj: delaySet("", map[string]any{"name": "a", "terminationDelay": "45s"}), group: "a", want: ptr.To(45 * time.Second)},
		{name: "the field of another group is not this one's", obj: delaySet("", map[string]any{"name": "b", "terminationDelay": "45s"}), group: "a"},
		{name: "the carrier", obj: delaySet("a=1m,b=2m", map[string]any{"name": "a"}), group: "b", want: ptr.To(2 * time.Minute)},
		{name: "the carrier names a group the template lacks", obj: delaySet("a=1m"), group: "a", want: ptr.To(time.Minute)},
		{name: "the field wins over the carrier", obj: delaySet("a=1m", map[string]any{"name": "a", "terminationDelay": "5s"}), group: "a", want: ptr.To(5 * time.Second)},
		{name: "a malformed field", obj: delaySet("a=1m", map[string]any{"name": "a", "terminationDelay": "later"}), group: "a",
			wantErr: `spec.template.podCliqueScalingGroups[a].terminationDelay: "later" is not a duration`},
		// A malformed carrier is an error for every group: which entry is
		// whose cannot be trusted.
		{name: "a malformed carrier", obj: delaySet("a=1m,b", map[string]any{"name": "a"}), group: "a", wantErr: `"b" is not group=duration`},
		{name: "a carrier listing a group twice", obj: delaySet("a=1m,a=2m", map[string]any{"name": "a"}), group: "a", wantErr: `group "a" is listed twice`},
		{name: "a field that is not a string falls back to the carrier", obj: delaySet("a=1m", map[string]any{"name": "a", "terminationDelay": int64(5)}), group: "a",
			want: ptr.To(time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ScalingGroupDelay(tc.obj, tc.group)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("ScalingGroupDelay = %v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !cmp.Equal(tc.want, got) {
				t.Errorf("ScalingGroupDelay = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// apiserverCEL evaluates expr (testkit.EvalCEL: the apiserver's CEL
// environment) and returns the value as Go: an optional's value or nil, a
// list as []any.
func apiserverCEL(t *testing.T, expr string, vars map[string]any) any {
	t.Helper()
	v := testkit.EvalCEL(t, expr, vars)
	if opt, ok := v.(*types.Optional); ok {
		if !opt.HasValue() {
			return nil
		}
		return opt.GetValue().Value()
	}
	if l, ok := v.(traits.Lister); ok {
		out, err := l.ConvertToNative(reflect.TypeFor[[]any]())
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	return v.Value()
}

// TestScalingGroupDelayCELAgreesWithGo: the rules' CEL reads a scaling
// group's override, and judges the carrier valid, as the gang controller's
// Go does, in the form the object stores it in.
func TestScalingGroupDelayCELAgreesWithGo(t *testing.T) {
	for _, tc := range []struct {
		name  string
		form  knob.Form
		obj   map[string]any
		group map[string]any
		want  any // the raw override CEL reads, nil for none
		valid bool
	}{
		{name: "field", form: knob.Field, obj: delaySet(""), group: map[string]any{"name": "a", "terminationDelay": "30s"}, want: "30s", valid: true},
		{name: "field unset", form: knob.Field, obj: delaySet(""), group: map[string]any{"name": "a"}, valid: true},
		{name: "carrier", form: knob.Annotation, obj: delaySet("a=30s,ab=1m"), group: map[string]any{"name": "ab"}, want: "1m", valid: true},
		{name: "carrier with spaces", form: knob.Annotation, obj: delaySet(" a=30s , b=1h5m "), group: map[string]any{"name": "b"}, want: "1h5m", valid: true},
		{name: "carrier without the group", form: knob.Annotation, obj: delaySet("a=30s"), group: map[string]any{"name": "b"}, valid: true},
		{name: "carrier absent", form: knob.Annotation, obj: delaySet(""), group: map[string]any{"name": "b"}, valid: true},
		{name: "carrier entry without a duration", form: knob.Annotation, obj: delaySet("a=30s,b"), group: map[string]any{"name": "a"}, want: "30s", valid: false},
		{name: "carrier with a duration that is none", form: knob.Annotation, obj: delaySet("a=soon"), group: map[string]any{"name": "a"}, want: "soon", valid: false},
		{name: "carrier with an upper-case group", form: knob.Annotation, obj: delaySet("A=1s"), group: map[string]any{"name": "a"}, valid: false},
		{name: "carrier with a zero duration", form: knob.Annotation, obj: delaySet("a=0"), group: map[string]any{"name": "a"}, want: "0", valid: false},
		{name: "carrier with a signed duration", form: knob.Annotation, obj: delaySet("a=+5s"), group: map[string]any{"name": "a"}, want: "+5s", valid: false},
		{name: "carrier with a fraction without its 0", form: knob.Annotation, obj: delaySet("a=.5h"), group: map[string]any{"name": "a"}, want: ".5h", valid: false},
		{name: "carrier listing a group twice", form: knob.Annotation, obj: delaySet("a=1s,a=2s"), group: map[string]any{"name": "a"}, want: "1s", valid: false},
		{name: "carrier listing another group twice", form: knob.Annotation, obj: delaySet("a=1s, b=2s,b=3s"), group: map[string]any{"name": "a"}, want: "1s", valid: false},
		{name: "carrier with a trailing comma", form: knob.Annotation, obj: delaySet("a=1s,"), group: map[string]any{"name": "a"}, want: "1s", valid: true},
		{name: "carrier with an empty pair", form: knob.Annotation, obj: delaySet("a=1s, ,b=2s"), group: map[string]any{"name": "b"}, want: "2s", valid: true},
		{name: "carrier of 64 pairs", form: knob.Annotation, obj: delaySet(pairs(64)), group: map[string]any{"name": "g63"}, want: "1s", valid: true},
		{name: "carrier of 65 pairs", form: knob.Annotation, obj: delaySet(pairs(65)), group: map[string]any{"name": "g0"}, want: "1s", valid: false},
		{name: "carrier of 64 pieces, one empty", form: knob.Annotation, obj: delaySet(pairs(63) + ","), group: map[string]any{"name": "g0"}, want: "1s", valid: true},
		// CEL's size() counts characters: µ is two bytes and one character.
		{name: "carrier of 4096 characters in 4097 bytes", form: knob.Annotation, obj: delaySet("a=1µs" + strings.Repeat(" ", 4091)), group: map[string]any{"name": "a"}, want: "1µs", valid: true},
		{name: "carrier of 4097 characters", form: knob.Annotation, obj: delaySet("a=1µs" + strings.Repeat(" ", 4092)), group: map[string]any{"name": "a"}, want: "1µs", valid: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]any{"object": tc.obj, "g": tc.group}
			if got := apiserverCEL(t, CELScalingGroupDelay(tc.form, "object", "g"), vars); !cmp.Equal(tc.want, got) {
				t.Errorf("CEL override = %v, want %v", got, tc.want)
			}
			if got := apiserverCEL(t, CELScalingGroupDelaysValid(tc.form, "object"), vars); got != tc.valid {
				t.Errorf("CEL valid = %v, want %v", got, tc.valid)
			}
			// Go reads the object with the group in its template.
			obj := tc.obj
			obj["spec"] = map[string]any{"template": map[string]any{"podCliqueScalingGroups": []any{tc.group}}}
			d, err := ScalingGroupDelay(obj, tc.group["name"].(string))
			if (err == nil) != tc.valid {
				t.Errorf("Go: %v, %v; CEL valid %v", d, err, tc.valid)
			}
			if tc.valid && (d == nil) != (tc.want == nil) {
				t.Errorf("Go override %v, CEL %v", d, tc.want)
			}
			if tc.valid && d != nil {
				if want, _ := time.ParseDuration(tc.want.(string)); *d != want {
					t.Errorf("Go override %v, CEL %v", *d, tc.want)
				}
			}
		})
	}
}

// $(trainingSpec) is true when the seed trainingSpec is there in the form
// the schemas keep, and $(trainingSpec.paths) names where.
func TestCELTrainingSpec(t *testing.T) {
	seedSpec := fieldSchemas{"spec.trainingSpec.maxRestarts", "spec.trainingSpec.maxRuntime"}
	maxRestartsAt := "metadata.annotations['" + api.AnnotationMaxRestarts + "']"
	maxRuntimeAt := "metadata.annotations['" + api.AnnotationMaxRuntime + "']"
	for _, tc := range []struct {
		name      string
		schemas   knob.FieldSchemas
		obj       map[string]any
		want      bool
		wantPaths []any
	}{
		{name: "seed schema, trainingSpec set", schemas: seedSpec, obj: map[string]any{"spec": map[string]any{"trainingSpec": map[string]any{}}},
			want: true, wantPaths: []any{"spec.trainingSpec"}},
		{name: "seed schema, none", schemas: seedSpec, obj: map[string]any{"spec": map[string]any{}}, wantPaths: []any{"spec.trainingSpec"}},
		{name: "carriers, maxRestarts", schemas: fieldSchemas{}, obj: map[string]any{"metadata": map[string]any{"annotations": map[string]any{api.AnnotationMaxRestarts: "1"}}},
			want: true, wantPaths: []any{maxRestartsAt}},
		{name: "carriers, maxRuntime", schemas: fieldSchemas{}, obj: map[string]any{"metadata": map[string]any{"annotations": map[string]any{api.AnnotationMaxRuntime: "1h"}}},
			want: true, wantPaths: []any{maxRuntimeAt}},
		{name: "carriers, none", schemas: fieldSchemas{}, obj: map[string]any{"metadata": map[string]any{}}, wantPaths: []any{maxRuntimeAt}},
		// A schema with one field of the two reads both carriers' way
		// for the other: the mixed form.
		{name: "one field served, the other carried", schemas: fieldSchemas{"spec.trainingSpec.maxRestarts"},
			obj:  map[string]any{"metadata": map[string]any{"annotations": map[string]any{api.AnnotationMaxRuntime: "1h"}}, "spec": map[string]any{}},
			want: true, wantPaths: []any{maxRuntimeAt}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]any{"object": tc.obj}
			if got := apiserverCEL(t, celTrainingSpec("", "object", tc.schemas), vars); got != tc.want {
				t.Errorf("$(trainingSpec) = %v, want %v", got, tc.want)
			}
			if diff := cmp.Diff(tc.wantPaths, apiserverCEL(t, celTrainingSpec(".paths", "object", tc.schemas), vars)); diff != "" {
				t.Errorf("$(trainingSpec.paths) (-want +got):\n%s", diff)
			}
		})
	}
}

// pairs is a delay carrier of n distinct groups g0..g<n-1>, each 1s.
func pairs(n int) string {
	p := make([]string, n)
	for i := range p {
		p[i] = fmt.Sprintf("g%d=1s", i)
	}
	return strings.Join(p, ",")
}

// Package grove is shepherd's integration with Grove: the seed knobs
// shepherd reads on Grove's objects and their carriers (and the status
// carriers an earlier shepherd kept there, read once on upgrade), Grove's
// objects as its controllers read them (served.go: Grove's published types
// from api/grove/v1alpha1 beside the object as served, which the
// accessors read the seed fields from), and whether Grove itself already
// enforces a feature shepherd would otherwise enforce.
package grove

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// Group is Grove's API group.
const Group = "grove.io"

var pcs = []string{api.KindPodCliqueSet}

// WorkloadType is a PodCliqueSet's workloadType (GREP-0285): Inference or
// Training.
var WorkloadType = knob.Knob{
	Name: "workloadType", Group: Group, Kinds: pcs,
	Path:       []string{"spec", "workloadType"},
	Annotation: api.AnnotationWorkloadType, Type: knob.String,
}

// MaxRestarts is a Training PodCliqueSet's trainingSpec.maxRestarts.
var MaxRestarts = knob.Knob{
	Name: "trainingSpec.maxRestarts", Group: Group, Kinds: pcs,
	Path:       []string{"spec", "trainingSpec", "maxRestarts"},
	Annotation: api.AnnotationMaxRestarts, Type: knob.Int,
}

// MaxRuntime is a Training PodCliqueSet's trainingSpec.maxRuntime.
var MaxRuntime = knob.Knob{
	Name: "trainingSpec.maxRuntime", Group: Group, Kinds: pcs,
	Path:       []string{"spec", "trainingSpec", "maxRuntime"},
	Annotation: api.AnnotationMaxRuntime, Type: knob.Duration,
}

// TrainingSpec is the seed trainingSpec object itself: its presence is what
// V-PCS-2 restricts to Training workloads. Its carriers are MaxRestarts'
// and MaxRuntime's.
var TrainingSpec = []string{"spec", "trainingSpec"}

// ScalingGroupTerminationDelay is a scaling group's terminationDelay
// override (Grove's gang-termination design). Grove's scaling-group config
// has no such field; the carrier is one annotation on the PodCliqueSet
// holding "group=duration" pairs joined by commas.
var ScalingGroupTerminationDelay = knob.Knob{
	Name: "podCliqueScalingGroups[].terminationDelay", Group: Group, Kinds: pcs,
	Path:       []string{"spec", "template", "podCliqueScalingGroups", "[]", "terminationDelay"},
	Annotation: api.AnnotationTerminationDelay, Type: knob.Duration,
}

// Knobs are Grove's seed knobs.
var Knobs = []knob.Knob{WorkloadType, MaxRestarts, MaxRuntime, ScalingGroupTerminationDelay}

// IsTraining reports whether a PodCliqueSet is a Training workload.
func IsTraining(obj map[string]any) bool {
	v, _ := WorkloadType.String(obj)
	return v == WorkloadTypeTraining
}

// The scaling-group delay carrier's bounds (characters, as CEL's size()
// counts them; pairs, as pieces between commas): far more than any real list
// of scaling groups, and small enough that judging it stays cheap. Its
// duplicate check compares every entry with every other, and a 4 KiB
// carrier of 687 one-letter groups already exceeded the apiserver's cost
// limit for one expression (a rule "could not be evaluated" instead of
// saying what is wrong).
const (
	maxDelayCarrierChars   = 4096
	maxDelayCarrierEntries = 64
)

// DelayCarrierExpect says what a well-formed carrier holds, for V-PCS-3's
// message ($(scalingGroupDelay.expect)).
var DelayCarrierExpect = fmt.Sprintf("group=duration pairs separated by commas, each group once, at most %d pairs in %d characters, e.g. prefill=30s,decode=1m",
	maxDelayCarrierEntries, maxDelayCarrierChars)

var delayEntry = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?)=(.+)$`)

// ParseScalingGroupDelays parses the carrier's "group=duration,..." value
// as the rules' CEL does (CELScalingGroupDelaysValid,
// CELScalingGroupDelay): durations by knob.ParseDuration, and a group
// listed twice is an error, as V-PCS-3 denies it (an object stored before
// it did then gets the PodCliqueSet's delay: gang.GroupDelay). An empty
// value is no override.
func ParseScalingGroupDelays(v string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	if strings.TrimSpace(v) == "" {
		return out, nil
	}
	if utf8.RuneCountInString(v) > maxDelayCarrierChars || strings.Count(v, ",") >= maxDelayCarrierEntries {
		return nil, fmt.Errorf("annotation %s holds more than %d characters or %d pairs; give each scaling group once", api.AnnotationTerminationDelay, maxDelayCarrierChars, maxDelayCarrierEntries)
	}
	for _, e := range strings.Split(v, ",") {
		if strings.TrimSpace(e) == "" {
			continue // as the CEL reads it: "a=1s," is one pair
		}
		m := delayEntry.FindStringSubmatch(strings.TrimSpace(e))
		if m == nil {
			return nil, fmt.Errorf("annotation %s: %q is not group=duration", api.AnnotationTerminationDelay, e)
		}
		d, err := knob.ParseDuration(m[3])
		if err != nil {
			return nil, fmt.Errorf("annotation %s: %q: %q is not a duration (e.g. 30s, 5m)", api.AnnotationTerminationDelay, e, m[3])
		}
		if _, dup := out[m[1]]; dup {
			return nil, fmt.Errorf("annotation %s: group %q is listed twice; give each group once", api.AnnotationTerminationDelay, m[1])
		}
		out[m[1]] = d
	}
	return out, nil
}

// ScalingGroupDelay returns the terminationDelay override of the scaling
// group named group on a PodCliqueSet (decoded JSON), from the seed field
// or the carrier; nil when there is none.
func ScalingGroupDelay(obj map[string]any, group string) (*time.Duration, error) {
	v, _, _ := unstructured.NestedFieldNoCopy(obj, "spec", "template", "podCliqueScalingGroups")
	groups, _ := v.([]any)
	for _, g := range groups {
		gm, _ := g.(map[string]any)
		if gm["name"] != group {
			continue
		}
		if s, ok := gm["terminationDelay"].(string); ok {
			d, err := time.ParseDuration(s)
			if err != nil {
				return nil, fmt.Errorf("spec.template.podCliqueScalingGroups[%s].terminationDelay: %q is not a duration", group, s)
			}
			return &d, nil
		}
	}
	a, _, _ := unstructured.NestedString(obj, "metadata", "annotations", api.AnnotationTerminationDelay)
	delays, err := ParseScalingGroupDelays(a)
	if err != nil {
		return nil, err
	}
	if d, ok := delays[group]; ok {
		return &d, nil
	}
	return nil, nil
}

// CELScalingGroupDelay is the raw override (optional<string>) of the
// scaling group g (a CEL variable bound to one entry of
// spec.template.podCliqueScalingGroups) in form f.
func CELScalingGroupDelay(f knob.Form, obj, g string) string {
	if f == knob.Field {
		return g + ".?terminationDelay"
	}
	entries := fmt.Sprintf("%s.metadata.?annotations[?'%s'].orValue('').split(',').filter(e, e.trim().startsWith(%s.name + '=')).map(e, e.trim().substring(size(%s.name) + 1))",
		obj, api.AnnotationTerminationDelay, g, g)
	return fmt.Sprintf("(size(%s) > 0 ? optional.of(%s[0]) : optional.none())", entries, entries)
}

// CELScalingGroupDelaysValid is false when the carrier of the scaling
// groups' overrides does not parse or names a group twice (true in the
// field form, which the schema types and which has one field per group).
func CELScalingGroupDelaysValid(f knob.Form, obj string) string {
	if f == knob.Field {
		return "true"
	}
	body := strings.TrimSuffix(strings.TrimPrefix(knob.DurationRegex, "^"), "$")
	raw := fmt.Sprintf("%s.metadata.?annotations[?'%s'].orValue('')", obj, api.AnnotationTerminationDelay)
	entries := raw + ".split(',').filter(e, e.trim() != '')"
	groups := entries + ".map(e, e.trim().split('=')[0])"
	// The bounds first: && stops there, so the scans below (the duplicate
	// check compares every entry with every other) never run on a carrier
	// longer than any real list of scaling groups.
	return fmt.Sprintf("(size(%s) <= %d && %s.split(',').size() <= %d && %s.all(e, e.trim().matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?=%s$')) && %s.all(g, %s.filter(h, h == g).size() == 1))",
		raw, maxDelayCarrierChars, raw, maxDelayCarrierEntries, entries, body, groups, groups)
}

// celTrainingSpec is the rule files' $(trainingSpec) and $(trainingSpec.paths): the seed trainingSpec object as a whole: a field in
// the seed form, two carrier annotations (maxRestarts, maxRuntime) in
// Grove's. V-PCS-2 reports a trainingSpec where it is not allowed at the
// trainingSpec itself, not at the workloadType that disallows it.
func celTrainingSpec(suffix, obj string, s knob.FieldSchemas) string {
	mr, rt := MaxRestarts, MaxRuntime
	fr, ft := mr.Form(s), rt.Form(s)
	if fr == knob.Field && ft == knob.Field {
		if suffix == ".paths" {
			return "[" + strconv.Quote(strings.Join(TrainingSpec, ".")) + "]"
		}
		return obj + ".?" + strings.Join(TrainingSpec, ".?") + ".hasValue()"
	}
	if suffix == ".paths" {
		return fmt.Sprintf("%s.hasValue() ? [%s] : [%s]", mr.CELRaw(fr, obj), strconv.Quote(mr.FieldPath(fr)), strconv.Quote(rt.FieldPath(ft)))
	}
	return fmt.Sprintf("(%s.hasValue() || %s.hasValue())", mr.CELRaw(fr, obj), rt.CELRaw(ft, obj))
}

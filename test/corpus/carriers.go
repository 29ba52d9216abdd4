package corpus

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
)

// Knobs are every seed knob, for tests that move them between forms.
var Knobs = append(append([]knob.Knob{}, trainer.Knobs...), grove.Knobs...)

// KnobsOf are the knobs an object of kind can carry.
func KnobsOf(u *unstructured.Unstructured) []knob.Knob {
	var out []knob.Knob
	gvk := u.GroupVersionKind()
	for _, k := range Knobs {
		for _, kind := range k.Kinds {
			if k.Group == gvk.Group && kind == gvk.Kind {
				out = append(out, k)
			}
		}
	}
	return out
}

// ToCarriers returns a copy of u with every seed knob moved from its seed
// field into its carrier annotation: the same object as a user writes it
// for a cluster whose CRDs lack the seed fields. Emptied parents
// (trainingSpec, podGroupPolicy) are removed with their last knob.
func ToCarriers(u *unstructured.Unstructured) *unstructured.Unstructured {
	if u == nil {
		return nil
	}
	out := u.DeepCopy()
	for _, k := range KnobsOf(out) {
		if k.Name == grove.ScalingGroupTerminationDelay.Name {
			moveScalingGroupDelays(out)
			continue
		}
		v, found, _ := unstructured.NestedFieldNoCopy(out.Object, k.Path...)
		if !found || v == nil {
			continue
		}
		var carried string
		switch k.Type {
		case knob.Presence:
			carried = k.Value
		case knob.Int:
			n, _ := v.(int64)
			carried = strconv.FormatInt(n, 10)
		default:
			carried = fmt.Sprint(v)
		}
		unstructured.RemoveNestedField(out.Object, k.Path...)
		dropIfEmpty(out.Object, k.Path[:len(k.Path)-1])
		setAnnotation(out, k.Annotation, carried)
	}
	return out
}

func moveScalingGroupDelays(u *unstructured.Unstructured) {
	groups, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "podCliqueScalingGroups")
	var pairs []string
	for i, g := range groups {
		gm, _ := g.(map[string]any)
		if d, ok := gm["terminationDelay"].(string); ok {
			pairs = append(pairs, fmt.Sprintf("%v=%s", gm["name"], d))
			delete(gm, "terminationDelay")
			groups[i] = gm
		}
	}
	if len(pairs) == 0 {
		return
	}
	sort.Strings(pairs)
	_ = unstructured.SetNestedSlice(u.Object, groups, "spec", "template", "podCliqueScalingGroups")
	setAnnotation(u, grove.ScalingGroupTerminationDelay.Annotation, strings.Join(pairs, ","))
}

func setAnnotation(u *unstructured.Unstructured, k, v string) {
	a := u.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	u.SetAnnotations(a)
}

func dropIfEmpty(obj map[string]any, path []string) {
	if len(path) < 2 { // never spec itself
		return
	}
	m, found, _ := unstructured.NestedMap(obj, path...)
	if found && len(m) == 0 {
		unstructured.RemoveNestedField(obj, path...)
	}
}

// CarrierField maps a violation's field path in the seed form to the one a
// carrier-form object reports: a knob's seed field becomes its annotation.
func CarrierField(field string) string {
	// The trainingSpec object has no carrier of its own: V-PCS-2 reports
	// it at the carrier of its maxRestarts (or maxRuntime when only that
	// is set; no case of the corpus has only that).
	if field == strings.Join(grove.TrainingSpec, ".") {
		return grove.MaxRestarts.FieldPath(knob.Annotation)
	}
	for _, k := range Knobs {
		if field == k.FieldPath(knob.Field) {
			return k.FieldPath(knob.Annotation)
		}
	}
	return field
}

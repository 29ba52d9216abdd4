package trainer

import (
	"fmt"
	"math"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
)

// The typed accessors of Trainer's knobs, for shepherd's Go code
// (reconcilers, the admission chain's lookups). They read a runtime object
// in either form through the knobs above, so the seed field and its carrier
// are known in one place only (integrations/knob).

// RuntimeSpec is the typed spec of a TrainingRuntime or
// ClusterTrainingRuntime; ok is false for any other object. Knobs are not
// read from it: a carrier lives in the object's metadata.
func RuntimeSpec(rt client.Object) (spec *trainerv1alpha1.TrainingRuntimeSpec, ok bool) {
	switch o := rt.(type) {
	case *trainerv1alpha1.TrainingRuntime:
		if o != nil {
			return &o.Spec, true
		}
	case *trainerv1alpha1.ClusterTrainingRuntime:
		if o != nil {
			return &o.Spec, true
		}
	}
	return nil, false
}

// RuntimeTTLOf is rt's ttlSecondsAfterFinished (RuntimeTTL): the seed
// field where the served schema has it, else the carrier annotation. nil,
// without error, when rt sets neither. A carrier that is not an integer,
// or a value outside 0..MaxInt32, is an error naming where it was found:
// admission rejects both (V-TR-1 and the carrier's CEL check), so only an
// object stored before shepherd's rules ran can hold one.
func RuntimeTTLOf(rt client.Object) (*int32, error) {
	obj, err := knobObject(rt)
	if err != nil {
		return nil, err
	}
	v, err := RuntimeTTL.Int(obj)
	if err != nil || v == nil {
		return nil, err
	}
	if *v < 0 || *v > math.MaxInt32 {
		raw, _ := RuntimeTTL.Lookup(obj)
		return nil, fmt.Errorf("%s: %d is out of range: want 0 to %d seconds", RuntimeTTL.Describe(raw.Form), *v, math.MaxInt32)
	}
	ttl := int32(*v)
	return &ttl, nil
}

// UsesWorkload reports whether rt uses podGroupPolicy.workload
// (RuntimeWorkload, KEP-3015): the seed field is present, or the carrier
// holds "workload". A carrier holding anything else is not the workload
// policy (admission rejects it).
func UsesWorkload(rt client.Object) bool {
	obj, err := knobObject(rt)
	if err != nil {
		return false
	}
	return RuntimeWorkload.Present(obj)
}

// knobObject is rt as the decoded JSON the knobs read. A typed runtime is
// converted without its JobSet template: no knob lives there (a test
// holds every knob to that), and the template — pod specs and all — is
// most of the object, which the admission path would convert per request.
func knobObject(rt client.Object) (map[string]any, error) {
	var view runtime.Object
	switch o := rt.(type) {
	case *unstructured.Unstructured:
		if o != nil {
			return o.Object, nil
		}
	case *trainerv1alpha1.TrainingRuntime:
		if o != nil {
			v := *o
			v.ManagedFields = nil
			v.Spec.Template = trainerv1alpha1.JobSetTemplateSpec{}
			view = &v
		}
	case *trainerv1alpha1.ClusterTrainingRuntime:
		if o != nil {
			v := *o
			v.ManagedFields = nil
			v.Spec.Template = trainerv1alpha1.JobSetTemplateSpec{}
			view = &v
		}
	default:
		return nil, fmt.Errorf("%T is not a Trainer runtime", rt)
	}
	if view == nil {
		return nil, fmt.Errorf("no runtime (nil %T)", rt)
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(view)
	if err != nil {
		return nil, fmt.Errorf("reading the knobs of runtime %q: %w", rt.GetName(), err)
	}
	return obj, nil
}

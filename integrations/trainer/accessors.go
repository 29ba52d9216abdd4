package trainer

import (
	"fmt"
	"math"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
)

// The accessors of Trainer's runtimes, for shepherd's Go code
// (reconcilers, the admission chain's lookups). shepherd reads a runtime as
// served, unstructured, never through a Go type: its knobs may be seed
// fields (ttlSecondsAfterFinished, podGroupPolicy.workload) that Trainer's
// own types lack and a typed decode would drop, and Trainer's module types
// do not compile against the Kubernetes libraries shepherd uses
// (api/trainer/v1alpha1 says why). The knobs read either form, so the seed
// field and its carrier are known in one place only (integrations/knob).

// NewRuntime is an empty runtime of kind (TrainingRuntime or
// ClusterTrainingRuntime), to read one into or to watch the kind.
func NewRuntime(kind string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(trainerv1alpha1.GroupVersion.WithKind(kind))
	return u
}

// RuntimeKind is the kind of o when o is a Trainer runtime as served.
func RuntimeKind(o client.Object) (kind string, ok bool) {
	u, isU := o.(*unstructured.Unstructured)
	if !isU || u == nil {
		return "", false
	}
	gvk := u.GroupVersionKind()
	if gvk.Group != Group || !slices.Contains(runtimeKinds, gvk.Kind) {
		return "", false
	}
	return gvk.Kind, true
}

// RuntimeJob is a replicatedJob of a runtime's JobSet template.
type RuntimeJob struct {
	Name string
	// Labels are its Job template's labels.
	Labels map[string]string
}

// RuntimeJobs are the replicatedJobs of rt's JobSet template.
func RuntimeJobs(rt *unstructured.Unstructured) []RuntimeJob {
	jobs, _, _ := unstructured.NestedSlice(rt.Object, "spec", "template", "spec", "replicatedJobs")
	out := make([]RuntimeJob, 0, len(jobs))
	for _, j := range jobs {
		m, ok := j.(map[string]any)
		if !ok {
			continue
		}
		name, _, _ := unstructured.NestedString(m, "name")
		labels, _, _ := unstructured.NestedStringMap(m, "template", "metadata", "labels")
		out = append(out, RuntimeJob{Name: name, Labels: labels})
	}
	return out
}

// RuntimeNodes is rt's mlPolicy.numNodes; ok is false when rt sets none
// (or sets something that is not a number, which Trainer's CRD rejects).
func RuntimeNodes(rt *unstructured.Unstructured) (n int32, ok bool) {
	v, found, err := unstructured.NestedFieldNoCopy(rt.Object, "spec", "mlPolicy", "numNodes")
	if !found || err != nil {
		return 0, false
	}
	switch x := v.(type) {
	case int64:
		return int32(x), true
	case float64:
		return int32(x), true
	}
	return 0, false
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

// knobObject is rt as the decoded JSON the knobs read: the runtime as
// served.
func knobObject(rt client.Object) (map[string]any, error) {
	u, ok := rt.(*unstructured.Unstructured)
	if rt == nil || ok && u == nil {
		return nil, fmt.Errorf("no runtime")
	}
	if _, ok := RuntimeKind(rt); !ok {
		return nil, fmt.Errorf("%T is not a Trainer runtime as served (an unstructured TrainingRuntime or ClusterTrainingRuntime)", rt)
	}
	return u.Object, nil
}

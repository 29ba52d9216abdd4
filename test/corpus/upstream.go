package corpus

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/shepherd-k8s/shepherd/celrules"
)

// upstreamDivergences are the cases where the upstream CRDs themselves
// make the cluster's answer differ from the chain's (which `shepherd
// check` runs offline), in either admission mode: found by test/interop,
// asserted as they are so that a change upstream or in shepherd shows.
var upstreamDivergences = map[string]struct {
	crdRejects string
	preempted  map[string]string
}{
	// V-TJ-4 lets numNodes change when the runtime has no Workload
	// podGroupPolicy; Trainer v2.3.0's CRD makes spec.trainer immutable
	// (x-kubernetes-validations: self == oldSelf) whatever the runtime.
	"tj-numnodes-change-without-workload": {crdRejects: "spec.trainer: Invalid value: field is immutable"},
	// D-PCS-6 defaults a scaling group's minAvailable to its replicas;
	// Grove's PodCliqueSet schema defaults it to 1, which the apiserver
	// applies when it decodes the request, before shepherd's mutating
	// webhook sees it unset.
	"pcs-min-available-defaulted": {preempted: map[string]string{
		"/spec/template/podCliqueScalingGroups/0/minAvailable": "Grove's CRD defaults podCliqueScalingGroups[].minAvailable to 1 before admission",
	}},
}

// UpstreamOptions replays case c on the upstream CRDs: in the carrier
// form, with the divergences the upstream CRDs cause (CRDRejects,
// PreemptedDefaults) expected.
func UpstreamOptions(c *Case, fieldValidation string, admit AdmitFunc) ReplayOptions {
	known := upstreamDivergences[c.Name]
	return ReplayOptions{
		Form:              CarrierForm,
		FieldValidation:   fieldValidation,
		Admit:             admit,
		UpstreamCRDs:      true,
		CRDRejects:        known.crdRejects,
		PreemptedDefaults: known.preempted,
	}
}

// SeedOnly lists the fields of a case's objects, in the carrier form,
// that the upstream CRDs (schemas) would prune: no knob carries them, so
// sent they are rejected under Strict and dropped under Warn, and the case
// exists only in the seed form.
func SeedOnly(c *Case, schemas *celrules.Schemas) []string {
	var out []string
	for _, o := range append([]*unstructured.Unstructured{c.Object, c.OldObject}, c.Context...) {
		if o == nil {
			continue
		}
		u := ToCarriers(o)
		for _, p := range schemas.Prune(u.GroupVersionKind(), u.Object) {
			out = append(out, u.GetKind()+" "+p)
		}
	}
	return out
}

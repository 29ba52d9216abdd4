package webhook

import (
	"strconv"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/knob"
)

// defaultPodCliqueSet applies D-PCS-1..6 to a PodCliqueSet. Every one of
// them only fills unset fields, so it records its JSON patch as it goes
// (no copy of the object, no diff) and reports whether it changed anything.
// The seed knobs (workloadType, trainingSpec.maxRestarts) are written in
// the form the cluster's schema s keeps — the seed field, or its carrier
// annotation where the field would be pruned — and read in either form.
func defaultPodCliqueSet(o map[string]any, cfg celrules.Config, s knob.FieldSchemas, r *recorder) bool {
	spec := obj(o, "spec")
	if spec == nil {
		return false
	}
	n := len(r.ops)
	on := cfg.Enabled
	// D-PCS-1: workloadType defaults to Inference.
	if on("D-PCS-1") {
		r.setKnobDefault(o, grove.WorkloadType, s, "Inference", "Inference", "spec")
	}
	template := obj(spec, "template")
	cliques, _ := template["cliques"].([]any)
	workloadType, _ := grove.WorkloadType.String(o)
	switch workloadType {
	case "Training":
		// D-PCS-2: a Training gang is torn down at once on breach. Not
		// where the schema is Grove's own: Grove's webhook rejects a
		// terminationDelay of 0 (and defaults 4h), and shepherd's Training
		// reconciler acts on a breach at once whatever the delay.
		if on("D-PCS-2") && grove.WorkloadType.Form(s) == knob.Field {
			r.setDefault(template, "terminationDelay", "0s", "spec", "template")
		}
		// D-PCS-3: kubelet restarts would hide failures from the budget.
		if on("D-PCS-3") {
			for i, c := range cliques {
				c, _ := c.(map[string]any)
				r.setDefault(path(c, "spec", "podSpec"), "restartPolicy", "Never", "spec", "template", "cliques", strconv.Itoa(i), "spec", "podSpec")
			}
		}
		// D-PCS-4: no restarts unless asked for — in either form: a budget
		// in the carrier annotation (an object stored before a CRD upgrade
		// added the field) must not be shadowed by a field default of 0.
		_, restartsSet := grove.MaxRestarts.Lookup(o)
		if on("D-PCS-4") && grove.MaxRestarts.Form(s) == knob.Annotation {
			r.setKnobDefault(o, grove.MaxRestarts, s, int64(0), "0")
		} else if on("D-PCS-4") && !restartsSet {
			if unset(spec, "trainingSpec") {
				r.setDefault(spec, "trainingSpec", map[string]any{"maxRestarts": int64(0)}, "spec")
			} else {
				r.setDefault(obj(spec, "trainingSpec"), "maxRestarts", int64(0), "spec", "trainingSpec")
			}
		}
	case "Inference":
		// D-PCS-5: gang termination stays opt-in unless the server sets a
		// default.
		if on("D-PCS-5") && cfg.InferenceTerminationDelay != nil {
			r.setDefault(template, "terminationDelay", cfg.InferenceTerminationDelay.Duration.String(), "spec", "template")
		}
	}
	// D-PCS-6: minAvailable defaults to replicas, for cliques and scaling
	// groups; without replicas there is nothing to copy.
	if on("D-PCS-6") {
		for i, c := range cliques {
			c, _ := c.(map[string]any)
			cs := obj(c, "spec")
			if n, ok := integer(cs, "replicas"); ok {
				r.setDefault(cs, "minAvailable", n, "spec", "template", "cliques", strconv.Itoa(i), "spec")
			}
		}
		groups, _ := template["podCliqueScalingGroups"].([]any)
		for i, g := range groups {
			g, _ := g.(map[string]any)
			if n, ok := integer(g, "replicas"); ok {
				r.setDefault(g, "minAvailable", n, "spec", "template", "podCliqueScalingGroups", strconv.Itoa(i))
			}
		}
	}
	return len(r.ops) > n
}

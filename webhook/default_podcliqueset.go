package webhook

import (
	"github.com/shepherd-k8s/shepherd/celrules"
)

// defaultPodCliqueSet applies D-PCS-1..6 to a PodCliqueSet and reports
// whether it changed anything.
func defaultPodCliqueSet(o map[string]any, cfg celrules.Config) bool {
	spec := obj(o, "spec")
	if spec == nil {
		return false
	}
	changed := false
	on := cfg.Enabled
	// D-PCS-1: workloadType defaults to Inference.
	if on("D-PCS-1") {
		changed = setDefault(spec, "workloadType", "Inference") || changed
	}
	template := obj(spec, "template")
	switch str(spec, "workloadType") {
	case "Training":
		// D-PCS-2: a Training gang is torn down at once on breach.
		if on("D-PCS-2") && template != nil {
			changed = setDefault(template, "terminationDelay", "0s") || changed
		}
		// D-PCS-3: kubelet restarts would hide failures from the budget.
		if on("D-PCS-3") {
			for _, c := range items(template, "cliques") {
				if ps := path(c, "spec", "podSpec"); ps != nil {
					changed = setDefault(ps, "restartPolicy", "Never") || changed
				}
			}
		}
		// D-PCS-4: no restarts unless asked for.
		if on("D-PCS-4") {
			if unset(spec, "trainingSpec") {
				spec["trainingSpec"] = map[string]any{"maxRestarts": int64(0)}
				changed = true
			} else if ts := obj(spec, "trainingSpec"); ts != nil {
				changed = setDefault(ts, "maxRestarts", int64(0)) || changed
			}
		}
	case "Inference":
		// D-PCS-5: gang termination stays opt-in unless the server sets a
		// default.
		if on("D-PCS-5") && cfg.InferenceTerminationDelay != nil && template != nil {
			changed = setDefault(template, "terminationDelay", cfg.InferenceTerminationDelay.Duration.String()) || changed
		}
	}
	// D-PCS-6: minAvailable defaults to replicas, for cliques and scaling
	// groups; without replicas there is nothing to copy.
	if on("D-PCS-6") {
		for _, c := range items(template, "cliques") {
			cs := obj(c, "spec")
			if r, ok := integer(cs, "replicas"); ok {
				changed = setDefault(cs, "minAvailable", r) || changed
			}
		}
		for _, g := range items(template, "podCliqueScalingGroups") {
			if r, ok := integer(g, "replicas"); ok {
				changed = setDefault(g, "minAvailable", r) || changed
			}
		}
	}
	return changed
}

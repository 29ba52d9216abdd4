// Package jobset is shepherd's JobSet integration: its CEL rules
// (rules/jobset.yaml) and defaults (D-JS-1, D-JS-2, as
// MutatingAdmissionPolicies). It has no knobs, Go checks or controllers
// of its own: the
// TrainJob controller (integrations/trainer/trainjob), which needs it,
// watches the JobSets Trainer creates; registering JobSet lets serve start
// that controller only once the cluster serves JobSets.
package jobset

import (
	"embed"

	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/integrations"
)

// rules are the framework's built-in CEL rules, beside it.
//
//go:embed rules/*.yaml
var rules embed.FS

func init() {
	integrations.Register(integrations.Framework{
		Name: integrations.JobSet, Group: api.JobSetGroup, Version: jobsetv1alpha2.GroupVersion.Version,
		Kinds:     []string{api.KindJobSet},
		Resources: []string{"jobsets"},
		Rules:     rules,
		Defaults:  Defaults,
	})
}

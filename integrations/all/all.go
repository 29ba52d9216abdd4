// Package all registers every integration: importing it fills the
// integrations registry (frameworks, Go checks, controllers). Adding a
// framework is its package beneath integrations/ plus one line here: the
// package that registers it whole (for a framework with controllers, its
// register package, which imports them).
package all

import (
	// Kubeflow Trainer: TrainJob deadline and TTL.
	_ "github.com/shepherd-k8s/shepherd/integrations/trainer/register"
	// JobSet.
	_ "github.com/shepherd-k8s/shepherd/integrations/jobset"
	// Grove: gang termination and Training PodCliqueSets.
	_ "github.com/shepherd-k8s/shepherd/integrations/grove/register"
	// The Workload API: a TrainJob's Workload and PodGroups.
	_ "github.com/shepherd-k8s/shepherd/integrations/workload"
)

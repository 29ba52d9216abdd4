// Package all registers every integration: importing it fills the
// integrations registry (frameworks, Go checks, controllers). Adding a
// framework is its package beneath integrations/ plus a line here for it
// and one for each of its controllers' packages.
package all

import (
	// Kubeflow Trainer: TrainJob deadline and TTL.
	_ "github.com/shepherd-k8s/shepherd/integrations/trainer"
	_ "github.com/shepherd-k8s/shepherd/integrations/trainer/trainjob"
	// JobSet.
	_ "github.com/shepherd-k8s/shepherd/integrations/jobset"
	// Grove: gang termination and Training PodCliqueSets.
	_ "github.com/shepherd-k8s/shepherd/integrations/grove"
	_ "github.com/shepherd-k8s/shepherd/integrations/grove/gang"
	_ "github.com/shepherd-k8s/shepherd/integrations/grove/training"
	// The Workload API: a TrainJob's Workload and PodGroups.
	_ "github.com/shepherd-k8s/shepherd/integrations/workload"
)

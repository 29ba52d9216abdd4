package api

import (
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/types"
)

// PodGroupName is the name of the PodGroup that pods of a TrainJob's
// podGroupTemplate join: <trainjob>-<template>-<hash>, the hash being short
// and stable, derived from the TrainJob's UID and the template name (R-WL).
// The reconciler creates PodGroups under this name and the webhook injects it
// into pod templates as spec.schedulingGroup.podGroupName (D-WL-1); both call
// this one function so they cannot disagree.
func PodGroupName(trainJobName string, trainJobUID types.UID, template string) string {
	sum := sha256.Sum256([]byte(string(trainJobUID) + "/" + template))
	hash := hex.EncodeToString(sum[:])[:8]
	// A PodGroup name is a DNS subdomain (at most 253 characters); a TrainJob
	// name is at most 63, so the result always fits.
	return trainJobName + "-" + template + "-" + hash
}

// PodGroupTemplateFor says which podGroupTemplate the pods of a replicatedJob
// belong to: "initializer" for the dataset and model initializers, "trainer"
// for everything else (an MPI launcher and its nodes share the trainer gang).
// jobLabels are the labels of the replicatedJob's Job template, where Trainer
// puts trainer.kubeflow.org/trainjob-ancestor-step.
func PodGroupTemplateFor(replicatedJobName string, jobLabels map[string]string) string {
	step := jobLabels[LabelTrainJobAncestorStep]
	if step == "" {
		step = replicatedJobName
	}
	switch step {
	case AncestorDatasetInitializer, AncestorModelInitializer:
		return PodGroupTemplateInitializer
	default:
		return PodGroupTemplateTrainer
	}
}

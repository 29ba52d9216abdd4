package api

import (
	"strings"
	"testing"
)

func TestPodGroupNameIsStableAndDistinct(t *testing.T) {
	a := PodGroupName("my-job", "uid-1", PodGroupTemplateTrainer)
	if a != PodGroupName("my-job", "uid-1", PodGroupTemplateTrainer) {
		t.Fatal("same inputs gave different names")
	}
	if !strings.HasPrefix(a, "my-job-trainer-") || len(a) != len("my-job-trainer-")+8 {
		t.Errorf("name %q is not <trainjob>-<template>-<8 hex>", a)
	}
	for _, other := range []string{
		PodGroupName("my-job", "uid-2", PodGroupTemplateTrainer),
		PodGroupName("my-job", "uid-1", PodGroupTemplateInitializer),
	} {
		if other == a {
			t.Errorf("different UID or template gave the same name %q", a)
		}
	}
}

func TestPodGroupTemplateFor(t *testing.T) {
	cases := []struct {
		job    string
		labels map[string]string
		want   string
	}{
		{"node", map[string]string{LabelTrainJobAncestorStep: "trainer"}, "trainer"},
		{"launcher", map[string]string{LabelTrainJobAncestorStep: "trainer"}, "trainer"},
		{"node", nil, "trainer"},
		{"dataset-initializer", nil, "initializer"},
		{"anything", map[string]string{LabelTrainJobAncestorStep: "model-initializer"}, "initializer"},
	}
	for _, c := range cases {
		if got := PodGroupTemplateFor(c.job, c.labels); got != c.want {
			t.Errorf("PodGroupTemplateFor(%q, %v) = %q, want %q", c.job, c.labels, got, c.want)
		}
	}
}

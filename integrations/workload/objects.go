package workload

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
)

// schedulingPolicy is a template's scheduling policy as the API writes it.
func schedulingPolicy(t GroupTemplate) map[string]any {
	if t.Gang {
		return map[string]any{"gang": map[string]any{"minCount": int64(t.MinCount)}}
	}
	return map[string]any{"basic": map[string]any{}}
}

// trainJobOwner is the controller ownerReference to tj. It does not set
// blockOwnerDeletion: that only matters to foreground deletion, and setting
// it would need update on trainjobs/finalizers in clusters that enforce
// owner-reference permissions.
func trainJobOwner(tj *trainerv1alpha1.TrainJob) map[string]any {
	return map[string]any{
		"apiVersion": trainerv1alpha1.GroupVersion.String(),
		"kind":       api.KindTrainJob,
		"name":       tj.Name,
		"uid":        string(tj.UID),
		"controller": true,
	}
}

// BuildWorkload is the Workload for tj in scheduling.k8s.io/version: named
// after the TrainJob, controlled by it (ownerReference and
// spec.controllerRef), with one podGroupTemplate per plan template.
func BuildWorkload(tj *trainerv1alpha1.TrainJob, plan Plan, version string) *unstructured.Unstructured {
	templates := make([]any, 0, len(plan.Templates))
	for _, t := range plan.Templates {
		templates = append(templates, map[string]any{
			"name":             t.Name,
			"schedulingPolicy": schedulingPolicy(t),
		})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.SchedulingGroup + "/" + version,
		"kind":       api.KindWorkload,
		"metadata": map[string]any{
			"name":            tj.Name,
			"namespace":       tj.Namespace,
			"ownerReferences": []any{trainJobOwner(tj)},
		},
		"spec": map[string]any{
			"controllerRef": map[string]any{
				"apiGroup": trainerv1alpha1.GroupVersion.Group,
				"kind":     api.KindTrainJob,
				"name":     tj.Name,
			},
			"podGroupTemplates": templates,
		},
	}}
}

// BuildPodGroup is the PodGroup for template t of tj's Workload (named
// workloadName, with uid workloadUID) in scheduling.k8s.io/version: named by
// api.PodGroupName — the name the webhook injects into pod templates —
// owned by the Workload and controlled by the TrainJob, referencing its
// template, with the template's scheduling policy.
func BuildPodGroup(tj *trainerv1alpha1.TrainJob, t GroupTemplate, version, workloadName string, workloadUID types.UID) *unstructured.Unstructured {
	spec := map[string]any{"schedulingPolicy": schedulingPolicy(t)}
	if version == "v1alpha2" {
		spec["podGroupTemplateRef"] = map[string]any{"workload": map[string]any{
			"workloadName": workloadName, "podGroupTemplateName": t.Name,
		}}
	} else {
		spec["workloadRef"] = map[string]any{"workloadName": workloadName, "templateName": t.Name}
	}
	apiVersion := api.SchedulingGroup + "/" + version
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion,
		"kind":       api.KindPodGroup,
		"metadata": map[string]any{
			"name":      api.PodGroupName(tj.Name, tj.UID, t.Name),
			"namespace": tj.Namespace,
			"ownerReferences": []any{
				map[string]any{
					"apiVersion": apiVersion,
					"kind":       api.KindWorkload,
					"name":       workloadName,
					"uid":        string(workloadUID),
				},
				trainJobOwner(tj),
			},
		},
		"spec": spec,
	}}
}

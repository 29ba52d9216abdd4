package gang

import (
	corev1 "k8s.io/api/core/v1"
)

// PodSucceeded reports whether a pod exited successfully: phase Succeeded, or
// every container terminated with exit code 0.
func PodSucceeded(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded {
		return true
	}
	if len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			return false
		}
	}
	return true
}

// PodFailed reports whether a pod failed: phase Failed, or a container
// terminated with a non-zero exit code (with restartPolicy Never the kubelet
// will not bring it back).
func PodFailed(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodFailed {
		return true
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated != nil && cs.State.Terminated.ExitCode != 0 {
			return true
		}
	}
	return false
}

// PodReady reports whether a pod counts toward readyReplicas: Ready=True, not
// terminating, and not exited.
func PodReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || PodSucceeded(p) || PodFailed(p) {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodStarted reports whether a pod has run at all: it is or was running,
// ready, or exited.
func PodStarted(p *corev1.Pod) bool {
	switch p.Status.Phase {
	case corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed:
		return true
	}
	if PodReady(p) {
		return true
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil || cs.State.Terminated != nil {
			return true
		}
	}
	return false
}

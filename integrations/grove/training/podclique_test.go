package training

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-k8s/shepherd/integrations/grove/gang"
)

func exitedPod(uid string, code int32) corev1.Pod {
	p := corev1.Pod{}
	p.UID = types.UID(uid)
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}}
	return p
}

func TestDecideCliqueSucceeded(t *testing.T) {
	running := corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	running.UID = "r"
	tests := []struct {
		name   string
		pods   []corev1.Pod
		marker *gang.RestartMarker
		before bool
		want   bool
	}{
		{name: "all exited 0", pods: []corev1.Pod{exitedPod("a", 0), exitedPod("b", 0)}, want: true},
		{name: "one still running", pods: []corev1.Pod{exitedPod("a", 0), running}},
		{name: "one failed", pods: []corev1.Pod{exitedPod("a", 0), exitedPod("b", 1)}},
		{name: "fewer than replicas", pods: []corev1.Pod{exitedPod("a", 0)}},
		{name: "no pods", pods: nil},
		{name: "pods of the previous attempt do not count", pods: []corev1.Pod{exitedPod("a", 0), exitedPod("b", 0), exitedPod("old", 1)},
			marker: &gang.RestartMarker{Restart: 1, Pods: []types.UID{"old"}}, want: true},
		{name: "sticky once written", pods: nil, before: true, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mkClique(0, cliqueState{})
			_, got := DecideClique(&c, tc.pods, CliqueState{Succeeded: tc.before, Marker: tc.marker})
			if got != tc.want {
				t.Errorf("Succeeded = %v, want %v", got, tc.want)
			}
		})
	}
}

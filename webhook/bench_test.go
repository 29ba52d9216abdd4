package webhook

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/seedcrds"
)

// A typical TrainingRuntime: torch, two replicatedJobs (initializer and
// nodes), a TTL and coscheduling.
var benchTrainingRuntime = []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainingRuntime","metadata":{"name":"torch-distributed","namespace":"ml"},
"spec":{"mlPolicy":{"numNodes":4,"torch":{"numProcPerNode":"auto"}},"podGroupPolicy":{"coscheduling":{"scheduleTimeoutSeconds":120}},"ttlSecondsAfterFinished":3600,
"template":{"spec":{"replicatedJobs":[
{"name":"dataset-initializer","template":{"metadata":{"labels":{"trainer.kubeflow.org/trainjob-ancestor-step":"dataset-initializer"}},"spec":{"template":{"spec":{"containers":[{"name":"dataset-initializer","image":"ghcr.io/kubeflow/trainer/dataset-initializer","env":[{"name":"STORAGE_URI","value":"hf://tatsu-lab/alpaca"}]}]}}}}},
{"name":"node","dependsOn":[{"name":"dataset-initializer","status":"Complete"}],"template":{"metadata":{"labels":{"trainer.kubeflow.org/trainjob-ancestor-step":"trainer"}},"spec":{"template":{"spec":{"containers":[{"name":"node","image":"pytorch/pytorch:2.5.0","command":["torchrun","train.py"],"resources":{"limits":{"nvidia.com/gpu":"8"}}}]}}}}}]}}}}`)

// A 4-clique Training PodCliqueSet with a scaling group.
var benchPodCliqueSet = []byte(`{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"pretrain","namespace":"ml"},
"spec":{"replicas":2,"workloadType":"Training","trainingSpec":{"maxRestarts":3,"maxRuntime":"24h"},"template":{"terminationDelay":"0s","cliques":[
{"name":"leader","spec":{"roleName":"leader","replicas":1,"minAvailable":1,"podSpec":{"restartPolicy":"Never","containers":[{"name":"c","image":"trainer:v1","resources":{"limits":{"nvidia.com/gpu":"8"}}}]}}},
{"name":"worker","spec":{"roleName":"worker","replicas":8,"minAvailable":8,"startsAfter":["leader"],"podSpec":{"restartPolicy":"Never","containers":[{"name":"c","image":"trainer:v1","resources":{"limits":{"nvidia.com/gpu":"8"}}}]}}},
{"name":"evaluator","spec":{"roleName":"evaluator","replicas":2,"minAvailable":1,"podSpec":{"restartPolicy":"Never","containers":[{"name":"c","image":"eval:v1"}]}}},
{"name":"checkpointer","spec":{"roleName":"checkpointer","replicas":1,"minAvailable":1,"podSpec":{"restartPolicy":"Never","containers":[{"name":"c","image":"ckpt:v1"}]}}}],
"podCliqueScalingGroups":[{"name":"train","cliqueNames":["leader","worker"],"replicas":1,"minAvailable":1}]}}}`)

func benchmarkValidate(b *testing.B, kind metav1.GroupVersionKind, ns string, obj []byte) {
	c, err := NewChain(ChainOptions{Rules: seedcrds.Config(celrules.Config{})})
	if err != nil {
		b.Fatal(err)
	}
	req := &Request{Operation: admissionv1.Create, Kind: kind, Namespace: ns, Object: obj}
	if v := c.Validate(context.Background(), req); !v.Allowed || len(v.Violations) != 0 {
		b.Fatalf("benchmark object is not clean: %+v", v.Violations)
	}
	b.ReportAllocs()
	for b.Loop() {
		c.Validate(context.Background(), req)
	}
}

// BenchmarkValidateTrainingRuntime evaluates every rule for a typical
// TrainingRuntime, decoding included. Target: median at most 50 µs.
func BenchmarkValidateTrainingRuntime(b *testing.B) {
	benchmarkValidate(b, metav1.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainingRuntime"}, "ml", benchTrainingRuntime)
}

// BenchmarkValidatePodCliqueSet evaluates every rule for a 4-clique
// PodCliqueSet, decoding included. Target: median at most 50 µs.
func BenchmarkValidatePodCliqueSet(b *testing.B) {
	benchmarkValidate(b, metav1.GroupVersionKind{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"}, "ml", benchPodCliqueSet)
}

// BenchmarkAdmitPodCliqueSet is the whole chain as `shepherd check` runs
// it: decode, default, patch, validate.
func BenchmarkAdmitPodCliqueSet(b *testing.B) {
	c, err := NewChain(ChainOptions{Rules: seedcrds.Config(celrules.Config{})})
	if err != nil {
		b.Fatal(err)
	}
	req := &Request{Operation: admissionv1.Create, Kind: metav1.GroupVersionKind{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"}, Namespace: "ml", Object: benchPodCliqueSet}
	b.ReportAllocs()
	for b.Loop() {
		c.Admit(context.Background(), req)
	}
}

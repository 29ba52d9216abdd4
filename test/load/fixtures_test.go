package load

import (
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// loadNamespace holds the namespaced objects of the mix.
const loadNamespace = "load"

// runtimeFixture is the ClusterTrainingRuntime the mix's TrainJobs
// reference; the TLS benchmark creates it so the lookup finds it.
const runtimeFixture = `
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: torch-distributed
spec:
  ttlSecondsAfterFinished: 3600
  mlPolicy:
    numNodes: 1
    torch: {}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata:
            labels:
              trainer.kubeflow.org/trainjob-ancestor-step: trainer
          spec:
            template:
              spec:
                containers:
                - name: node
                  image: pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime
`

// typicalPCS is a typical Training PodCliqueSet: a leader and workers, with
// the fields a user writes and none of the defaults.
const typicalPCS = `
apiVersion: grove.io/v1alpha1
kind: PodCliqueSet
metadata:
  name: llm-pretrain
  namespace: load
  labels:
    team: research
spec:
  replicas: 1
  workloadType: Training
  trainingSpec:
    maxRuntime: 24h
  template:
    headlessServiceConfig:
      publishNotReadyAddresses: true
    cliques:
    - name: leader
      spec:
        roleName: leader
        replicas: 1
        podSpec:
          containers:
          - name: leader
            image: nvcr.io/nvidia/pytorch:25.01-py3
            args: ["--role", "leader"]
            resources:
              limits:
                nvidia.com/gpu: "8"
    - name: worker
      spec:
        roleName: worker
        replicas: 4
        startsAfter: [leader]
        podSpec:
          containers:
          - name: worker
            image: nvcr.io/nvidia/pytorch:25.01-py3
            args: ["--role", "worker"]
            resources:
              limits:
                nvidia.com/gpu: "8"
`

const inferencePCS = `
apiVersion: grove.io/v1alpha1
kind: PodCliqueSet
metadata:
  name: serving
  namespace: load
spec:
  replicas: 2
  template:
    terminationDelay: 1m
    cliques:
    - name: frontend
      spec:
        roleName: frontend
        replicas: 2
        podSpec:
          containers:
          - name: frontend
            image: nginx
    - name: decode
      spec:
        roleName: decode
        replicas: 4
        minAvailable: 2
        autoScalingConfig:
          minReplicas: 2
          maxReplicas: 8
        podSpec:
          containers:
          - name: decode
            image: vllm/vllm-openai:latest
    podCliqueScalingGroups:
    - name: decoders
      cliqueNames: [decode]
      replicas: 1
`

const trainJob = `
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: my-job
  namespace: load
spec:
  runtimeRef:
    apiGroup: trainer.kubeflow.org
    kind: ClusterTrainingRuntime
    name: torch-distributed
  activeDeadlineSeconds: 7200
  trainer:
    image: docker.io/torch-run
    numNodes: 4
    resourcesPerNode:
      requests:
        nvidia.com/gpu: "4"
`

const jobSet = `
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: driver-workers
  namespace: load
spec:
  replicatedJobs:
  - name: driver
    replicas: 1
    template:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: driver
              image: busybox
  - name: workers
    replicas: 2
    dependsOn:
    - name: driver
      status: Ready
    template:
      spec:
        parallelism: 2
        completions: 2
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: worker
              image: busybox
`

const podClique = `
apiVersion: grove.io/v1alpha1
kind: PodClique
metadata:
  name: serving-0-frontend
  namespace: load
  labels:
    app.kubernetes.io/part-of: serving
    grove.io/podcliqueset-replica-index: "0"
spec:
  roleName: frontend
  replicas: 2
  minAvailable: 2
  podSpec:
    containers:
    - name: frontend
      image: nginx
`

// call is one admission request of the mix: a path and its body.
type call struct {
	name string
	path string
	body []byte
}

func toJSON(t testing.TB, manifest string) []byte {
	t.Helper()
	b, err := yaml.YAMLToJSON([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// reviewOf is the AdmissionReview the apiserver would send for obj.
func reviewOf(t testing.TB, op admissionv1.Operation, obj, old []byte) []byte {
	t.Helper()
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(obj, &meta); err != nil {
		t.Fatal(err)
	}
	gv, _ := schemaGV(meta.APIVersion)
	resource := map[string]string{
		"PodCliqueSet": "podcliquesets", "PodClique": "podcliques", "TrainJob": "trainjobs",
		"ClusterTrainingRuntime": "clustertrainingruntimes", "JobSet": "jobsets",
	}[meta.Kind]
	req := &admissionv1.AdmissionRequest{
		UID:       "3a8f1c2e-0000-4000-8000-000000000000",
		Kind:      metav1.GroupVersionKind{Group: gv[0], Version: gv[1], Kind: meta.Kind},
		Resource:  metav1.GroupVersionResource{Group: gv[0], Version: gv[1], Resource: resource},
		Name:      meta.Metadata.Name,
		Namespace: meta.Metadata.Namespace,
		Operation: op,
		UserInfo:  authenticationv1.UserInfo{Username: "alice@example.com", Groups: []string{"research", "system:authenticated"}},
		Object:    runtime.RawExtension{Raw: obj},
	}
	if old != nil {
		req.OldObject = runtime.RawExtension{Raw: old}
	}
	b, err := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  req,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func schemaGV(apiVersion string) ([2]string, bool) {
	for i := len(apiVersion) - 1; i >= 0; i-- {
		if apiVersion[i] == '/' {
			return [2]string{apiVersion[:i], apiVersion[i+1:]}, true
		}
	}
	return [2]string{"", apiVersion}, false
}

// mix is the request mix of the TLS benchmark: every kind through both
// webhooks, plus an UPDATE.
func mix(t testing.TB) []call {
	t.Helper()
	var calls []call
	for _, m := range []struct{ name, manifest string }{
		{"pcs-training", typicalPCS}, {"pcs-inference", inferencePCS}, {"trainjob", trainJob},
		{"jobset", jobSet}, {"podclique", podClique}, {"clustertrainingruntime", runtimeFixture},
	} {
		obj := toJSON(t, m.manifest)
		calls = append(calls,
			call{m.name + "/mutate", "/mutate", reviewOf(t, admissionv1.Create, obj, nil)},
			call{m.name + "/validate", "/validate", reviewOf(t, admissionv1.Create, obj, nil)})
	}
	pcs := toJSON(t, typicalPCS)
	calls = append(calls, call{"pcs-training/update", "/validate", reviewOf(t, admissionv1.Update, pcs, pcs)})
	return calls
}

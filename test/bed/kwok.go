package bed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// The kwok side of the bed: fake nodes, and pods on them moved through a
// kubelet's phases by kwok's stages, so that tests never write pod status.
const (
	// KwokNodeAnnotation marks the nodes kwok manages
	// (--manage-nodes-with-annotation-selector).
	KwokNodeAnnotation = "kwok.x-k8s.io/node"
	// A Running pod owned by a Job completes (phase Succeeded, exit code
	// 0) SucceedAfter after it started — unless its containers use
	// RunForeverImage (it runs until deleted) or SlowImage (it completes
	// after SlowAfter, time for a test to change something while it runs).
	SucceedAfter    = 4 * time.Second
	RunForeverImage = "bed.shepherd.dev/run-forever"
	SlowImage       = "bed.shepherd.dev/slow"
	SlowAfter       = 20 * time.Second
)

// kwokStages are the stages the bed's kwok runs (sigs.k8s.io/kwok Stage,
// v1alpha1), written for the bed: a node becomes Ready with the capacity it
// was created with; a bound pod becomes Running and Ready; a Job's pod
// completes after SucceedAfter (SlowAfter for SlowImage, never for
// RunForeverImage); a deleted pod goes away, as a kubelet would make it.
var kwokStages = fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: bed-node-ready
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - {key: '.status.conditions.[] | select( .type == "Ready" ) | .status', operator: NotIn, values: ["True"]}
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - {type: {{ .type | Quote }}, status: {{ .status | Quote }}, reason: {{ .reason | Quote }}, message: {{ .message | Quote }}, lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $now | Quote }}}
      {{ end }}
      addresses:
      - {type: InternalIP, address: {{ NodeIP | Quote }}}
      allocatable:
      {{ with .status.allocatable }}{{ YAML . 1 }}{{ else }}  {cpu: "64", memory: 512Gi, pods: "110"}{{ end }}
      capacity:
      {{ with .status.capacity }}{{ YAML . 1 }}{{ else }}  {cpu: "64", memory: 512Gi, pods: "110"}{{ end }}
      nodeInfo: {architecture: amd64, operatingSystem: linux, kubeletVersion: kwok, containerRuntimeVersion: kwok, kernelVersion: kwok, kubeProxyVersion: kwok, bootID: "", machineID: "", osImage: "", systemUUID: ""}
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: bed-pod-ready
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Pending]}
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Running
      startTime: {{ $now | Quote }}
      conditions:
      - {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: PodScheduled, status: "True", lastTransitionTime: {{ $now | Quote }}}
      containerStatuses:
      {{ range .spec.containers }}
      - {name: {{ .name | Quote }}, image: {{ .image | Quote }}, imageID: "", ready: true, started: true, restartCount: 0, state: {running: {startedAt: {{ $now | Quote }}}}}
      {{ end }}
      {{ with NodeIPsWith .spec.nodeName }}hostIP: {{ index . 0 | Quote }}{{ end }}
      {{ with PodIPsWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace }}
      podIP: {{ index . 0 | Quote }}
      podIPs:
      {{ range . }}
      - {ip: {{ . | Quote }}}
      {{ end }}
      {{ end }}
%s%s---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: bed-pod-delete
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: Exists}
  next:
    delete: true
`, succeedStage("bed-pod-succeed", "NotIn", SucceedAfter, RunForeverImage, SlowImage),
	succeedStage("bed-pod-succeed-slow", "In", SlowAfter, SlowImage))

// succeedStage is a stage completing a Running pod owned by a Job after
// delay, selected by whether its containers' images are (op In) or are not
// (op NotIn) among images.
func succeedStage(name, op string, delay time.Duration, images ...string) string {
	quoted := make([]string, len(images))
	for i, im := range images {
		quoted[i] = strconv.Quote(im)
	}
	return fmt.Sprintf(`---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: %s
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Running]}
    - {key: '.metadata.ownerReferences.[].kind', operator: In, values: [Job]}
    - {key: '.spec.containers.[].image', operator: %s, values: [%s]}
  delay:
    durationMilliseconds: %d
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Succeeded
      conditions:
      - {type: Ready, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
      - {type: ContainersReady, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
      containerStatuses:
      {{ range .spec.containers }}
      - {name: {{ .name | Quote }}, image: {{ .image | Quote }}, imageID: "", ready: false, started: false, restartCount: 0, state: {terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}}}
      {{ end }}
`, name, op, strings.Join(quoted, ", "), delay.Milliseconds())
}

func (b *Bed) startKwok(bin string) (*Process, error) {
	kc, err := b.kubeconfig(KwokUser)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(b.Dir, "kwok-stages.yaml")
	if err := os.WriteFile(cfg, []byte(kwokStages), 0o600); err != nil {
		return nil, err
	}
	server := cluster.FreeAddr()
	return b.start("kwok", KwokUser, "http://"+server+"/healthz", kc, nil, bin,
		"--kubeconfig="+kc,
		"--config="+cfg,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+KwokNodeAnnotation+"=fake",
		"--server-address="+server)
}

func (b *Bed) startScheduler(bin string, genericWorkload bool) (*Process, error) {
	kc, err := b.kubeconfig(SchedulerUser)
	if err != nil {
		return nil, err
	}
	secure := cluster.FreeAddr()
	host, port := hostPort(secure)
	args := []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--authentication-skip-lookup=true",
		"--leader-elect=false",
		"--bind-address=" + host,
		"--secure-port=" + port,
		"--cert-dir=" + filepath.Join(b.Dir, "scheduler-certs"),
	}
	if genericWorkload {
		// The gang scheduling plugin reads Workloads and PodGroups
		// (scheduling.k8s.io/v1beta1 in 1.37).
		args = append(args, "--feature-gates=GenericWorkload=true")
	}
	return b.start("kube-scheduler", SchedulerUser, "https://"+secure+"/healthz", kc, nil, bin, args...)
}

// Nodes are the capacity of each fake node AddNodes creates.
type Nodes struct {
	// Count is how many nodes.
	Count int
	// Pods, CPU, Memory and GPUs (nvidia.com/gpu) are each node's
	// allocatable; zero means 110 pods, 64 CPUs, 512 GiB, no GPU.
	Pods, CPU, GPUs int64
	Memory          string
}

// GPUResource is the extended resource the bed's GPU nodes offer.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// AddNodes creates n.Count kwok nodes named <prefix>-<i>, waits until they
// are Ready, and deletes them when the test ends (after the test's own
// cleanups, which should delete its workloads first).
func (b *Bed) AddNodes(t testing.TB, prefix string, n Nodes) []string {
	t.Helper()
	ctx := context.Background()
	alloc := corev1.ResourceList{
		corev1.ResourcePods:   *resource.NewQuantity(orDefault(n.Pods, 110), resource.DecimalSI),
		corev1.ResourceCPU:    *resource.NewQuantity(orDefault(n.CPU, 64), resource.DecimalSI),
		corev1.ResourceMemory: resource.MustParse(orString(n.Memory, "512Gi")),
	}
	if n.GPUs > 0 {
		alloc[GPUResource] = *resource.NewQuantity(n.GPUs, resource.DecimalSI)
	}
	var names []string
	for i := range n.Count {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        fmt.Sprintf("%s-%d", prefix, i),
				Annotations: map[string]string{KwokNodeAnnotation: "fake"},
				Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": fmt.Sprintf("%s-%d", prefix, i)},
			},
			// The capacity is created with the node, as a kubelet
			// registers it; kwok's stage keeps what it finds.
			Status: corev1.NodeStatus{Capacity: alloc, Allocatable: alloc},
		}
		if err := b.Cluster.Client.Create(ctx, node); err != nil {
			t.Fatalf("creating node %s: %v", node.Name, err)
		}
		names = append(names, node.Name)
	}
	t.Cleanup(func() {
		// A node going away takes its pods with it: delete them at once,
		// as a kubelet would, or they stay Terminating with nobody to
		// finish them (kwok manages only nodes that exist).
		var pods corev1.PodList
		if err := b.Cluster.Client.List(ctx, &pods); err != nil {
			t.Errorf("listing pods: %v", err)
		}
		for _, p := range pods.Items {
			if slices.Contains(names, p.Spec.NodeName) {
				if err := b.Cluster.Client.Delete(ctx, &p, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("deleting pod %s/%s of node %s: %v", p.Namespace, p.Name, p.Spec.NodeName, err)
				}
			}
		}
		for _, name := range names {
			err := b.Cluster.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting node %s: %v", name, err)
			}
		}
	})
	if err := testkit.Poll(200*time.Millisecond, time.Minute, func() error {
		for _, name := range names {
			var node corev1.Node
			if err := b.Cluster.Client.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
				return err
			}
			if !nodeReady(&node) {
				return fmt.Errorf("node %s not Ready", name)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("kwok did not make the nodes Ready: %v\n%s", err, b.Kwok.Log())
	}
	// The apiserver's TaintNodesByCondition admission gives every new
	// node the not-ready taint, which kube-controller-manager's node
	// lifecycle controller lifts once the node is Ready. That controller
	// does not run here (without kubelet heartbeats it would soon taint
	// every node unreachable): lift the taint as it would.
	for _, name := range names {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"taints":null}}`))
		if err := b.Cluster.Client.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, patch); err != nil {
			t.Fatalf("lifting the not-ready taint of node %s: %v", name, err)
		}
	}
	return names
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func orDefault(v, d int64) int64 {
	if v == 0 {
		return d
	}
	return v
}

func orString(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

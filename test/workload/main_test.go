// Package workload tests shepherd's Workload and PodGroup creation (R-WL,
// KEP-3015) and its schedulingGroup injection (D-WL-1) beside the real
// operators (test/bed): Trainer v2.3.0 creates each TrainJob's JobSet,
// shepherd's webhook injects the PodGroup names into it, the JobSet and Job
// controllers make the pods, and kube-controller-manager's garbage
// collector (and, on v1beta1, its PodGroup protection controller) removes
// what is deleted. Each test starts a bed of its own, serving the Workload
// API at scheduling.k8s.io/v1beta1, v1alpha3, or not at all. A runtime asks
// for the Workload API with its carrier annotation
// shepherd.dev/pod-group-policy: workload (Trainer v2.3.0's podGroupPolicy
// has no workload). No test writes what an operator would write.
package workload

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/test/bed"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// within bounds every wait: generous, the machine is shared.
const within = 2 * time.Minute

// fixture is a test's bed and the Workload API version it serves.
type fixture struct {
	*bed.Suite
	version string
}

// start starts a bed serving the Workload API at v ("" for none); on
// v1beta1 kube-scheduler gang-schedules and kube-controller-manager runs
// the PodGroup protection controller.
func start(t *testing.T, v cluster.WorkloadAPI) *fixture {
	t.Helper()
	return &fixture{
		Suite:   bed.StartSuite(t, bed.SuiteOptions{WorkloadAPI: v, GenericWorkload: v == cluster.WorkloadAPIV1beta1}),
		version: string(v),
	}
}

// namespace is a namespace for one scenario whose workloads are deleted
// when it ends.
func (f *fixture) namespace(t *testing.T) string {
	t.Helper()
	ns := f.Cluster.Namespace(t)
	f.DeleteWorkloads(t, ns)
	return ns
}

// workloadRuntime copies Trainer's runtime file as name, asking for the
// Workload API with the carrier annotation.
func (f *fixture) workloadRuntime(t *testing.T, file, name string, mutate ...func(*unstructured.Unstructured)) *unstructured.Unstructured {
	t.Helper()
	return f.RuntimeCopyOf(t, file, name, map[string]string{api.AnnotationPodGroupPolicy: api.PodGroupPolicyWorkload}, mutate...)
}

// withInitializers puts a dataset and a model initializer before the
// runtime's replicatedJobs, labelled with their ancestor steps as
// Trainer's own initializer runtimes are.
func withInitializers(u *unstructured.Unstructured) {
	rjs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "replicatedJobs")
	var inits []any
	for _, step := range []string{api.AncestorDatasetInitializer, api.AncestorModelInitializer} {
		inits = append(inits, map[string]any{
			"name": step,
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{api.LabelTrainJobAncestorStep: step}},
				"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
					"restartPolicy": "Never",
					"containers":    []any{map[string]any{"name": step, "image": bed.RunForeverImage}},
				}}},
			},
		})
	}
	_ = unstructured.SetNestedSlice(u.Object, append(inits, rjs...), "spec", "template", "spec", "replicatedJobs")
}

// numNodes sets the runtime's mlPolicy.numNodes.
func numNodes(n int64) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, n, "spec", "mlPolicy", "numNodes")
	}
}

// trainJob creates a TrainJob on ClusterTrainingRuntime rt; numNodes 0
// leaves the runtime's.
func (f *fixture) trainJob(t *testing.T, ns, name, rt string, nodes int64) *unstructured.Unstructured {
	t.Helper()
	spec := bed.OnRuntime(rt, bed.RunForeverImage, nodes)
	if nodes == 0 {
		delete(spec["trainer"].(map[string]any), "numNodes")
	}
	return f.TrainJob(t, ns, name, nodes, spec)
}

func (f *fixture) get(ctx context.Context, kind, ns, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(api.SchedulingGroup + "/" + f.version)
	u.SetKind(kind)
	err := f.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u)
	return u, err
}

func (f *fixture) list(t *testing.T, kind, ns string) []unstructured.Unstructured {
	t.Helper()
	l := &unstructured.UnstructuredList{}
	l.SetAPIVersion(api.SchedulingGroup + "/" + f.version)
	l.SetKind(kind + "List")
	if err := f.Cluster.Client.List(context.Background(), l, client.InNamespace(ns)); err != nil {
		t.Fatalf("listing %ss: %v", kind, err)
	}
	return l.Items
}

// livePodGroups are the names of ns's PodGroups not being deleted (a
// deleted one waits for the protection controller).
func (f *fixture) livePodGroups(t *testing.T, ns string) []string {
	t.Helper()
	var live []string
	for _, pg := range f.list(t, api.KindPodGroup, ns) {
		if pg.GetDeletionTimestamp() == nil {
			live = append(live, pg.GetName())
		}
	}
	return live
}

// wantTemplate is one podGroupTemplate the test expects.
type wantTemplate struct {
	name     string
	minCount int64 // 0: basic
}

func policyOf(w wantTemplate) map[string]any {
	if w.minCount == 0 {
		return map[string]any{"basic": map[string]any{}}
	}
	return map[string]any{"gang": map[string]any{"minCount": w.minCount}}
}

// trainJobOwner is the controller reference to tj shepherd sets.
func trainJobOwner(tj *unstructured.Unstructured) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: tj.GetAPIVersion(), Kind: api.KindTrainJob, Name: tj.GetName(), UID: tj.GetUID(),
		Controller: ptr(true)}
}

func ptr[T any](v T) *T { return &v }

func equalOwner(a, b metav1.OwnerReference) bool {
	deref := func(p *bool) bool { return p != nil && *p }
	return a.APIVersion == b.APIVersion && a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID &&
		deref(a.Controller) == deref(b.Controller) && deref(a.BlockOwnerDeletion) == deref(b.BlockOwnerDeletion)
}

// assertWorkload waits for tj's Workload and PodGroups and checks every
// field shepherd sets, that the JobSet Trainer created (as shepherd's
// webhook mutated it) joins each replicatedJob's pods to one of them, and
// that the TrainJob's record says WorkloadReady.
func (f *fixture) assertWorkload(t *testing.T, tj *unstructured.Unstructured, want []wantTemplate) {
	t.Helper()
	ctx := context.Background()
	ns := tj.GetNamespace()
	var wl *unstructured.Unstructured
	f.Eventually(t, within, "the Workload of TrainJob "+tj.GetName(), func() (bool, string) {
		var err error
		wl, err = f.get(ctx, api.KindWorkload, ns, tj.GetName())
		if err != nil {
			return false, err.Error()
		}
		ctl := metav1.GetControllerOf(wl)
		return ctl != nil && ctl.UID == tj.GetUID(), fmt.Sprintf("controller %+v", ctl)
	})
	owner := trainJobOwner(tj)
	if got := wl.GetOwnerReferences(); len(got) != 1 || !equalOwner(got[0], owner) {
		t.Errorf("Workload ownerReferences = %+v, want only %+v", got, owner)
	}
	ref, _, _ := unstructured.NestedStringMap(wl.Object, "spec", "controllerRef")
	if want := map[string]string{"apiGroup": api.TrainerGroup, "kind": api.KindTrainJob, "name": tj.GetName()}; fmt.Sprint(ref) != fmt.Sprint(want) {
		t.Errorf("Workload spec.controllerRef = %v, want %v", ref, want)
	}
	templates, _, _ := unstructured.NestedSlice(wl.Object, "spec", "podGroupTemplates")
	if len(templates) != len(want) {
		t.Fatalf("Workload has %d podGroupTemplates, want %d: %v", len(templates), len(want), templates)
	}
	for i, w := range want {
		tm := templates[i].(map[string]any)
		if tm["name"] != w.name {
			t.Errorf("podGroupTemplates[%d].name = %v, want %s", i, tm["name"], w.name)
		}
		if fmt.Sprint(tm["schedulingPolicy"]) != fmt.Sprint(policyOf(w)) {
			t.Errorf("podGroupTemplates[%d].schedulingPolicy = %v, want %v", i, tm["schedulingPolicy"], policyOf(w))
		}
	}

	// One PodGroup per template.
	names := map[string]bool{}
	for _, w := range want {
		name := api.PodGroupName(tj.GetName(), tj.GetUID(), w.name)
		names[name] = true
		var pg *unstructured.Unstructured
		f.Eventually(t, within, "PodGroup "+name, func() (bool, string) {
			var err error
			pg, err = f.get(ctx, api.KindPodGroup, ns, name)
			if err != nil {
				return false, err.Error()
			}
			return pg.GetDeletionTimestamp() == nil, "being deleted"
		})
		workloadOwner := metav1.OwnerReference{APIVersion: api.SchedulingGroup + "/" + f.version, Kind: api.KindWorkload, Name: wl.GetName(), UID: wl.GetUID()}
		owners := pg.GetOwnerReferences()
		if len(owners) != 2 || !equalOwner(owners[0], workloadOwner) || !equalOwner(owners[1], owner) {
			t.Errorf("PodGroup %s ownerReferences = %+v, want [%+v %+v]", name, owners, workloadOwner, owner)
		}
		wref, _, _ := unstructured.NestedStringMap(pg.Object, "spec", "workloadRef")
		if want := map[string]string{"workloadName": wl.GetName(), "templateName": w.name}; fmt.Sprint(wref) != fmt.Sprint(want) {
			t.Errorf("PodGroup %s spec.workloadRef = %v, want %v", name, wref, want)
		}
		policy, _, _ := unstructured.NestedMap(pg.Object, "spec", "schedulingPolicy")
		if fmt.Sprint(policy) != fmt.Sprint(policyOf(w)) {
			t.Errorf("PodGroup %s spec.schedulingPolicy = %v, want %v", name, policy, policyOf(w))
		}
	}
	if live := f.livePodGroups(t, ns); len(live) != len(want) {
		t.Errorf("namespace holds %d live PodGroups, want %d: %v", len(live), len(want), live)
	}

	// The JobSet Trainer created, as shepherd's webhook mutated it: every
	// replicatedJob's pods join one of the PodGroups.
	js := f.WaitJobSet(t, ns, tj.GetName())
	rjs, _, _ := unstructured.NestedSlice(js.Object, "spec", "replicatedJobs")
	for _, r := range rjs {
		rj := r.(map[string]any)
		name, _, _ := unstructured.NestedString(rj, "template", "spec", "template", "spec", "schedulingGroup", "podGroupName")
		if !names[name] {
			t.Errorf("replicatedJob %v of the JobSet joins PodGroup %q, want one of %v", rj["name"], name, names)
		}
	}

	f.recordCondition(t, tj, metav1.ConditionTrue, api.ReasonWorkloadCreated)
}

// joinsNoPodGroup checks that no replicatedJob of the JobSet Trainer
// made for tj joins its pods to a PodGroup.
func (f *fixture) joinsNoPodGroup(t *testing.T, tj *unstructured.Unstructured, why string) {
	t.Helper()
	js := f.WaitJobSet(t, tj.GetNamespace(), tj.GetName())
	rjs, _, _ := unstructured.NestedSlice(js.Object, "spec", "replicatedJobs")
	for _, r := range rjs {
		if sg, ok, _ := unstructured.NestedMap(r.(map[string]any), "template", "spec", "template", "spec", "schedulingGroup"); ok {
			t.Errorf("the JobSet of %s joins its pods to %v", why, sg)
		}
	}
}

// recordCondition waits until the TrainJob's record has WorkloadReady with
// status and reason.
func (f *fixture) recordCondition(t *testing.T, tj *unstructured.Unstructured, status metav1.ConditionStatus, reason string) {
	t.Helper()
	f.Eventually(t, within, fmt.Sprintf("WorkloadReady=%s reason %s in the record", status, reason), func() (bool, string) {
		rec, err := cluster.Record(context.Background(), f.Cluster.Client, tj.GetNamespace(), api.KindTrainJob, tj.GetName())
		if err != nil || rec == nil {
			return false, fmt.Sprint("no record: ", err)
		}
		cond := meta.FindStatusCondition(rec.Status.Conditions, api.TrainJobWorkloadReady)
		return cond != nil && cond.Status == status && cond.Reason == reason, fmt.Sprintf("%+v", cond)
	})
}

// hasEvent waits for an Event of reason and type on the TrainJob.
func (f *fixture) hasEvent(t *testing.T, tj *unstructured.Unstructured, reason, typ string) {
	t.Helper()
	f.Eventually(t, within, "a "+reason+" Event on the TrainJob", func() (bool, string) {
		for _, e := range f.Events(t, tj.GetNamespace(), tj.GetName(), reason) {
			if e.Type == typ {
				return true, ""
			}
		}
		return false, "none yet"
	})
}

// counter sums a counter of the serve running in this process over the
// series whose labels include want.
func counter(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	n, err := cluster.Metric(name, want)
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	return n
}

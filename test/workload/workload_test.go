package workload

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/workload"
	"github.com/shepherd-k8s/shepherd/test/bed"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

func TestWorkloadV1beta1(t *testing.T) {
	f := start(t, cluster.WorkloadAPIV1beta1)
	scenarios(t, f)
	// Only v1beta1 has kube-controller-manager's protection controller,
	// which lets a deleted PodGroup go once no pod uses it.
	t.Run("deleted PodGroup recreated once it is gone", f.deletedPodGroupRecreated)
	t.Run("legacy WorkloadReady condition moves to the record", f.legacyConditionMoves)
}

func TestWorkloadV1alpha3(t *testing.T) {
	scenarios(t, start(t, cluster.WorkloadAPIV1alpha3))
}

// scenarios runs the R-WL scenarios on f's bed.
func scenarios(t *testing.T, f *fixture) {
	t.Run("initializers and trainer", f.initializersAndTrainer)
	t.Run("MPI launcher and nodes share the trainer gang, minCount from mlPolicy", f.mpi)
	t.Run("TrainJob recreated before the garbage collector ran", f.recreated)
	t.Run("foreign Workload: condition and Event, no retry loop", f.foreignWorkload)
	t.Run("runtime change not applied to existing objects", f.runtimeChangeNotApplied)
	t.Run("runtime without podGroupPolicy.workload: nothing created", f.noPolicy)
}

// initializersAndTrainer: a runtime with a dataset and a model initializer
// gets one basic initializer group and a gang of numNodes for the trainer;
// a Normal Event and the metric count it; suspension (Trainer suspends the
// JobSet, its pods go) keeps the objects and creates nothing more.
func (f *fixture) initializersAndTrainer(t *testing.T) {
	ns := f.namespace(t)
	f.workloadRuntime(t, "torch_distributed.yaml", "torch-init-"+f.version, withInitializers)
	before := counter(t, "shepherd_workloads_created_total", map[string]string{"version": f.version})
	tj := f.trainJob(t, ns, "llm", "torch-init-"+f.version, 8)
	want := []wantTemplate{{name: api.PodGroupTemplateInitializer}, {name: api.PodGroupTemplateTrainer, minCount: 8}}
	f.assertWorkload(t, tj, want)
	f.hasEvent(t, tj, api.EventWorkloadCreated, corev1.EventTypeNormal)
	if after := counter(t, "shepherd_workloads_created_total", map[string]string{"version": f.version}); after-before != 1 {
		t.Errorf("shepherd_workloads_created_total{version=%q} went from %v to %v, want +1", f.version, before, after)
	}

	f.SetSuspend(t, tj.GetNamespace(), tj.GetName(), true)
	f.Consistently(t, 4*time.Second, "one Workload and two PodGroups through the suspension", func() (bool, string) {
		wls, pgs := len(f.list(t, api.KindWorkload, ns)), len(f.list(t, api.KindPodGroup, ns))
		return wls == 1 && pgs == 2, fmt.Sprintf("%d Workloads, %d PodGroups", wls, pgs)
	})
	f.assertWorkload(t, tj, want)
}

// mpi: on Trainer's DeepSpeed runtime (MPI, the launcher run as a node)
// the launcher and the nodes are one trainer gang of mlPolicy.numNodes.
func (f *fixture) mpi(t *testing.T) {
	ns := f.namespace(t)
	f.workloadRuntime(t, "deepspeed_distributed.yaml", "deepspeed-"+f.version, numNodes(4))
	tj := f.trainJob(t, ns, "mpi", "deepspeed-"+f.version, 0)
	f.assertWorkload(t, tj, []wantTemplate{{name: api.PodGroupTemplateTrainer, minCount: 4}})
}

// recreated: a TrainJob deleted and created again under its name at once,
// before the garbage collector removed the old Workload: shepherd never
// adopts the old Workload nor hangs the new job's PodGroups under it; once
// the collector has removed it, the new job gets its own.
func (f *fixture) recreated(t *testing.T) {
	ctx := context.Background()
	ns := f.namespace(t)
	rt := "torch-again-" + f.version
	f.workloadRuntime(t, "torch_distributed.yaml", rt)
	old := f.trainJob(t, ns, "again", rt, 2)
	f.assertWorkload(t, old, []wantTemplate{{name: api.PodGroupTemplateTrainer, minCount: 2}})
	wl, err := f.get(ctx, api.KindWorkload, ns, "again")
	if err != nil {
		t.Fatal(err)
	}
	oldWorkload := wl.GetUID()
	if err := f.Cluster.Client.Delete(ctx, old.DeepCopy(), client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatalf("deleting the TrainJob: %v", err)
	}
	f.Eventually(t, within, "the old TrainJob gone", func() (bool, string) {
		return f.GetTrainJob(t, ns, "again") == nil, "still there"
	})
	fresh := f.trainJob(t, ns, "again", rt, 3)

	// Until the new job's Workload stands, no object of the old job is
	// adopted by the new one: whatever names the new job as an owner is
	// an object made for it (a Workload other than the old one, a
	// PodGroup under the new job's name). The garbage collector may strip
	// the old job's reference from the old PodGroups meanwhile.
	freshGroup := api.PodGroupName(fresh.GetName(), fresh.GetUID(), api.PodGroupTemplateTrainer)
	f.Eventually(t, within, "the new job's Workload", func() (bool, string) {
		for _, kind := range []string{api.KindWorkload, api.KindPodGroup} {
			for _, o := range f.list(t, kind, ns) {
				for _, ref := range o.GetOwnerReferences() {
					if ref.UID != fresh.GetUID() {
						continue
					}
					if (kind == api.KindWorkload && o.GetUID() == oldWorkload) || (kind == api.KindPodGroup && o.GetName() != freshGroup) {
						t.Fatalf("%s %s of the old job adopted by the new one: owners %+v", kind, o.GetName(), o.GetOwnerReferences())
					}
				}
			}
		}
		wl, err := f.get(ctx, api.KindWorkload, ns, "again")
		if err != nil {
			return false, err.Error()
		}
		ctl := metav1.GetControllerOf(wl)
		return ctl != nil && ctl.UID == fresh.GetUID(), fmt.Sprintf("Workload controller %+v", ctl)
	})
	f.Eventually(t, within, "the old job's PodGroup gone", func() (bool, string) {
		live := f.livePodGroups(t, ns)
		return len(live) == 1, fmt.Sprint("live PodGroups ", live)
	})
	f.assertWorkload(t, fresh, []wantTemplate{{name: api.PodGroupTemplateTrainer, minCount: 3}})
}

// foreignWorkload: a user's Workload with the name the TrainJob's would
// have, controlled by nothing: the record says WorkloadNotOwned, a Warning
// Event says so, shepherd does not retry in a loop nor adopt it, and makes
// no PodGroup; its deletion is the change that lets the job get its own.
func (f *fixture) foreignWorkload(t *testing.T) {
	ctx := context.Background()
	ns := f.namespace(t)
	rt := "torch-taken-" + f.version
	f.workloadRuntime(t, "torch_distributed.yaml", rt)
	foreign := workload.BuildWorkload(&trainerv1alpha1.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken", UID: types.UID("a-user")}},
		workload.Plan{Templates: []workload.GroupTemplate{{Name: api.PodGroupTemplateTrainer}}}, f.version)
	foreign.SetOwnerReferences(nil)
	if err := f.Cluster.Client.Create(ctx, foreign); err != nil {
		t.Fatalf("creating the user's Workload: %v", err)
	}
	tj := f.trainJob(t, ns, "taken", rt, 2)
	f.recordCondition(t, tj, metav1.ConditionFalse, api.ReasonWorkloadNotOwned)
	f.hasEvent(t, tj, api.EventWorkloadNotOwned, corev1.EventTypeWarning)

	// No hot loop: the controller stops (a terminal error) until something
	// changes. An erroring reconcile would be retried within milliseconds,
	// then with backoff: a dozen times in 3 s. Trainer writing the job's
	// status is no change to it (the controller follows generations).
	reconciles := func() float64 {
		return counter(t, "controller_runtime_reconcile_total", map[string]string{"controller": workload.ControllerName})
	}
	before := reconciles()
	time.Sleep(3 * time.Second)
	if n := reconciles() - before; n != 0 {
		t.Errorf("%s reconciled %v times in 3 s while blocked by a user's Workload, want 0", workload.ControllerName, n)
	}
	if wl, err := f.get(ctx, api.KindWorkload, ns, "taken"); err != nil || len(wl.GetOwnerReferences()) != 0 {
		t.Errorf("the user's Workload was adopted or lost: owners %v, err %v", wl.GetOwnerReferences(), err)
	}
	if n := len(f.list(t, api.KindPodGroup, ns)); n != 0 {
		t.Errorf("namespace holds %d PodGroups, want none under a user's Workload", n)
	}

	if err := f.Cluster.Client.Delete(ctx, foreign); err != nil {
		t.Fatalf("deleting the user's Workload: %v", err)
	}
	f.assertWorkload(t, tj, []wantTemplate{{name: api.PodGroupTemplateTrainer, minCount: 2}})
}

// runtimeChangeNotApplied: a runtime's numNodes changed after its job's
// Workload was made does not change it (KEP-3015: created once).
func (f *fixture) runtimeChangeNotApplied(t *testing.T) {
	ctx := context.Background()
	ns := f.namespace(t)
	rt := f.workloadRuntime(t, "torch_distributed.yaml", "torch-kept-"+f.version, numNodes(2))
	tj := f.trainJob(t, ns, "kept", rt.GetName(), 0)
	want := []wantTemplate{{name: api.PodGroupTemplateTrainer, minCount: 2}}
	f.assertWorkload(t, tj, want)
	patch := []byte(`{"spec":{"mlPolicy":{"numNodes":6}}}`)
	if err := f.Cluster.Client.Patch(ctx, rt.DeepCopy(), client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatalf("changing the runtime: %v", err)
	}
	time.Sleep(2 * time.Second)
	f.assertWorkload(t, tj, want)
}

// noPolicy: a TrainJob whose runtime does not ask for the Workload API gets
// no Workload; a marker job in its namespace, on a runtime that does,
// proves the namespace's jobs were reconciled.
func (f *fixture) noPolicy(t *testing.T) {
	ns := f.namespace(t)
	tj := f.trainJob(t, ns, "plain", bed.TorchRuntime, 2)
	rt := "torch-marker-" + f.version
	f.workloadRuntime(t, "torch_distributed.yaml", rt)
	marker := f.trainJob(t, ns, "marker", rt, 1)
	f.assertWorkload(t, marker, []wantTemplate{{name: api.PodGroupTemplateTrainer, minCount: 1}})
	if _, err := f.get(context.Background(), api.KindWorkload, ns, tj.GetName()); !apierrors.IsNotFound(err) {
		t.Errorf("Workload for a TrainJob whose runtime does not ask for one: err = %v, want NotFound", err)
	}
	f.joinsNoPodGroup(t, tj, "a job without a Workload")
}

// deletedPodGroupRecreated: a PodGroup deleted while its job is suspended
// (no pod uses it, so kube-controller-manager's protection controller lets
// it go) is created again within seconds, under the same name.
func (f *fixture) deletedPodGroupRecreated(t *testing.T) {
	ctx := context.Background()
	ns := f.namespace(t)
	rt := "torch-lost-pg"
	f.workloadRuntime(t, "torch_distributed.yaml", rt)
	tj := f.trainJob(t, ns, "lost-pg", rt, 2)
	want := []wantTemplate{{name: api.PodGroupTemplateTrainer, minCount: 2}}
	f.assertWorkload(t, tj, want)
	f.SetSuspend(t, tj.GetNamespace(), tj.GetName(), true)
	f.Eventually(t, within, "the suspended job's pods gone", func() (bool, string) {
		var pods corev1.PodList
		if err := f.Cluster.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, f.PodSummary(ns)
	})
	name := api.PodGroupName(tj.GetName(), tj.GetUID(), api.PodGroupTemplateTrainer)
	pg, err := f.get(ctx, api.KindPodGroup, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Cluster.Client.Delete(ctx, pg); err != nil {
		t.Fatalf("deleting the PodGroup: %v", err)
	}
	deleted := time.Now()
	f.Eventually(t, within, "PodGroup "+name+" recreated", func() (bool, string) {
		got, err := f.get(ctx, api.KindPodGroup, ns, name)
		if err != nil {
			return false, err.Error()
		}
		return got.GetUID() != pg.GetUID() && got.GetDeletionTimestamp() == nil,
			fmt.Sprintf("UID %s, finalizers %v, deleted %v", got.GetUID(), got.GetFinalizers(), got.GetDeletionTimestamp())
	})
	t.Logf("PodGroup recreated %v after its deletion", time.Since(deleted).Round(time.Millisecond))
	f.assertWorkload(t, tj, want)
}

// legacyConditionMoves: an upgrade from a shepherd that kept WorkloadReady
// on the TrainJob (Trainer then printed it as the job's STATE): the new
// serve removes it from the job, in one status write of its own, and the
// record carries it; Trainer's conditions are left alone.
func (f *fixture) legacyConditionMoves(t *testing.T) {
	ctx := context.Background()
	ns := f.namespace(t)
	rt := "torch-upgraded"
	f.workloadRuntime(t, "torch_distributed.yaml", rt)
	tj := f.trainJob(t, ns, "upgraded", rt, 2)
	f.assertWorkload(t, tj, []wantTemplate{{name: api.PodGroupTemplateTrainer, minCount: 2}})

	// What the earlier shepherd left, written while serve is down.
	up := f.ServeDown(t)
	u := f.GetTrainJob(t, ns, tj.GetName())
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	conds = append(conds, map[string]any{"type": api.TrainJobWorkloadReady, "status": "True", "reason": api.ReasonWorkloadCreated,
		"message": "old", "lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)})
	if err := unstructured.SetNestedSlice(u.Object, conds, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if err := f.Cluster.Client.Status().Update(ctx, u); err != nil {
		t.Fatalf("writing the legacy condition as the earlier shepherd: %v", err)
	}
	trainers := func() []string {
		var out []string
		for _, c := range conds {
			if m := c.(map[string]any); m["type"] != api.TrainJobWorkloadReady {
				out = append(out, fmt.Sprint(m["type"]))
			}
		}
		return out
	}()
	before := len(f.SuccessfulWrites(t, "trainjobs", ns, tj.GetName(), cluster.ShepherdUser, "status"))
	up()
	f.Eventually(t, within, "the legacy condition gone from the TrainJob", func() (bool, string) {
		got := f.GetTrainJob(t, ns, tj.GetName())
		return bed.Condition(got, api.TrainJobWorkloadReady) == nil, "still there"
	})
	f.recordCondition(t, tj, metav1.ConditionTrue, api.ReasonWorkloadCreated)
	if n := len(f.SuccessfulWrites(t, "trainjobs", ns, tj.GetName(), cluster.ShepherdUser, "status")) - before; n != 1 {
		t.Errorf("shepherd wrote the TrainJob's status %d times after the upgrade, want once", n)
	}
	got := f.GetTrainJob(t, ns, tj.GetName())
	for _, typ := range trainers {
		if bed.Condition(got, typ) == nil {
			t.Errorf("Trainer's %s condition was not kept", typ)
		}
	}
}

// TestNoWorkloadAPI: on a cluster that serves no Workload API the record
// says WorkloadAPIUnavailable, a Warning Event says so, nothing is created
// (nothing could be), and the JobSet's pods join no PodGroup.
//
// shepherd's admission denies such a runtime (V-TR-7): the runtime is one
// stored before (while V-TR-7 was disabled, as before an upgrade that
// brought it).
func TestNoWorkloadAPI(t *testing.T) {
	f := start(t, "")
	ns := f.namespace(t)
	rt := "torch-no-api"
	u, err := bed.TorchRuntimeObject()
	if err != nil {
		t.Fatal(err)
	}
	u.SetName("denied")
	u.SetAnnotations(map[string]string{api.AnnotationPodGroupPolicy: api.PodGroupPolicyWorkload})
	err = f.Cluster.Client.Create(context.Background(), u)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "does not serve the Workload API") {
		t.Errorf("creating a runtime that asks for the Workload API on a cluster without it: %v, want V-TR-7's denial", err)
	}
	f.ServeWith(t, "--disable-rules=V-TR-7")
	f.workloadRuntime(t, "torch_distributed.yaml", rt)
	tj := f.trainJob(t, ns, "no-api", rt, 2)
	f.recordCondition(t, tj, metav1.ConditionFalse, api.ReasonWorkloadAPIUnavailable)
	f.hasEvent(t, tj, api.EventWorkloadAPIMissing, corev1.EventTypeWarning)
	for _, v := range api.SchedulingVersions {
		for _, r := range []string{"workloads", "podgroups"} {
			served, err := f.Cluster.Serves(api.SchedulingGroup+"/"+v, r)
			if err != nil {
				t.Fatal(err)
			}
			if served {
				t.Errorf("%s/%s %s served on a control plane without the Workload API", api.SchedulingGroup, v, r)
			}
		}
	}
	f.joinsNoPodGroup(t, tj, "a job on a cluster without the Workload API")
}

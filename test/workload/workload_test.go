// Package workload tests the Workload and PodGroup controller (R-WL,
// KEP-3015) and the webhook's schedulingGroup injection (D-WL-1) on real
// kube-apiservers serving scheduling.k8s.io/v1beta1, v1alpha3, and no
// Workload API at all. The control planes serve the upstream CRDs, where a
// runtime asks for the Workload API with its carrier annotation
// shepherd.dev/pod-group-policy: workload (Trainer v2.3.0's podGroupPolicy
// has no workload); one runs the same scenarios on the seed-shaped CRDs
// with the seed field podGroupPolicy.workload. There is no garbage
// collector in these control planes, so deletion is asserted through
// ownerReferences.
package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/api/install"
	jobsetv1alpha2 "github.com/shepherd-k8s/shepherd/api/jobset/v1alpha2"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/events"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
	"github.com/shepherd-k8s/shepherd/reconcile/workload"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/seedcrds"
	"github.com/shepherd-k8s/shepherd/webhook"
)

const timeout = 60 * time.Second

func TestMain(m *testing.M) {
	ctrl.SetLogger(funcr.New(func(prefix, args string) {
		fmt.Fprintln(os.Stderr, prefix, args)
	}, funcr.Options{}))
	os.Exit(m.Run())
}

// controlPlane is a test control plane and the third-party CRDs it serves,
// which say where a runtime keeps podGroupPolicy.workload.
type controlPlane struct {
	*cluster.Cluster
	crds cluster.CRDSet
}

// startControlPlane starts a control plane for one test.
func startControlPlane(t *testing.T, opts cluster.Options) *controlPlane {
	t.Helper()
	return &controlPlane{Cluster: cluster.Start(t, opts), crds: opts.CRDs}
}

// useWorkload makes rt ask for the Workload API in the form c's runtime CRD
// takes: the seed field, or on Trainer's CRD the carrier annotation.
func useWorkload(c *controlPlane, rt *trainerv1alpha1.ClusterTrainingRuntime) {
	if c.crds == cluster.SeedCRDs {
		rt.Spec.PodGroupPolicy = &trainerv1alpha1.PodGroupPolicy{Workload: &trainerv1alpha1.WorkloadPodGroupPolicySource{}}
		return
	}
	if rt.Annotations == nil {
		rt.Annotations = map[string]string{}
	}
	rt.Annotations[trainer.RuntimeWorkload.Annotation] = trainer.RuntimeWorkload.Value
}

// rules are the admission chain's rule settings for c: type-checked
// against the schemas c serves.
func rules(c *controlPlane) celrules.Config {
	if c.crds == cluster.SeedCRDs {
		return seedcrds.Config(celrules.Config{})
	}
	return celrules.Config{} // the pinned upstream schemas
}

// startShepherd runs the workload controller against c until the test ends.
func startShepherd(t *testing.T, c *controlPlane) {
	t.Helper()
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme:                 install.NewScheme(),
		Metrics:                server.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatalf("creating manager: %v", err)
	}
	// Events on their own rate-limited client, as `shepherd serve` sends them.
	if mgr, err = events.Manager(mgr, events.Options{}); err != nil {
		t.Fatalf("creating manager: %v", err)
	}
	if err := workload.Setup(mgr, clock.RealClock{}); err != nil {
		t.Fatalf("setting up the workload controller: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

func replicatedJob(name, step string) jobsetv1alpha2.ReplicatedJob {
	rj := jobsetv1alpha2.ReplicatedJob{Name: name, Template: batchv1.JobTemplateSpec{
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
		}}},
	}}
	if step != "" {
		rj.Template.Labels = map[string]string{api.LabelTrainJobAncestorStep: step}
	}
	return rj
}

// createRuntime creates a ClusterTrainingRuntime using the Workload API (in
// the form c takes) with the given replicatedJobs and mlPolicy.numNodes.
func createRuntime(t *testing.T, c *controlPlane, numNodes int32, mpi bool, jobs ...jobsetv1alpha2.ReplicatedJob) *trainerv1alpha1.ClusterTrainingRuntime {
	t.Helper()
	rt := newRuntime(numNodes, mpi, jobs...)
	useWorkload(c, rt)
	return create(t, c, rt)
}

// newRuntime is a ClusterTrainingRuntime without a podGroupPolicy.
func newRuntime(numNodes int32, mpi bool, jobs ...jobsetv1alpha2.ReplicatedJob) *trainerv1alpha1.ClusterTrainingRuntime {
	rt := &trainerv1alpha1.ClusterTrainingRuntime{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ctr-"},
		Spec: trainerv1alpha1.TrainingRuntimeSpec{
			MLPolicy: &trainerv1alpha1.MLPolicy{NumNodes: ptr.To(numNodes)},
			Template: trainerv1alpha1.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: jobs}},
		},
	}
	if mpi {
		rt.Spec.MLPolicy.MPI = &trainerv1alpha1.MPIMLPolicySource{NumProcPerNode: ptr.To[int32](4)}
	} else {
		rt.Spec.MLPolicy.Torch = &trainerv1alpha1.TorchMLPolicySource{}
	}
	return rt
}

func create(t *testing.T, c *controlPlane, rt *trainerv1alpha1.ClusterTrainingRuntime) *trainerv1alpha1.ClusterTrainingRuntime {
	t.Helper()
	if err := c.Client.Create(context.Background(), rt); err != nil {
		t.Fatalf("creating ClusterTrainingRuntime: %v", err)
	}
	return rt
}

func createTrainJob(t *testing.T, c *controlPlane, ns, name, runtime string, numNodes *int32) *trainerv1alpha1.TrainJob {
	t.Helper()
	tj := &trainerv1alpha1.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       trainerv1alpha1.TrainJobSpec{RuntimeRef: trainerv1alpha1.RuntimeRef{Name: runtime}},
	}
	if numNodes != nil {
		tj.Spec.Trainer = &trainerv1alpha1.Trainer{NumNodes: numNodes}
	}
	if err := c.Client.Create(context.Background(), tj); err != nil {
		t.Fatalf("creating TrainJob: %v", err)
	}
	return tj
}

func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func get(ctx context.Context, c *controlPlane, version, kind, ns, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(api.SchedulingGroup + "/" + version)
	u.SetKind(kind)
	err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u)
	return u, err
}

func list(t *testing.T, c *controlPlane, version, kind, ns string) []unstructured.Unstructured {
	t.Helper()
	l := &unstructured.UnstructuredList{}
	l.SetAPIVersion(api.SchedulingGroup + "/" + version)
	l.SetKind(kind + "List")
	if err := c.Client.List(context.Background(), l, client.InNamespace(ns)); err != nil {
		t.Fatalf("listing %ss: %v", kind, err)
	}
	return l.Items
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

// podGroupNamesFromRuntime is what the webhook's schedulingGroup injection
// computes for the runtime's replicatedJobs: api.PodGroupTemplateFor picks
// each replicatedJob's template, api.PodGroupName names its PodGroup.
func podGroupNamesFromRuntime(tj *trainerv1alpha1.TrainJob, rt *trainerv1alpha1.ClusterTrainingRuntime) map[string]string {
	out := map[string]string{}
	for _, rj := range rt.Spec.Template.Spec.ReplicatedJobs {
		out[rj.Name] = api.PodGroupName(tj.Name, tj.UID, api.PodGroupTemplateFor(rj.Name, rj.Template.Labels))
	}
	return out
}

// assertWorkload waits for tj's Workload and PodGroups in version and checks
// every field shepherd sets.
func assertWorkload(t *testing.T, c *controlPlane, version string, tj *trainerv1alpha1.TrainJob, rt *trainerv1alpha1.ClusterTrainingRuntime, want []wantTemplate) {
	t.Helper()
	ctx := context.Background()
	var wl *unstructured.Unstructured
	eventually(t, "the Workload", func(ctx context.Context) (bool, error) {
		var err error
		wl, err = get(ctx, c, version, api.KindWorkload, tj.Namespace, tj.Name)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	trainJobOwner := metav1.OwnerReference{
		APIVersion: trainerv1alpha1.GroupVersion.String(), Kind: api.KindTrainJob, Name: tj.Name, UID: tj.UID,
		Controller: ptr.To(true),
	}
	if got := wl.GetOwnerReferences(); len(got) != 1 || !equalOwner(got[0], trainJobOwner) {
		t.Errorf("Workload ownerReferences = %+v, want only %+v", got, trainJobOwner)
	}
	ref, _, _ := unstructured.NestedStringMap(wl.Object, "spec", "controllerRef")
	if want := map[string]string{"apiGroup": api.TrainerGroup, "kind": api.KindTrainJob, "name": tj.Name}; fmt.Sprint(ref) != fmt.Sprint(want) {
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

	// One PodGroup per template, under the name the webhook injects.
	injected := podGroupNamesFromRuntime(tj, rt)
	for _, w := range want {
		name := api.PodGroupName(tj.Name, tj.UID, w.name)
		var pg *unstructured.Unstructured
		eventually(t, "PodGroup "+name, func(ctx context.Context) (bool, error) {
			var err error
			pg, err = get(ctx, c, version, api.KindPodGroup, tj.Namespace, name)
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil, err
		})
		workloadOwner := metav1.OwnerReference{
			APIVersion: api.SchedulingGroup + "/" + version, Kind: api.KindWorkload, Name: wl.GetName(), UID: wl.GetUID(),
		}
		owners := pg.GetOwnerReferences()
		if len(owners) != 2 || !equalOwner(owners[0], workloadOwner) || !equalOwner(owners[1], trainJobOwner) {
			t.Errorf("PodGroup %s ownerReferences = %+v, want [%+v %+v]", name, owners, workloadOwner, trainJobOwner)
		}
		if ctl := metav1.GetControllerOf(pg); ctl == nil || ctl.UID != tj.UID {
			t.Errorf("PodGroup %s controller = %+v, want the TrainJob", name, ctl)
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
	// Every replicatedJob's injected name is one of the created PodGroups.
	for rj, name := range injected {
		if _, err := get(ctx, c, version, api.KindPodGroup, tj.Namespace, name); err != nil {
			t.Errorf("replicatedJob %s would join PodGroup %s, which does not exist: %v", rj, name, err)
		}
	}
	// PodGroups carry the scheduling.k8s.io/podgroup-protection finalizer,
	// which kube-controller-manager (absent here) removes: deleted ones
	// linger as terminating and are not counted.
	var live []string
	for _, pg := range list(t, c, version, api.KindPodGroup, tj.Namespace) {
		if pg.GetDeletionTimestamp() == nil {
			live = append(live, pg.GetName())
		}
	}
	if len(live) != len(want) {
		t.Errorf("namespace holds %d live PodGroups, want %d: %v", len(live), len(want), live)
	}

	eventually(t, "WorkloadReady=True", func(ctx context.Context) (bool, error) {
		rec, err := cluster.Record(ctx, c.Client, tj.Namespace, api.KindTrainJob, tj.Name)
		if err != nil || rec == nil {
			return false, err
		}
		cond := meta.FindStatusCondition(rec.Status.Conditions, api.TrainJobWorkloadReady)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == api.ReasonWorkloadCreated, nil
	})
}

func equalOwner(a, b metav1.OwnerReference) bool {
	return a.APIVersion == b.APIVersion && a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID &&
		ptr.Deref(a.Controller, false) == ptr.Deref(b.Controller, false) &&
		ptr.Deref(a.BlockOwnerDeletion, false) == ptr.Deref(b.BlockOwnerDeletion, false)
}

func hasEvent(t *testing.T, c *controlPlane, tj *trainerv1alpha1.TrainJob, reason, typ string) {
	t.Helper()
	eventually(t, "a "+reason+" event on the TrainJob", func(ctx context.Context) (bool, error) {
		var evs eventsv1.EventList
		if err := c.Client.List(ctx, &evs, client.InNamespace(tj.Namespace)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == tj.Name && e.Reason == reason && e.Type == typ {
				return true, nil
			}
		}
		return false, nil
	})
}

// testServedVersion runs the R-WL scenarios against a control plane serving
// the Workload API at version.
func testServedVersion(t *testing.T, setting cluster.WorkloadAPI, crds cluster.CRDSet) {
	version := string(setting)
	c := startControlPlane(t, cluster.Options{WorkloadAPI: setting, CRDs: crds})
	startShepherd(t, c)

	t.Run("initializers and trainer", func(t *testing.T) {
		ns := c.Namespace(t)
		rt := createRuntime(t, c, 1, false,
			replicatedJob("dataset-initializer", api.AncestorDatasetInitializer),
			replicatedJob("model-initializer", api.AncestorModelInitializer),
			replicatedJob("node", api.AncestorTrainer))
		tj := createTrainJob(t, c, ns, "llm", rt.Name, ptr.To[int32](8))
		assertWorkload(t, c, version, tj, rt, []wantTemplate{{name: "initializer"}, {name: "trainer", minCount: 8}})
		hasEvent(t, c, tj, api.EventWorkloadCreated, corev1.EventTypeNormal)
		if v := createdMetric(t, version); v < 1 {
			t.Errorf("shepherd_workloads_created_total{version=%q} = %v, want >= 1", version, v)
		}
		assertWebhookJoinsCreatedPodGroups(t, c, version, tj, rt)

		// Suspension keeps the objects; the reconcile it triggers (a spec
		// change) creates nothing more.
		patch := []byte(`{"spec":{"suspend":true}}`)
		if err := c.Client.Patch(context.Background(), tj, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatalf("suspending: %v", err)
		}
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if n := len(list(t, c, version, api.KindWorkload, ns)); n != 1 {
				t.Fatalf("after suspension the namespace holds %d Workloads, want 1", n)
			}
			if n := len(list(t, c, version, api.KindPodGroup, ns)); n != 2 {
				t.Fatalf("after suspension the namespace holds %d PodGroups, want 2", n)
			}
			time.Sleep(200 * time.Millisecond)
		}
		assertWorkload(t, c, version, tj, rt, []wantTemplate{{name: "initializer"}, {name: "trainer", minCount: 8}})
	})

	t.Run("MPI launcher and nodes share the trainer gang, minCount from mlPolicy", func(t *testing.T) {
		ns := c.Namespace(t)
		rt := createRuntime(t, c, 4, true,
			replicatedJob("launcher", api.AncestorTrainer),
			replicatedJob("node", ""))
		tj := createTrainJob(t, c, ns, "mpi", rt.Name, nil)
		assertWorkload(t, c, version, tj, rt, []wantTemplate{{name: "trainer", minCount: 4}})
	})

	t.Run("runtime created after the TrainJob", func(t *testing.T) {
		ns := c.Namespace(t)
		tj := createTrainJob(t, c, ns, "early", "late-runtime-"+version, ptr.To[int32](2))
		rt := &trainerv1alpha1.ClusterTrainingRuntime{
			ObjectMeta: metav1.ObjectMeta{Name: "late-runtime-" + version},
			Spec: trainerv1alpha1.TrainingRuntimeSpec{
				Template: trainerv1alpha1.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{
					ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{replicatedJob("node", api.AncestorTrainer)},
				}},
			},
		}
		useWorkload(c, rt)
		if err := c.Client.Create(context.Background(), rt); err != nil {
			t.Fatalf("creating the runtime: %v", err)
		}
		assertWorkload(t, c, version, tj, rt, []wantTemplate{{name: "trainer", minCount: 2}})
	})

	t.Run("TrainJob recreated before the garbage collector ran", func(t *testing.T) {
		ctx := context.Background()
		ns := c.Namespace(t)
		rt := createRuntime(t, c, 1, false, replicatedJob("node", api.AncestorTrainer))
		old := createTrainJob(t, c, ns, "again", rt.Name, ptr.To[int32](2))
		assertWorkload(t, c, version, old, rt, []wantTemplate{{name: "trainer", minCount: 2}})
		if err := c.Client.Delete(ctx, old); err != nil {
			t.Fatalf("deleting the TrainJob: %v", err)
		}
		fresh := createTrainJob(t, c, ns, "again", rt.Name, ptr.To[int32](3))

		// No garbage collector here: the old Workload stays, and shepherd
		// must not adopt it or hang PodGroups of the new job under it.
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			wl, err := get(ctx, c, version, api.KindWorkload, ns, "again")
			if err != nil {
				t.Fatalf("reading the old Workload: %v", err)
			}
			if ctl := metav1.GetControllerOf(wl); ctl == nil || ctl.UID != old.UID {
				t.Fatalf("Workload controller = %+v, want the deleted TrainJob %s", ctl, old.UID)
			}
			if n := len(list(t, c, version, api.KindPodGroup, ns)); n != 1 {
				t.Fatalf("namespace holds %d PodGroups, want only the old job's 1", n)
			}
			time.Sleep(200 * time.Millisecond)
		}

		// Play the garbage collector (the old PodGroup stays terminating
		// behind its protection finalizer): the new job then gets its own.
		// The old objects are listed before any is deleted: once the old
		// Workload is gone shepherd creates the new job's at once, and a
		// list after that would delete those too.
		var olds []unstructured.Unstructured
		for _, kind := range []string{api.KindWorkload, api.KindPodGroup} {
			olds = append(olds, list(t, c, version, kind, ns)...)
		}
		for _, o := range olds {
			if err := c.Client.Delete(ctx, &o); err != nil {
				t.Fatalf("deleting %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
		assertWorkload(t, c, version, fresh, rt, []wantTemplate{{name: "trainer", minCount: 3}})
	})

	t.Run("deleted PodGroup recreated within seconds", func(t *testing.T) {
		ctx := context.Background()
		ns := c.Namespace(t)
		rt := createRuntime(t, c, 1, false, replicatedJob("node", api.AncestorTrainer))
		tj := createTrainJob(t, c, ns, "lost-pg", rt.Name, ptr.To[int32](2))
		want := []wantTemplate{{name: "trainer", minCount: 2}}
		assertWorkload(t, c, version, tj, rt, want)
		name := api.PodGroupName(tj.Name, tj.UID, api.PodGroupTemplateTrainer)
		pg, err := get(ctx, c, version, api.KindPodGroup, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		// Delete it and play kube-controller-manager, which removes the
		// podgroup-protection finalizer: the PodGroup is gone. Nothing about
		// the TrainJob changes.
		if err := c.Client.Delete(ctx, pg); err != nil {
			t.Fatalf("deleting the PodGroup: %v", err)
		}
		if err := c.Client.Patch(ctx, pg, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`))); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("removing the PodGroup's finalizers: %v", err)
		}
		deleted := time.Now()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := get(ctx, c, version, api.KindPodGroup, ns, name)
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil && got.GetUID() != pg.GetUID() && got.GetDeletionTimestamp() == nil, err
		}); err != nil {
			t.Fatalf("the deleted PodGroup %s was not recreated within 10s: %v", name, err)
		}
		t.Logf("PodGroup recreated %v after its deletion", time.Since(deleted).Round(time.Millisecond))
		assertWorkload(t, c, version, tj, rt, want)
	})

	t.Run("foreign Workload: condition and Event, no retry loop", func(t *testing.T) {
		ctx := context.Background()
		ns := c.Namespace(t)
		rt := createRuntime(t, c, 1, false, replicatedJob("node", api.AncestorTrainer))
		// A user's Workload with the name the TrainJob's would have,
		// controlled by nothing.
		foreign := workload.BuildWorkload(&trainerv1alpha1.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken"}},
			workload.Plan{Templates: []workload.GroupTemplate{{Name: api.PodGroupTemplateTrainer}}}, version)
		foreign.SetOwnerReferences(nil)
		if err := c.Client.Create(ctx, foreign); err != nil {
			t.Fatalf("creating the foreign Workload: %v", err)
		}
		tj := createTrainJob(t, c, ns, "taken", rt.Name, ptr.To[int32](2))
		eventually(t, "WorkloadReady=False reason WorkloadNotOwned", func(ctx context.Context) (bool, error) {
			rec, err := cluster.Record(ctx, c.Client, tj.Namespace, api.KindTrainJob, tj.Name)
			if err != nil || rec == nil {
				return false, err
			}
			cond := meta.FindStatusCondition(rec.Status.Conditions, api.TrainJobWorkloadReady)
			return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == api.ReasonWorkloadNotOwned, nil
		})
		hasEvent(t, c, tj, api.EventWorkloadNotOwned, corev1.EventTypeWarning)

		// No hot loop: the controller stops (terminal error) until
		// something changes. An erroring reconcile would be retried within
		// milliseconds, then with backoff: a dozen times in 3 s.
		before := reconcileCount(t, workload.ControllerName)
		time.Sleep(3 * time.Second)
		if n := reconcileCount(t, workload.ControllerName) - before; n != 0 {
			t.Errorf("%s reconciled %v times in 3s while blocked by a foreign Workload, want 0", workload.ControllerName, n)
		}
		if wl, err := get(ctx, c, version, api.KindWorkload, ns, "taken"); err != nil || len(wl.GetOwnerReferences()) != 0 {
			t.Errorf("the foreign Workload was adopted or lost: owners %v, err %v", wl.GetOwnerReferences(), err)
		}
		if n := len(list(t, c, version, api.KindPodGroup, ns)); n != 0 {
			t.Errorf("namespace holds %d PodGroups, want none under a foreign Workload", n)
		}

		// Its deletion is the change: the TrainJob gets its own.
		if err := c.Client.Delete(ctx, foreign); err != nil {
			t.Fatalf("deleting the foreign Workload: %v", err)
		}
		assertWorkload(t, c, version, tj, rt, []wantTemplate{{name: "trainer", minCount: 2}})
	})

	t.Run("runtime change not applied to existing objects", func(t *testing.T) {
		ctx := context.Background()
		ns := c.Namespace(t)
		rt := createRuntime(t, c, 2, false, replicatedJob("node", api.AncestorTrainer))
		tj := createTrainJob(t, c, ns, "kept", rt.Name, nil)
		assertWorkload(t, c, version, tj, rt, []wantTemplate{{name: "trainer", minCount: 2}})
		patch := []byte(`{"spec":{"mlPolicy":{"numNodes":6}}}`)
		if err := c.Client.Patch(ctx, rt, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatalf("changing the runtime: %v", err)
		}
		time.Sleep(2 * time.Second)
		assertWorkload(t, c, version, tj, rt, []wantTemplate{{name: "trainer", minCount: 2}})
	})

	t.Run("runtime without podGroupPolicy.workload: nothing created", func(t *testing.T) {
		ns := c.Namespace(t)
		// Created without the policy: removing it afterwards would race
		// the TrainJob against shepherd's cache seeing the removal.
		rt := newRuntime(1, false, replicatedJob("node", api.AncestorTrainer))
		create(t, c, rt)
		tj := createTrainJob(t, c, ns, "plain", rt.Name, ptr.To[int32](2))
		// A marker job in the same namespace, on a Workload runtime, proves
		// the controller has processed this namespace's jobs.
		wrt := createRuntime(t, c, 1, false, replicatedJob("node", api.AncestorTrainer))
		marker := createTrainJob(t, c, ns, "marker", wrt.Name, ptr.To[int32](1))
		assertWorkload(t, c, version, marker, wrt, []wantTemplate{{name: "trainer", minCount: 1}})
		if _, err := get(context.Background(), c, version, api.KindWorkload, ns, tj.Name); !apierrors.IsNotFound(err) {
			t.Errorf("Workload for a TrainJob whose runtime has no podGroupPolicy.workload: err = %v, want NotFound", err)
		}
	})
}

func TestWorkloadV1beta1(t *testing.T) {
	testServedVersion(t, cluster.WorkloadAPIV1beta1, cluster.UpstreamCRDs)
}

func TestWorkloadV1alpha3(t *testing.T) {
	testServedVersion(t, cluster.WorkloadAPIV1alpha3, cluster.UpstreamCRDs)
}

// The same scenarios with the seed field podGroupPolicy.workload, on CRDs
// that have it.
func TestWorkloadV1beta1SeedField(t *testing.T) {
	testServedVersion(t, cluster.WorkloadAPIV1beta1, cluster.SeedCRDs)
}

func TestNoWorkloadAPI(t *testing.T) {
	c := startControlPlane(t, cluster.Options{})
	startShepherd(t, c)
	ns := c.Namespace(t)
	rt := createRuntime(t, c, 1, false, replicatedJob("node", api.AncestorTrainer))
	tj := createTrainJob(t, c, ns, "no-api", rt.Name, ptr.To[int32](2))

	eventually(t, "WorkloadReady=False reason WorkloadAPIUnavailable", func(ctx context.Context) (bool, error) {
		rec, err := cluster.Record(ctx, c.Client, tj.Namespace, api.KindTrainJob, tj.Name)
		if err != nil || rec == nil {
			return false, err
		}
		cond := meta.FindStatusCondition(rec.Status.Conditions, api.TrainJobWorkloadReady)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == api.ReasonWorkloadAPIUnavailable, nil
	})
	hasEvent(t, c, tj, api.EventWorkloadAPIMissing, corev1.EventTypeWarning)
	// Nothing created: no version of the API is served, so nothing can be.
	for _, v := range workload.Versions {
		for _, r := range []string{"workloads", "podgroups"} {
			served, err := c.Serves(api.SchedulingGroup+"/"+v, r)
			if err != nil {
				t.Fatal(err)
			}
			if served {
				t.Errorf("%s/%s %s served on a control plane without the Workload API", api.SchedulingGroup, v, r)
			}
		}
	}
}

// assertWebhookJoinsCreatedPodGroups runs shepherd's mutating admission
// chain (rule D-WL-1, looking up the TrainJob and runtime on this apiserver)
// on the JobSet Trainer would create for tj, and checks that every pod
// template's injected spec.schedulingGroup.podGroupName is a PodGroup the
// reconciler created.
func assertWebhookJoinsCreatedPodGroups(t *testing.T, c *controlPlane, version string, tj *trainerv1alpha1.TrainJob, rt *trainerv1alpha1.ClusterTrainingRuntime) {
	t.Helper()
	ctx := context.Background()
	chain, err := webhook.NewChain(webhook.ChainOptions{Lookups: webhook.NewClientLookups(c.Client, nil, func() bool { return true }), Rules: rules(c)})
	if err != nil {
		t.Fatalf("creating the admission chain: %v", err)
	}
	js := &jobsetv1alpha2.JobSet{
		TypeMeta: metav1.TypeMeta{APIVersion: jobsetv1alpha2.GroupVersion.String(), Kind: api.KindJobSet},
		ObjectMeta: metav1.ObjectMeta{Namespace: tj.Namespace, Name: tj.Name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: trainerv1alpha1.GroupVersion.String(), Kind: api.KindTrainJob, Name: tj.Name, UID: tj.UID, Controller: ptr.To(true),
		}}},
		Spec: *rt.Spec.Template.Spec.DeepCopy(),
	}
	raw, err := json.Marshal(js)
	if err != nil {
		t.Fatal(err)
	}
	v := chain.Default(ctx, &webhook.Request{
		UID: "u", Operation: admissionv1.Create, Namespace: tj.Namespace, Name: tj.Name, Object: raw,
		Kind:     metav1.GroupVersionKind{Group: api.JobSetGroup, Version: "v1alpha2", Kind: api.KindJobSet},
		Resource: metav1.GroupVersionResource{Group: api.JobSetGroup, Version: "v1alpha2", Resource: "jobsets"},
	})
	if !v.Allowed {
		t.Fatalf("the mutating chain denied the JobSet: %+v", v.Violations)
	}
	rjs, _, _ := unstructured.NestedSlice(v.Object, "spec", "replicatedJobs")
	if len(rjs) != len(rt.Spec.Template.Spec.ReplicatedJobs) {
		t.Fatalf("defaulted JobSet has %d replicatedJobs, want %d", len(rjs), len(rt.Spec.Template.Spec.ReplicatedJobs))
	}
	for _, r := range rjs {
		rj := r.(map[string]any)
		name, _, _ := unstructured.NestedString(rj, "template", "spec", "template", "spec", "schedulingGroup", "podGroupName")
		if name == "" {
			t.Errorf("replicatedJob %v: no schedulingGroup.podGroupName injected", rj["name"])
			continue
		}
		if _, err := get(ctx, c, version, api.KindPodGroup, tj.Namespace, name); err != nil {
			t.Errorf("replicatedJob %v joins PodGroup %s, which the reconciler did not create: %v", rj["name"], name, err)
		}
	}
}

// createdMetric reads shepherd_workloads_created_total{version} from
// controller-runtime's registry.
func createdMetric(t *testing.T, version string) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "shepherd_workloads_created_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "version" && l.GetValue() == version {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// reconcileCount is controller_runtime_reconcile_total of controller, all
// results together, from controller-runtime's registry.
func reconcileCount(t *testing.T, controller string) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// An upgrade from a shepherd that kept WorkloadReady on the TrainJob: the
// stale condition is removed from the job (Trainer would go on printing it
// as the job's STATE) and the record carries it; the job's other
// conditions are left alone.
func TestLegacyWorkloadReadyConditionMoves(t *testing.T) {
	c := startControlPlane(t, cluster.Options{WorkloadAPI: cluster.WorkloadAPIV1beta1})
	ctx := context.Background()
	ns := c.Namespace(t)
	rt := createRuntime(t, c, 1, false, replicatedJob("node", api.AncestorTrainer))
	tj := createTrainJob(t, c, ns, "upgraded", rt.Name, ptr.To[int32](2))
	// What the earlier shepherd left, beside a condition of Trainer's.
	now := metav1.Now()
	tj.Status.Conditions = []metav1.Condition{
		{Type: api.TrainJobSuspended, Status: metav1.ConditionFalse, Reason: api.ReasonResumed, LastTransitionTime: now},
		{Type: api.TrainJobWorkloadReady, Status: metav1.ConditionTrue, Reason: api.ReasonWorkloadCreated, Message: "old", LastTransitionTime: now},
	}
	if err := c.Client.Status().Update(ctx, tj); err != nil {
		t.Fatal(err)
	}
	startShepherd(t, c)
	eventually(t, "the legacy condition gone from the TrainJob, WorkloadReady in the record", func(ctx context.Context) (bool, error) {
		var got trainerv1alpha1.TrainJob
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(tj), &got); err != nil {
			return false, err
		}
		rec, err := cluster.Record(ctx, c.Client, ns, api.KindTrainJob, tj.Name)
		if err != nil || rec == nil {
			return false, err
		}
		return meta.FindStatusCondition(got.Status.Conditions, api.TrainJobWorkloadReady) == nil &&
			meta.IsStatusConditionTrue(rec.Status.Conditions, api.TrainJobWorkloadReady), nil
	})
	var got trainerv1alpha1.TrainJob
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(tj), &got); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, api.TrainJobSuspended); c == nil || c.Reason != api.ReasonResumed {
		t.Errorf("Trainer's Suspended condition was not kept: %+v", got.Status.Conditions)
	}
}

// Package trainjob tests the TrainJob deadline and TTL controller (R-TJ,
// KEP-2899) end to end on a real kube-apiserver serving the upstream CRDs
// (Trainer v2.3.0, JobSet v0.12.0): the test plays Kubeflow Trainer
// (creates the JobSet, writes the Suspended and Complete conditions, and
// where Trainer enforces the deadline, fails the job and deletes its JobSet)
// and shepherd's controller, running in a controller-runtime manager, does
// the rest. The runtime's TTL is its carrier annotation there; one suite of
// tests runs on the seed-shaped CRDs with the seed field. Deadlines and TTLs
// are a few seconds of real time; assertions poll with generous timeouts
// and check object state, never durations.
package trainjob

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/api/install"
	jobsetv1alpha2 "github.com/shepherd-k8s/shepherd/api/jobset/v1alpha2"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/events"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
	"github.com/shepherd-k8s/shepherd/reconcile/trainjob"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

var env *cluster.Cluster

// timeout bounds every wait: generous, the machine is shared.
const timeout = 60 * time.Second

func TestMain(m *testing.M) {
	ctrl.SetLogger(funcr.New(func(prefix, args string) {
		fmt.Fprintln(os.Stderr, prefix, args)
	}, funcr.Options{}))
	var err error
	env, err = cluster.New(cluster.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping control plane:", err)
	}
	os.Exit(code)
}

// startShepherd runs the controller in a manager watching only namespace ns,
// so tests in parallel do not see each other's TrainJobs. shepherd enforces
// the deadline (no Enforcement). The returned stop function stops it and
// waits until it has; it also runs at test cleanup.
func startShepherd(t *testing.T, ns string) (stop func()) {
	t.Helper()
	return startShepherdWith(t, ns, shepherdOptions{})
}

// shepherdOptions vary how startShepherdWith runs the controller.
type shepherdOptions struct {
	// cluster is the control plane; nil means env.
	cluster *cluster.Cluster
	// enforcement decides who enforces the deadline; nil: shepherd.
	enforcement *integrations.Enforcement
	// writes, when set, records the writes shepherd's client makes.
	writes *writes
}

func startShepherdWith(t *testing.T, ns string, o shepherdOptions) (stop func()) {
	t.Helper()
	c := o.cluster
	if c == nil {
		c = env
	}
	opts := ctrl.Options{
		Scheme:                 install.NewScheme(),
		Metrics:                server.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		// Each test (and each restart) runs its own manager in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if o.writes != nil {
		opts.NewClient = o.writes.newClient
	}
	mgr, err := ctrl.NewManager(c.Config, opts)
	if err != nil {
		t.Fatalf("creating manager: %v", err)
	}
	// Events on their own rate-limited client, as `shepherd serve` sends them.
	if mgr, err = events.Manager(mgr, events.Options{}); err != nil {
		t.Fatalf("creating manager: %v", err)
	}
	if err := trainjob.Setup(mgr, clock.RealClock{}, o.enforcement); err != nil {
		t.Fatalf("setting up the trainjob controller: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// ttlForm is where a test runtime keeps its ttlSecondsAfterFinished.
type ttlForm int

const (
	// carrierTTL: the annotation (trainer.RuntimeTTL's carrier), as on
	// Trainer's runtime CRD, which has no such field. The suite's default.
	carrierTTL ttlForm = iota
	// fieldTTL: the seed field, on the seed-shaped CRDs.
	fieldTTL
)

func (f ttlForm) String() string {
	if f == fieldTTL {
		return "seed field"
	}
	return "carrier"
}

// newRuntime is a runtime's metadata and spec with ttl in form f (nil: no
// TTL).
func newRuntime(ttl *int32, f ttlForm) (metav1.ObjectMeta, trainerv1alpha1.TrainingRuntimeSpec) {
	spec := trainerv1alpha1.TrainingRuntimeSpec{
		MLPolicy: &trainerv1alpha1.MLPolicy{NumNodes: ptr.To[int32](1)},
		Template: trainerv1alpha1.JobSetTemplateSpec{Spec: jobsetv1alpha2.JobSetSpec{
			ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{Name: "node", Template: jobTemplate()}},
		}},
	}
	var m metav1.ObjectMeta
	switch {
	case ttl == nil:
	case f == fieldTTL:
		spec.TTLSecondsAfterFinished = ttl
	default:
		m.Annotations = map[string]string{trainer.RuntimeTTL.Annotation: strconv.Itoa(int(*ttl))}
	}
	return m, spec
}

func jobTemplate() batchv1.JobTemplateSpec {
	return batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers:    []corev1.Container{{Name: "node", Image: "busybox"}},
	}}}}
}

// createClusterRuntime creates a ClusterTrainingRuntime with a generated name
// whose TTL is its carrier annotation, and deletes it at the end of the
// test.
func createClusterRuntime(t *testing.T, ttl *int32) *trainerv1alpha1.ClusterTrainingRuntime {
	t.Helper()
	return createClusterRuntimeOn(t, env.Client, ttl, carrierTTL)
}

// createClusterRuntimeOn is createClusterRuntime through c, with the TTL in
// form f.
func createClusterRuntimeOn(t *testing.T, c client.Client, ttl *int32, f ttlForm) *trainerv1alpha1.ClusterTrainingRuntime {
	t.Helper()
	m, spec := newRuntime(ttl, f)
	m.GenerateName = "ctr-"
	rt := &trainerv1alpha1.ClusterTrainingRuntime{ObjectMeta: m, Spec: spec}
	if err := c.Create(context.Background(), rt); err != nil {
		t.Fatalf("creating ClusterTrainingRuntime: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), rt) })
	return rt
}

// newTrainJob is a TrainJob on the ClusterTrainingRuntime named runtime.
func newTrainJob(ns, name, runtime string, deadline *int64) *trainerv1alpha1.TrainJob {
	return &trainerv1alpha1.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: trainerv1alpha1.TrainJobSpec{
			RuntimeRef:            trainerv1alpha1.RuntimeRef{Name: runtime},
			Trainer:               &trainerv1alpha1.Trainer{NumNodes: ptr.To[int32](1)},
			ActiveDeadlineSeconds: deadline,
		},
	}
}

func create(t *testing.T, o client.Object) {
	t.Helper()
	createOn(t, env.Client, o)
}

func createOn(t *testing.T, c client.Client, o client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), o); err != nil {
		t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
	}
}

// createJobSet plays Trainer: the JobSet running tj, named like it and
// controlled by it.
func createJobSet(t *testing.T, tj *trainerv1alpha1.TrainJob) *jobsetv1alpha2.JobSet {
	t.Helper()
	js := &jobsetv1alpha2.JobSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: tj.Namespace, Name: tj.Name,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: trainerv1alpha1.GroupVersion.String(), Kind: api.KindTrainJob,
				Name: tj.Name, UID: tj.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{Name: "node", Template: jobTemplate()}}},
	}
	create(t, js)
	return js
}

// setCondition plays Trainer writing one status condition of tj (merge
// patch of status.conditions, guarded by resourceVersion), with
// lastTransitionTime now.
func setCondition(t *testing.T, tj *trainerv1alpha1.TrainJob, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	setConditionOn(t, env.Client, tj, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: "set by the test, playing Trainer"})
}

// setConditionOn is setCondition through c, writing cond.
func setConditionOn(t *testing.T, c client.Client, tj *trainerv1alpha1.TrainJob, cond metav1.Condition) {
	t.Helper()
	ctx := context.Background()
	typ, status := cond.Type, cond.Status
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(tj), tj); err != nil {
			return false, err
		}
		orig := tj.DeepCopy()
		cond.LastTransitionTime = metav1.Now()
		meta.SetStatusCondition(&tj.Status.Conditions, cond)
		err := c.Status().Patch(ctx, tj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("setting condition %s=%s on TrainJob %s: %v", typ, status, tj.Name, err)
	}
}

// setSuspend plays the user flipping spec.suspend.
func setSuspend(t *testing.T, tj *trainerv1alpha1.TrainJob, suspend bool) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"suspend":%t}}`, suspend))
	if err := env.Client.Patch(context.Background(), tj, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatalf("setting spec.suspend=%t on TrainJob %s: %v", suspend, tj.Name, err)
	}
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// consistently checks cond every 200ms for d and fails the first time it
// does not hold.
func consistently(t *testing.T, what string, d time.Duration, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond(context.Background())
		if err != nil {
			t.Fatalf("checking %s: %v", what, err)
		}
		if !ok {
			t.Fatalf("%s stopped holding", what)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func getJob(ctx context.Context, tj *trainerv1alpha1.TrainJob) (*trainerv1alpha1.TrainJob, error) {
	var got trainerv1alpha1.TrainJob
	err := env.Client.Get(ctx, client.ObjectKeyFromObject(tj), &got)
	return &got, err
}

// failedCondition returns tj's Failed condition as the apiserver has it.
func failedCondition(ctx context.Context, tj *trainerv1alpha1.TrainJob) (*metav1.Condition, error) {
	got, err := getJob(ctx, tj)
	if err != nil {
		return nil, err
	}
	return meta.FindStatusCondition(got.Status.Conditions, api.TrainJobFailed), nil
}

func isDeadlineFailed(ctx context.Context, tj *trainerv1alpha1.TrainJob) (bool, error) {
	c, err := failedCondition(ctx, tj)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == api.ReasonDeadlineExceeded, err
}

func notFailed(ctx context.Context, tj *trainerv1alpha1.TrainJob) (bool, error) {
	c, err := failedCondition(ctx, tj)
	return c == nil || c.Status != metav1.ConditionTrue, err
}

func gone(o client.Object) func(ctx context.Context) (bool, error) {
	return goneOn(env.Client, o)
}

func goneOn(c client.Client, o client.Object) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}
}

func exists(o client.Object) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o)
		return err == nil, client.IgnoreNotFound(err)
	}
}

// metricValue is the value of a counter, or the sample count of a
// histogram, named name on controller-runtime's registry (summed over
// labels) — where shepherd's controllers register their metrics.
func metricValue(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil {
				v += c.GetValue()
			}
			if h := m.GetHistogram(); h != nil {
				v += float64(h.GetSampleCount())
			}
		}
		return v
	}
	t.Fatalf("metric %s is not registered", name)
	return 0
}

// writes records the writes shepherd's client makes, so a test playing
// Trainer can tell shepherd's deletes and status patches from its own.
type writes struct {
	mu sync.Mutex
	// deletes are shepherd's DELETE attempts, successful or not.
	deletes []deleteCall
	// statusPatches name the TrainJobs whose status shepherd patched
	// (successfully).
	statusPatches []string
}

type deleteCall struct {
	kind, name string
	// preconditionUID is the UID precondition sent, "" for none.
	preconditionUID string
	err             error
}

// newClient is a client.NewClientFunc for the manager: the usual cached
// client, with every delete and status patch recorded.
func (w *writes) newClient(cfg *rest.Config, opts client.Options) (client.Client, error) {
	c, err := client.NewWithWatch(cfg, opts)
	if err != nil {
		return nil, err
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			err := c.Delete(ctx, obj, opts...)
			do := &client.DeleteOptions{}
			do.ApplyOptions(opts)
			call := deleteCall{kind: kindOf(obj), name: obj.GetName(), err: err}
			if do.Preconditions != nil && do.Preconditions.UID != nil {
				call.preconditionUID = string(*do.Preconditions.UID)
			}
			w.mu.Lock()
			w.deletes = append(w.deletes, call)
			w.mu.Unlock()
			return err
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			err := c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			if err == nil && sub == "status" && kindOf(obj) == api.KindTrainJob {
				w.mu.Lock()
				w.statusPatches = append(w.statusPatches, obj.GetName())
				w.mu.Unlock()
			}
			return err
		},
	}), nil
}

// deletesOf returns shepherd's delete attempts of kind.
func (w *writes) deletesOf(kind string) []deleteCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []deleteCall
	for _, d := range w.deletes {
		if d.kind == kind {
			out = append(out, d)
		}
	}
	return out
}

func (w *writes) statusPatchCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.statusPatches)
}

func kindOf(o client.Object) string {
	if k := o.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	switch o.(type) {
	case *trainerv1alpha1.TrainJob:
		return api.KindTrainJob
	case *jobsetv1alpha2.JobSet:
		return api.KindJobSet
	}
	return fmt.Sprintf("%T", o)
}

// watchTrainJob watches tj alone until the test ends.
func watchTrainJob(t *testing.T, cfg *rest.Config, tj *trainerv1alpha1.TrainJob) watch.Interface {
	t.Helper()
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: install.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := wc.Watch(ctx, &trainerv1alpha1.TrainJobList{}, client.InNamespace(tj.Namespace),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", tj.Name)})
	if err != nil {
		t.Fatalf("watching TrainJob %s: %v", tj.Name, err)
	}
	t.Cleanup(w.Stop)
	return w
}

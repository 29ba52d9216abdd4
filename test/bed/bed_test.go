package bed_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/shepherd-k8s/shepherd/test/bed"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/grovemodel"
)

// shepherdUser is serve's client identity: shepherd's ServiceAccount,
// bound by exactly the RBAC deploy/default ships (cluster.Serve).
var shepherdUser = cluster.ShepherdUser

var (
	env   *cluster.Cluster
	tb    *bed.Bed
	serve *cluster.Serving
	// serveArgs are serve's flags for the bed (its webhook address and
	// serving pair).
	serveArgs []string
	// shepherdWebhooks are shepherd's webhook configurations (deploy/webhook)
	// and shepherdAddr the address they are registered for.
	shepherdWebhooks []*unstructured.Unstructured
	shepherdAddr     string
)

// serveWith runs serve with extra flags for the rest of the test, then
// with the bed's own again.
func serveWith(t *testing.T, extra ...string) *cluster.Serving {
	t.Helper()
	restart := func(args ...string) {
		if err := serve.Stop(); err != nil {
			t.Errorf("stopping serve: %v", err)
		}
		s, err := env.Serve(args...)
		if err != nil {
			t.Fatalf("starting serve %v: %v", args, err)
		}
		serve = s
	}
	restart(append(slices.Clone(serveArgs), extra...)...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve %v:\n%s", extra, serve.Log())
		}
		restart(serveArgs...)
	})
	return serve
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "test bed:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "shepherd-bed-test-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	// Fail, not skip, without the bed: make test builds it.
	if _, err := bed.Dir(); err != nil {
		return fail(err)
	}
	flags, auditLog, err := bed.APIServerFlags(dir)
	if err != nil {
		return fail(err)
	}
	if env, err = cluster.New(cluster.Options{ExtraAPIServerFlags: flags, WorkloadAPI: cluster.WorkloadAPIV1beta1}); err != nil {
		return fail(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()
	start := time.Now()
	if tb, err = bed.Start(env, auditLog, bed.Options{GenericWorkload: true}); err != nil {
		return fail(err)
	}
	fmt.Fprintf(os.Stderr, "test bed: JobSet %s, Trainer %s, kube-controller-manager and kube-scheduler %s, kwok %s up in %v\n",
		bed.JobSetVersion, bed.TrainerVersion, bed.K8sVersion, bed.KwokVersion, time.Since(start).Round(time.Millisecond))
	code := 1
	defer func() {
		if code != 0 {
			fmt.Fprintln(os.Stderr, tb.Logs())
			if serve != nil {
				fmt.Fprintf(os.Stderr, "===== shepherd serve (user %s) =====\n%s\n", shepherdUser, serve.Log())
			}
		}
		if err := tb.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the test bed:", err)
		}
	}()

	// Grove is not on the module proxy: its behaviour model stands in for
	// it, with its defaulting webhook registered under Grove's name.
	grove, err := grovemodel.Start(context.Background(), env, grovemodel.Options{})
	if err != nil {
		return fail(err)
	}
	defer func() {
		if err := grove.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the Grove model:", err)
		}
	}()

	// shepherd, as on a real cluster: its webhook configurations registered
	// after the operators', its ServiceAccount with the shipped RBAC, its
	// own serving pair.
	webhook := cluster.FreeAddr()
	cfgs, err := bed.ReadWebhooks(filepath.Join(cluster.RepoRoot(), "deploy", "webhook"))
	if err != nil {
		return fail(err)
	}
	if err := tb.RegisterWebhooks(context.Background(), cfgs, webhook); err != nil {
		return fail(err)
	}
	shepherdWebhooks, shepherdAddr = cfgs, webhook
	certDir := filepath.Join(dir, "shepherd-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return fail(err)
	}
	for name, b := range map[string][]byte{"tls.crt": tb.Serving.CertPEM, "tls.key": tb.Serving.KeyPEM} {
		if err := os.WriteFile(filepath.Join(certDir, name), b, 0o600); err != nil {
			return fail(err)
		}
	}
	host, port, _ := strings.Cut(webhook, ":")
	serveArgs = []string{"--leader-elect=false",
		"--webhook-host=" + host, "--webhook-port=" + port, "--cert-dir=" + certDir, "--cert-mode=cert-manager"}
	if serve, err = env.Serve(serveArgs...); err != nil {
		return fail(err)
	}
	defer func() {
		if err := serve.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "shepherd serve:", err)
		}
	}()
	if err := createRuntime(context.Background()); err != nil {
		return fail(err)
	}
	code = m.Run()
	if gone := tb.Exited(); len(gone) > 0 {
		fmt.Fprintln(os.Stderr, "test bed components exited:", gone)
		code = 1
	}
	return code
}

var (
	trainJobGVK = schema.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"}
	jobSetGVK   = schema.GroupVersionKind{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"}
	runtimeGVK  = schema.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "ClusterTrainingRuntime"}
)

// runtimeName is Trainer's own torch runtime
// (manifests/base/runtimes/torch_distributed.yaml of the pinned module).
const runtimeName = "torch-distributed"

func createRuntime(ctx context.Context) error {
	dir, err := bed.ModuleDir("github.com/kubeflow/trainer/v2")
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifests", "base", "runtimes", "torch_distributed.yaml"))
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	if err := utilyaml.Unmarshal(raw, &u.Object); err != nil {
		return err
	}
	if u.GetName() != runtimeName || u.GroupVersionKind() != runtimeGVK {
		return fmt.Errorf("Trainer's torch_distributed.yaml is %s %s", u.GroupVersionKind(), u.GetName())
	}
	// Trainer's validating webhook may still be warming up its caches.
	deadline := time.Now().Add(time.Minute)
	for {
		err := env.Client.Create(ctx, u.DeepCopy())
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("creating ClusterTrainingRuntime %s: %w", runtimeName, err)
		}
		time.Sleep(time.Second)
	}
}

// trainJob creates a TrainJob on the torch runtime with numNodes nodes and
// the given extra spec fields; its pods run until deleted
// (bed.RunForeverImage) unless spec gives a trainer of its own.
func trainJob(t *testing.T, ns, name string, numNodes int64, spec map[string]any) *unstructured.Unstructured {
	t.Helper()
	u := trainJobObject(ns, name, numNodes, spec)
	// Trainer's validating webhook looks the runtime up in its informer
	// cache, which may not have seen a runtime the test created a moment
	// before: its "must be created before the TrainJob" is retried briefly.
	deadline := time.Now().Add(15 * time.Second)
	for {
		created := u.DeepCopy()
		err := env.Client.Create(context.Background(), created)
		if err == nil {
			return created
		}
		if !strings.Contains(err.Error(), "must be created before the TrainJob is created") || time.Now().After(deadline) {
			t.Fatalf("creating TrainJob %s/%s: %v", ns, name, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// trainJobObject is the TrainJob trainJob creates (not created).
func trainJobObject(ns, name string, numNodes int64, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(trainJobGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	s := map[string]any{
		"runtimeRef": map[string]any{"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": runtimeName},
		"trainer":    map[string]any{"image": bed.RunForeverImage, "numNodes": numNodes},
	}
	for k, v := range spec {
		s[k] = v
	}
	u.Object["spec"] = s
	return u
}

// eventually polls cond every 250 ms until it returns true or within
// passes, then fails the test with what cond last said.
func eventually(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if gone := tb.Exited(); len(gone) > 0 {
			t.Fatalf("%s: test bed components exited: %v", what, gone)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, within, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func ownedBy(obj metav1.Object, kind, name string) bool {
	for _, o := range obj.GetOwnerReferences() {
		if o.Kind == kind && o.Name == name && o.Controller != nil && *o.Controller {
			return true
		}
	}
	return false
}

// waitJobSet waits for the JobSet Trainer creates for TrainJob name.
func waitJobSet(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	js := &unstructured.Unstructured{}
	js.SetGroupVersionKind(jobSetGVK)
	eventually(t, 2*time.Minute, "Trainer creates the JobSet of TrainJob "+name, func() (bool, string) {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, js); err != nil {
			return false, err.Error()
		}
		return ownedBy(js, "TrainJob", name), fmt.Sprintf("owners %v", js.GetOwnerReferences())
	})
	return js
}

// creators are the users whose writes created objects of resource in ns:
// a create, or a server-side apply (a patch) answered 201 Created.
func creators(t *testing.T, resource, ns string) map[string]int {
	t.Helper()
	ws, err := tb.Writes(resource, ns, "")
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, w := range ws {
		if w.ResponseStatus != nil && w.ResponseStatus.Code == http.StatusCreated && w.ObjectRef.Subresource == "" {
			n[w.User.Username]++
		}
	}
	return n
}

// TestTrainJobRunsThroughTheRealChain: a TrainJob on Trainer's torch runtime
// makes Trainer create its JobSet, the JobSet controller create its Job, and
// kube-controller-manager's Job controller create the Pods — each written by
// that component's own identity (the audit log says who).
func TestTrainJobRunsThroughTheRealChain(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	deleteWorkloads(t, ns)
	const name, nodes = "chain", 2
	trainJob(t, ns, name, nodes, nil)
	waitJobSet(t, ns, name)

	var jobs batchv1.JobList
	eventually(t, 2*time.Minute, "the JobSet controller creates the JobSet's Jobs", func() (bool, string) {
		if err := env.Client.List(ctx, &jobs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, j := range jobs.Items {
			if ownedBy(&j, "JobSet", name) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d Jobs, none owned by JobSet %s", len(jobs.Items), name)
	})
	var pods corev1.PodList
	eventually(t, 2*time.Minute, fmt.Sprintf("kube-controller-manager creates the %d Pods", nodes), func() (bool, string) {
		if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		n := 0
		for _, p := range pods.Items {
			for _, j := range jobs.Items {
				if ownedBy(&p, "Job", j.Name) {
					n++
				}
			}
		}
		return n == nodes, fmt.Sprintf("%d of %d Pods owned by the JobSet's Jobs", n, len(pods.Items))
	})
	// JobSet's pod webhook (configuration jobset-mutating-webhook-configuration,
	// objectSelector jobset-name) was called on each pod create.
	ws, err := tb.Writes("pods", ns, "")
	if err != nil {
		t.Fatal(err)
	}
	called := 0
	for _, w := range ws {
		if w.Verb == "create" && w.OK() {
			if ok, _ := w.Mutated("mpod.kb.io"); ok {
				called++
			}
		}
	}
	if called != nodes {
		t.Errorf("JobSet's pod webhook mpod.kb.io called on %d pod creates, want %d:\n%s", called, nodes, list(ws))
	}

	for resource, want := range map[string]string{"jobsets": bed.TrainerUser, "jobs": bed.JobSetUser, "pods": bed.KCMUser} {
		got := creators(t, resource, ns)
		if len(got) != 1 || got[want] == 0 {
			t.Errorf("%s in %s created by %v, want by %s only", resource, ns, got, want)
		}
	}
}

// TestNoVJS5OnTrainerJobSets: every JobSet Trainer creates passes JobSet's
// defaulting webhook (which writes startupPolicy AnyOrder) before shepherd's
// validating webhook judges it (validation follows every mutation), and
// shepherd must not warn of V-JS-5 (InOrder is deprecated) on it. A JobSet shepherd denies (V-JS-4) in
// the same namespace afterwards shows its Events arrive.
func TestNoVJS5OnTrainerJobSets(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	deleteWorkloads(t, ns)
	before := jobSetCreates(t)
	for _, name := range []string{"warnless-a", "warnless-b"} {
		trainJob(t, ns, name, 1, nil)
	}
	for _, name := range []string{"warnless-a", "warnless-b"} {
		js := waitJobSet(t, ns, name)
		order, _, _ := unstructured.NestedString(js.Object, "spec", "startupPolicy", "startupPolicyOrder")
		t.Logf("JobSet %s: startupPolicyOrder %q (JobSet's webhook defaults it)", name, order)
	}
	// shepherd's validating webhook judged them (serve runs in this process).
	if n := jobSetCreates(t) - before; n < 2 {
		t.Errorf("shepherd's validating webhook answered %v JobSet CREATEs, want at least Trainer's 2", n)
	}

	// The positive control: shepherd's Events for this namespace flow.
	control := &unstructured.Unstructured{}
	control.SetGroupVersionKind(jobSetGVK)
	control.SetNamespace(ns)
	control.SetName("control")
	pod := map[string]any{"template": map[string]any{"spec": map[string]any{
		"restartPolicy": "Never", "containers": []any{map[string]any{"name": "c", "image": "busybox"}}}}}
	control.Object["spec"] = map[string]any{"replicatedJobs": []any{
		map[string]any{"name": "first", "dependsOn": []any{map[string]any{"name": "second", "status": "Ready"}}, "template": map[string]any{"spec": pod}},
		map[string]any{"name": "second", "template": map[string]any{"spec": pod}},
	}}
	// JobSet's own validator may answer first; shepherd's verdict is its Event.
	err := env.Client.Create(ctx, control)
	if err == nil {
		t.Fatal("a JobSet whose first replicatedJob depends on another was admitted")
	}
	t.Logf("control JobSet denied: %v", err)
	var notes []string
	eventually(t, time.Minute, "shepherd's V-JS-4 Event for the control JobSet", func() (bool, string) {
		var evs eventsv1.EventList
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		notes = notes[:0]
		found := false
		for _, e := range evs.Items {
			if e.Reason != "PolicyViolation" {
				continue
			}
			notes = append(notes, e.Regarding.Kind+"/"+e.Regarding.Name+": "+e.Note)
			found = found || strings.HasPrefix(e.Note, "V-JS-4 ")
		}
		return found, fmt.Sprintf("PolicyViolation Events: %q", notes)
	})
	for _, n := range notes {
		if strings.Contains(n, "V-JS-5") {
			t.Errorf("shepherd warned of V-JS-5 on a JobSet Trainer created: %s", n)
		}
	}
}

// TestDeadlineAutoTrainerAlone: in auto mode (serve's default) the TrainJob
// CRD has spec.activeDeadlineSeconds, so Trainer enforces the deadline and
// shepherd stands down: the TrainJob is failed by Trainer (reason
// DeadlineExceeded, one transition) and shepherd's user writes nothing to it
// or its status.
func TestDeadlineAutoTrainerAlone(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	deleteWorkloads(t, ns)
	const name = "deadline"
	trainJob(t, ns, name, 1, map[string]any{"activeDeadlineSeconds": int64(5)})
	created := time.Now()

	failed := func() (metav1.Condition, bool, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(trainJobGVK)
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
			return metav1.Condition{}, false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Failed" && m["status"] == "True" {
				ts, _ := time.Parse(time.RFC3339, fmt.Sprint(m["lastTransitionTime"]))
				return metav1.Condition{Type: "Failed", Reason: fmt.Sprint(m["reason"]), Message: fmt.Sprint(m["message"]),
					LastTransitionTime: metav1.NewTime(ts)}, true, nil
			}
		}
		return metav1.Condition{}, false, nil
	}
	var cond metav1.Condition
	eventually(t, 2*time.Minute, "Trainer fails the TrainJob at its deadline", func() (bool, string) {
		c, ok, err := failed()
		if err != nil {
			return false, err.Error()
		}
		cond = c
		return ok, "no Failed=True condition yet"
	})
	t.Logf("Failed %s after %v: %s", cond.Reason, time.Since(created).Round(time.Second), cond.Message)
	if cond.Reason != "DeadlineExceeded" {
		t.Errorf("Failed reason %q, want DeadlineExceeded", cond.Reason)
	}
	// Give shepherd's reconciler time to act if it were going to (it
	// requeues at the deadline), then read who wrote the TrainJob.
	time.Sleep(5 * time.Second)
	if c, ok, err := failed(); err != nil || !ok || !c.LastTransitionTime.Equal(&cond.LastTransitionTime) {
		t.Errorf("the Failed condition changed: %+v (ok %v, err %v), was %+v", c, ok, err, cond)
	}
	ws, err := tb.Writes("trainjobs", ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if mine := bed.By(ws, shepherdUser); len(mine) > 0 {
		t.Errorf("shepherd wrote the TrainJob %d times in auto mode, want 0:\n%s", len(mine), list(mine))
	}
	trainer := 0
	for _, w := range bed.By(ws, bed.TrainerUser) {
		if w.OK() && w.ObjectRef.Subresource == "status" {
			trainer++
		}
	}
	if trainer == 0 {
		t.Errorf("no status write by %s in the audit log:\n%s", bed.TrainerUser, list(ws))
	}
	t.Logf("writes to TrainJob %s: %d (status by Trainer: %d, by shepherd: 0)", name, len(ws), trainer)
}

// jobSetCreates is how many JobSet CREATEs shepherd's validating webhook
// has answered.
func jobSetCreates(t testing.TB) float64 {
	return admissionRequests(t, map[string]string{"webhook": "validating", "kind": "JobSet", "operation": "CREATE"})
}

// admissionRequests sums shepherd_admission_requests_total of the serve
// running in this process over the series whose labels include want (all
// of them for an empty want).
func admissionRequests(t testing.TB, want map[string]string) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "shepherd_admission_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			matches := true
			for k, v := range want {
				matches = matches && l[k] == v
			}
			if matches {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

func list(ws []bed.Write) string {
	var s strings.Builder
	for _, w := range ws {
		s.WriteString(w.String() + "\n")
	}
	return s.String()
}

package bed_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/test/bed"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/grovemodel"
)

// example is one manifest of examples/.
type example struct {
	file string
	obj  *unstructured.Unstructured
	// layers are what the file's header says rejects it on a real
	// cluster ("# on a real cluster: rejected by <layer>[ and <layer>]"),
	// for examples/invalid. Several: validating webhooks run in parallel
	// and the apiserver returns whichever denial comes first.
	layers []string
}

var layerHeader = regexp.MustCompile(`^# on a real cluster: rejected by (.+?)(?: \(|$)`)

// readExamples reads every object of examples/<dir> (their headers'
// layer line too).
func readExamples(t *testing.T, dir string) []example {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cluster.RepoRoot(), "examples", dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples in examples/%s: %v", dir, err)
	}
	var out []example
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var layers []string
		sc := bufio.NewScanner(strings.NewReader(string(raw)))
		for sc.Scan() {
			if m := layerHeader.FindStringSubmatch(sc.Text()); m != nil {
				layers = strings.Split(m[1], " and ")
			}
		}
		d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(raw)), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := d.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			out = append(out, example{file: filepath.Join("examples", dir, filepath.Base(f)), obj: u, layers: layers})
		}
	}
	return out
}

// rejectingLayer names who denied a create, from the apiserver's answer:
// a webhook by its name, else the CRD's own validation (its schema and
// x-kubernetes-validations, which run before any validating webhook).
func rejectingLayer(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, `admission webhook "validate.shepherd.dev"`):
		return "shepherd"
	case strings.Contains(msg, `admission webhook "validator.`) && strings.Contains(msg, `trainer.kubeflow.org" denied`):
		return "Trainer's webhook"
	case strings.Contains(msg, `admission webhook "vjobset.kb.io"`):
		return "JobSet's webhook"
	case strings.Contains(msg, `admission webhook "pcs.validating.webhooks.grove.io"`):
		return "Grove's webhook"
	case strings.Contains(msg, "admission webhook"):
		return "another webhook"
	case apierrors.IsInvalid(err):
		return "the CRD"
	}
	return "unknown"
}

// TestInvalidExamplesRejectedByTheNamedLayer: every example of
// examples/invalid is rejected on the bed, and by the layer its header
// names — the CRD's validation, Trainer's or JobSet's webhook, or
// shepherd — since a user sees only the first layer's message. Grove's
// kinds are not served by a real Grove here: shepherd is the first layer
// the bed has for them.
func TestInvalidExamplesRejectedByTheNamedLayer(t *testing.T) {
	ctx := context.Background()
	ns := kit.Cluster.Namespace(t)
	kit.DeleteWorkloads(t, ns)
	for _, ex := range readExamples(t, "invalid") {
		t.Run(filepath.Base(ex.file), func(t *testing.T) {
			obj := ex.obj.DeepCopy()
			if obj.GetNamespace() == "" && namespaced(obj.GetKind()) {
				obj.SetNamespace(ns)
			}
			err := kit.Cluster.Client.Create(ctx, obj)
			if err == nil {
				t.Cleanup(func() { _ = kit.Cluster.Client.Delete(ctx, obj) })
				t.Fatalf("%s %s was admitted", obj.GetKind(), obj.GetName())
			}
			got := rejectingLayer(err)
			t.Logf("%s rejected by %s: %v", ex.file, got, err)
			if len(ex.layers) == 0 {
				t.Fatalf("%s has no header line \"# on a real cluster: rejected by <layer>\" (it is rejected by %s)", ex.file, got)
			}
			if !slices.Contains(ex.layers, got) {
				t.Errorf("%s says it is rejected by %s; on the bed %s rejects it: %v", ex.file, strings.Join(ex.layers, " and "), got, err)
			}
		})
	}
}

func namespaced(kind string) bool {
	return kind != "ClusterTrainingRuntime" && kind != "WorkloadPolicy"
}

// TestValidExamplesRunToCompletion: the Trainer and JobSet examples of
// examples/valid are admitted on the bed and run to completion on kwok
// nodes (the TrainJob's 4 nodes × 4 GPUs, gang-scheduled through the
// Workload API its runtime asks for), with no Warning Event in their
// namespace and no error about them in any component's log. Grove's
// examples are admitted, and their pods run under the Grove model (Grove's
// workloads serve; they do not complete).
func TestValidExamplesRunToCompletion(t *testing.T) {
	ctx := context.Background()
	ns := kit.Cluster.Namespace(t)
	kit.Bed.AddNodes(t, "examples", bed.Nodes{Count: 4, GPUs: 4})
	kit.DeleteWorkloads(t, ns)
	logsBefore := componentLogLengths()

	// The example ClusterTrainingRuntime is Trainer's torch-distributed
	// with shepherd's carriers: it replaces the bed's for this test.
	restoreRuntime(t)
	var running []*unstructured.Unstructured
	for _, ex := range readExamples(t, "valid") {
		obj := ex.obj.DeepCopy()
		if namespaced(obj.GetKind()) {
			obj.SetNamespace(ns)
		}
		if err := kit.Cluster.Client.Create(ctx, obj); err != nil {
			t.Errorf("%s: %s %s was not admitted: %v", ex.file, obj.GetKind(), obj.GetName(), err)
			continue
		}
		if k := obj.GetKind(); k == "TrainJob" || k == "JobSet" {
			running = append(running, obj)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, obj := range running {
		cond := "Completed"
		if obj.GetKind() == "TrainJob" {
			cond = "Complete"
		}
		kit.Eventually(t, 3*time.Minute, fmt.Sprintf("%s %s completes", obj.GetKind(), obj.GetName()), func() (bool, string) {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(obj.GroupVersionKind())
			if err := kit.Cluster.Client.Get(ctx, client.ObjectKeyFromObject(obj), u); err != nil {
				return false, err.Error()
			}
			_, ok := bed.ConditionTrue(u, cond)
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			return ok, fmt.Sprintf("conditions %v", conds)
		})
	}
	var pods corev1.PodList
	if err := kit.Cluster.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	succeeded, grove := 0, 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded {
			succeeded++
		}
		if bed.OwnedBy(&p, "PodClique", p.Labels["grove.io/podclique"]) || len(p.OwnerReferences) > 0 && p.OwnerReferences[0].Kind == "PodClique" {
			grove++
		}
	}
	t.Logf("%d TrainJobs and JobSets complete; %d of %d pods Succeeded, %d pods of Grove's examples", len(running), succeeded, len(pods.Items), grove)
	if grove == 0 {
		t.Errorf("no pod of a Grove example: the Grove model did not run them")
	}

	var evs eventsv1.EventList
	if err := kit.Cluster.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Type == corev1.EventTypeWarning {
			t.Errorf("Warning Event from %s on %s/%s: %s: %s", e.ReportingController, e.Regarding.Kind, e.Regarding.Name, e.Reason, e.Note)
		}
	}
	// An update conflict, or an object a controller just created not yet
	// in its cache, is a controller racing its own cache and retrying —
	// unless someone else writes its objects too: only those are
	// forgiven, and only if shepherd wrote none of the TrainJobs, JobSets
	// and Jobs: what it derives goes to its own WorkloadRecords.
	races := 0
	for name, lines := range componentErrorsSince(logsBefore, ns) {
		for _, l := range lines {
			if strings.Contains(l, "the object has been modified; please apply your changes") || strings.Contains(l, `\" not found"`) {
				races++
				continue
			}
			t.Errorf("%s logged an error about %s: %s", name, ns, l)
		}
	}
	for _, resource := range []string{"trainjobs", "jobsets", "jobs"} {
		ws, err := kit.Bed.Writes(resource, ns, "")
		if err != nil {
			t.Fatal(err)
		}
		if mine := bed.By(ws, shepherdUser); len(mine) > 0 {
			t.Errorf("shepherd wrote %s in %s %d times, want 0:\n%s", resource, ns, len(mine), bed.Lines(mine))
		}
	}
	t.Logf("retried cache races logged by the controllers (conflicts, not yet cached): %d", races)
	// What shepherd wrote instead: its own records, one per governed
	// workload (the closing figures of issue 30).
	ws, err := kit.Bed.Writes("workloadrecords", ns, "")
	if err != nil {
		t.Fatal(err)
	}
	byVerb := map[string]int{}
	for _, w := range bed.By(ws, shepherdUser) {
		byVerb[w.Verb]++
	}
	t.Logf("shepherd's WorkloadRecord writes for %d TrainJobs and the Grove examples: %v", len(running), byVerb)
}

// restoreRuntime deletes the bed's torch-distributed runtime for the rest
// of the test and creates Trainer's again when it ends.
func restoreRuntime(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	rt := &unstructured.Unstructured{}
	rt.SetGroupVersionKind(bed.ClusterRuntimeGVK)
	rt.SetName(bed.TorchRuntime)
	if err := kit.Cluster.Client.Delete(ctx, rt); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	kit.Eventually(t, 30*time.Second, "the bed's runtime is gone", func() (bool, string) {
		err := kit.Cluster.Client.Get(ctx, client.ObjectKey{Name: bed.TorchRuntime}, rt.DeepCopy())
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	t.Cleanup(func() {
		if err := kit.Cluster.Client.Delete(ctx, rt.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		kit.Eventually(t, 30*time.Second, "the example runtime is gone", func() (bool, string) {
			err := kit.Cluster.Client.Get(ctx, client.ObjectKey{Name: bed.TorchRuntime}, rt.DeepCopy())
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		if err := kit.CreateTorchRuntime(ctx); err != nil {
			t.Error(err)
		}
	})
}

// componentLogLengths is how much each component (and serve) has logged.
func componentLogLengths() map[string]int {
	out := map[string]int{"shepherd": len(kit.Serve.Log())}
	for name, log := range kit.Bed.ComponentLogs() {
		out[name] = len(log)
	}
	return out
}

// errorLine matches a log line at error level in the formats the
// components use: JSON ("level":"error"), klog (E0102 …) and zap's console
// encoder (tab-separated ERROR).
var errorLine = regexp.MustCompile(`"level":"error"|^E\d{4} |\tERROR\t|\terror\t`)

// componentErrorsSince returns, per component, the error lines logged
// since before that mention ns.
func componentErrorsSince(before map[string]int, ns string) map[string][]string {
	logs := kit.Bed.ComponentLogs()
	logs["shepherd"] = kit.Serve.Log()
	out := map[string][]string{}
	for name, log := range logs {
		if n := before[name]; n <= len(log) {
			log = log[n:]
		}
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, ns) && errorLine.MatchString(l) {
				out[name] = append(out[name], l)
			}
		}
	}
	return out
}

// TestTrainingDefaultsBeforeGrovesDefaulter: the annotation-only Training
// PodCliqueSet example is admitted beside Grove's defaulting webhook (the
// Grove model's, under Grove's configuration name). Grove's webhook sets
// restartPolicy Always on every clique without one, which V-PCS-8 denies on
// a Training set; shepherd's mutating configuration (defaults.shepherd.dev)
// sorts before Grove's, so D-PCS-3's Never is there first and Grove leaves
// it. The audit log shows the order of the two calls.
func TestTrainingDefaultsBeforeGrovesDefaulter(t *testing.T) {
	ctx := context.Background()
	ns := kit.Cluster.Namespace(t)
	var ex *example
	for _, e := range readExamples(t, "valid") {
		if strings.HasSuffix(e.file, "podcliqueset-training-minimal.yaml") {
			ex = &e
		}
	}
	if ex == nil {
		t.Fatal("no examples/valid/podcliqueset-training-minimal.yaml")
	}
	obj := ex.obj.DeepCopy()
	obj.SetNamespace(ns)
	if err := kit.Cluster.Client.Create(ctx, obj); err != nil {
		t.Fatalf("the annotation-only Training example was not admitted beside Grove's defaulting webhook: %v", err)
	}
	t.Cleanup(func() { _ = kit.Cluster.Client.Delete(ctx, obj) })
	cliques, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "cliques")
	for i, c := range cliques {
		policy, _, _ := unstructured.NestedString(c.(map[string]any), "spec", "podSpec", "restartPolicy")
		if policy != "Never" {
			t.Errorf("clique %d stored with restartPolicy %q, want Never (D-PCS-3)", i, policy)
		}
	}
	// Grove's defaults that shepherd does not set are still Grove's.
	if d, _, _ := unstructured.NestedString(obj.Object, "spec", "template", "terminationDelay"); d == "" {
		t.Errorf("no terminationDelay stored: Grove's defaulting webhook did not run")
	}
	ws, err := kit.Bed.Writes("podcliquesets", ns, obj.GetName())
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, w := range ws {
		if w.Verb == "create" && w.OK() {
			order = w.MutationOrder()
		}
	}
	shepherdAt, groveAt := slices.Index(order, "default.shepherd.dev"), slices.Index(order, grovemodel.WebhookName)
	if shepherdAt < 0 || groveAt < 0 || shepherdAt > groveAt {
		t.Errorf("mutating webhooks called in the order %v, want shepherd's default.shepherd.dev before Grove's %s", order, grovemodel.WebhookName)
	}
}

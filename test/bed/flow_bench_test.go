package bed_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/test/bed"
)

// flowMode is one side of BenchmarkFlow: the bed with shepherd (its
// webhooks registered, serve running) or without it.
type flowMode string

const (
	flowNone     flowMode = "none"
	flowShepherd flowMode = "shepherd"
)

// flowJob is one TrainJob's timeline.
type flowJob struct {
	created, running, finished time.Time
}

// BenchmarkFlow (make bench-flow) runs N TrainJobs (FLOW_N, default 10;
// one node each, on N kwok nodes) from create to all pods Running and to
// Complete through the real Trainer, JobSet, Job controller, scheduler and
// kwok, with and without shepherd, in FLOW_ROUNDS interleaved rounds
// (default 3; the order alternates). It reports the median and p99 time
// to running and to finished per mode, the ratio of the medians, and
// shepherd's webhook calls per TrainJob over its life (its own admission
// counter). Timing is by polling every 50 ms. Nothing is asserted: the
// figures are printed for README.
func BenchmarkFlow(b *testing.B) {
	n := envInt(b, "FLOW_N", 10)
	rounds := envInt(b, "FLOW_ROUNDS", 3)
	tb.AddNodes(b, "flow", bed.Nodes{Count: n})
	results := map[flowMode][]flowJob{}
	calls := 0.0
	current := flowShepherd
	for r := range rounds {
		order := []flowMode{flowNone, flowShepherd}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, mode := range order {
			if mode != current {
				switchFlowMode(b, mode)
				current = mode
			}
			before := admissionRequests(b, nil)
			jobs := runFlow(b, n, fmt.Sprintf("flow-%d-%s", r, mode))
			if mode == flowShepherd {
				calls += admissionRequests(b, nil) - before
			}
			results[mode] = append(results[mode], jobs...)
		}
	}
	if current != flowShepherd {
		switchFlowMode(b, flowShepherd)
	}
	stat := func(mode flowMode, f func(flowJob) time.Duration) (time.Duration, time.Duration) {
		var ds []time.Duration
		for _, j := range results[mode] {
			ds = append(ds, f(j))
		}
		slices.Sort(ds)
		return ds[len(ds)/2], ds[min(len(ds)-1, len(ds)*99/100)]
	}
	toRunning := func(j flowJob) time.Duration { return j.running.Sub(j.created) }
	toFinished := func(j flowJob) time.Duration { return j.finished.Sub(j.created) }
	noneRun, noneRun99 := stat(flowNone, toRunning)
	shepRun, shepRun99 := stat(flowShepherd, toRunning)
	noneFin, noneFin99 := stat(flowNone, toFinished)
	shepFin, shepFin99 := stat(flowShepherd, toFinished)
	perJob := calls / float64(len(results[flowShepherd]))
	fmt.Fprintf(os.Stderr, "\nBenchmarkFlow: %d TrainJobs x %d rounds per mode, interleaved (%s)\n", n, rounds, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(os.Stderr, "%-9s %-22s %-22s\n", "mode", "to running p50 / p99", "to finished p50 / p99")
	fmt.Fprintf(os.Stderr, "%-9s %-22s %-22s\n", flowNone, fmt.Sprintf("%v / %v", noneRun.Round(time.Millisecond), noneRun99.Round(time.Millisecond)), fmt.Sprintf("%v / %v", noneFin.Round(time.Millisecond), noneFin99.Round(time.Millisecond)))
	fmt.Fprintf(os.Stderr, "%-9s %-22s %-22s\n", flowShepherd, fmt.Sprintf("%v / %v", shepRun.Round(time.Millisecond), shepRun99.Round(time.Millisecond)), fmt.Sprintf("%v / %v", shepFin.Round(time.Millisecond), shepFin99.Round(time.Millisecond)))
	fmt.Fprintf(os.Stderr, "median time to running, shepherd / none: %.3f; to finished: %.3f\n", float64(shepRun)/float64(noneRun), float64(shepFin)/float64(noneFin))
	fmt.Fprintf(os.Stderr, "shepherd webhook calls per TrainJob life: %.1f\n\n", perJob)
	b.ReportMetric(float64(shepRun)/float64(noneRun), "running-ratio")
	b.ReportMetric(perJob, "webhook-calls/trainjob")
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return i
}

// switchFlowMode takes shepherd out of the bed (its webhook
// configurations deleted, serve stopped) or puts it back.
func switchFlowMode(b *testing.B, mode flowMode) {
	ctx := context.Background()
	if mode == flowShepherd {
		if err := tb.RegisterWebhooks(ctx, shepherdWebhooks, shepherdAddr); err != nil {
			b.Fatal(err)
		}
		s, err := env.Serve(serveArgs...)
		if err != nil {
			b.Fatal(err)
		}
		serve = s
		return
	}
	for _, u := range shepherdWebhooks {
		var obj client.Object = &admissionv1.ValidatingWebhookConfiguration{}
		if u.GetKind() == "MutatingWebhookConfiguration" {
			obj = &admissionv1.MutatingWebhookConfiguration{}
		}
		obj.SetName(u.GetName())
		if err := env.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			b.Fatal(err)
		}
	}
	if err := serve.Stop(); err != nil {
		b.Fatal(err)
	}
	// The apiserver's webhook configuration cache catches up.
	time.Sleep(2 * time.Second)
}

// runFlow creates n one-node TrainJobs in a new namespace at once and
// follows each to all pods Running and to Complete, then deletes them.
func runFlow(b *testing.B, n int, prefix string) []flowJob {
	ctx := context.Background()
	ns := env.Namespace(b)
	jobs := make([]flowJob, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			jobs[i].created = time.Now()
			u := trainJobObject(ns, fmt.Sprintf("%s-%d", prefix, i), 1, onRuntime(runtimeName, "docker.io/torch-run", 1))
			if err := env.Client.Create(ctx, u); err != nil {
				b.Errorf("creating TrainJob %s: %v", u.GetName(), err)
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		now := time.Now()
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		phases := map[string][]corev1.PodPhase{}
		for _, p := range pods.Items {
			name := p.Labels["jobset.sigs.k8s.io/jobset-name"]
			phases[name] = append(phases[name], p.Status.Phase)
		}
		done := 0
		for i := range jobs {
			name := fmt.Sprintf("%s-%d", prefix, i)
			ps := phases[name]
			if jobs[i].running.IsZero() && len(ps) > 0 && !slices.Contains(ps, corev1.PodPending) {
				jobs[i].running = now
			}
			if jobs[i].finished.IsZero() {
				if u := getTrainJob(b, ns, name); u != nil {
					if _, ok := conditionTrue(u, "Complete"); ok {
						jobs[i].finished = now
					}
				}
			}
			if !jobs[i].finished.IsZero() && !jobs[i].running.IsZero() {
				done++
			}
		}
		if done == n {
			break
		}
		if now.After(deadline) {
			b.Fatalf("%s: %d of %d TrainJobs ran and finished within 3 minutes", prefix, done, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cleanupFlow(b, ns)
	return jobs
}

// cleanupFlow deletes a round's TrainJobs and waits until their pods are
// gone, so the next round finds the nodes free.
func cleanupFlow(b *testing.B, ns string) {
	ctx := context.Background()
	u := trainJobObject(ns, "", 0, nil)
	if err := env.Client.DeleteAllOf(ctx, u, client.InNamespace(ns), client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err == nil && len(pods.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("pods of %s not gone a minute after their TrainJobs were deleted", ns)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

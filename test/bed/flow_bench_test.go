package bed_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/test/bed"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// flowMode is one side of BenchmarkFlow: the bed with shepherd (its
// webhooks registered, serve running) or without it; flowAll is shepherd
// judging every rule, the upstream-enforced ones too, and called for every
// request its configurations name (serve --defer-to-upstream=false
// --skip-requests-without-work=false: shepherd before issue 31).
type flowMode string

const (
	flowNone     flowMode = "none"
	flowAll      flowMode = "all-rules"
	flowShepherd flowMode = "shepherd"
)

// flowModes are the modes in the order the first round visits them.
var flowModes = []flowMode{flowNone, flowAll, flowShepherd}

// flowServeArgs are serve's flags in a mode with shepherd.
func flowServeArgs(mode flowMode) []string {
	args := slices.Clone(kit.ServeArgs)
	if mode == flowAll {
		args = append(args, "--defer-to-upstream=false", "--skip-requests-without-work=false")
	}
	return args
}

// flowJob is one workload's timeline: a TrainJob's, or a Training
// PodCliqueSet's (which runs until deleted: finished stays zero).
type flowJob struct {
	created, running, finished time.Time
}

// flowRound is what one round measured.
type flowRound struct {
	jobs, sets []flowJob
}

// BenchmarkFlow (make bench-flow) runs N TrainJobs (FLOW_N, default 10;
// one node each, on N kwok nodes) from create to all pods Running and to
// Complete through the real Trainer, JobSet, Job controller, scheduler and
// kwok, and beside them N annotation-only Training PodCliqueSets (one
// clique of one pod each) from create to their pod Running through the
// Grove model, with and without shepherd, in FLOW_ROUNDS interleaved
// rounds (default 3; the order alternates). It reports the median and p99
// time to running (and, for TrainJobs, to finished) per mode, the ratio of
// the medians, and shepherd's webhook calls per TrainJob over its life and
// per PodCliqueSet until running (its own admission counter, by kind).
// Timing is by polling every 50 ms. Nothing is asserted: the figures are
// printed for docs/benchmarks.md.
func BenchmarkFlow(b *testing.B) {
	n := testkit.EnvInt(b, "FLOW_N", 10)
	rounds := testkit.EnvInt(b, "FLOW_ROUNDS", 3)
	kit.Bed.AddNodes(b, "flow", bed.Nodes{Count: n})
	results := map[flowMode][]flowJob{}
	setResults := map[flowMode][]flowJob{}
	calls, setCalls := map[flowMode]float64{}, map[flowMode]float64{}
	groveKinds := []string{"PodCliqueSet", "PodClique", "PodCliqueScalingGroup"}
	setAdmissions := func() float64 {
		n := 0.0
		for _, k := range groveKinds {
			n += admissionRequests(b, map[string]string{"kind": k})
		}
		return n
	}
	current := flowShepherd
	for r := range rounds {
		order := slices.Clone(flowModes)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, mode := range order {
			if mode != current {
				switchFlowMode(b, current, mode)
				current = mode
			}
			before, setsBefore := admissionRequests(b, nil)-setAdmissions(), setAdmissions()
			round := runFlow(b, n, fmt.Sprintf("flow-%d-%s", r, mode))
			calls[mode] += admissionRequests(b, nil) - setAdmissions() - before
			setCalls[mode] += setAdmissions() - setsBefore
			results[mode] = append(results[mode], round.jobs...)
			setResults[mode] = append(setResults[mode], round.sets...)
		}
	}
	if current != flowShepherd {
		switchFlowMode(b, current, flowShepherd)
	}
	stat := func(mode flowMode, f func(flowJob) time.Duration) (time.Duration, time.Duration) {
		return percentiles(results[mode], f)
	}
	toRunning := func(j flowJob) time.Duration { return j.running.Sub(j.created) }
	toFinished := func(j flowJob) time.Duration { return j.finished.Sub(j.created) }
	noneRun, noneRun99 := stat(flowNone, toRunning)
	shepRun, shepRun99 := stat(flowShepherd, toRunning)
	noneFin, noneFin99 := stat(flowNone, toFinished)
	shepFin, shepFin99 := stat(flowShepherd, toFinished)
	noneSet, noneSet99 := percentiles(setResults[flowNone], toRunning)
	shepSet, shepSet99 := percentiles(setResults[flowShepherd], toRunning)
	allRun, allRun99 := stat(flowAll, toRunning)
	allFin, allFin99 := stat(flowAll, toFinished)
	allSet, allSet99 := percentiles(setResults[flowAll], toRunning)
	perJob := calls[flowShepherd] / float64(len(results[flowShepherd]))
	perSet := setCalls[flowShepherd] / float64(len(setResults[flowShepherd]))
	perJobAll := calls[flowAll] / float64(len(results[flowAll]))
	perSetAll := setCalls[flowAll] / float64(len(setResults[flowAll]))
	ms := func(a, b time.Duration) string {
		return fmt.Sprintf("%v / %v", a.Round(time.Millisecond), b.Round(time.Millisecond))
	}
	fmt.Fprintf(os.Stderr, "\nBenchmarkFlow: %d TrainJobs and %d Training PodCliqueSets x %d rounds per mode, interleaved (%s)\n", n, n, rounds, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(os.Stderr, "%-9s %-30s %-30s %-30s\n", "mode", "TrainJob to running p50 / p99", "TrainJob to finished p50 / p99", "PodCliqueSet to running p50 / p99")
	fmt.Fprintf(os.Stderr, "%-9s %-30s %-30s %-30s\n", flowNone, ms(noneRun, noneRun99), ms(noneFin, noneFin99), ms(noneSet, noneSet99))
	fmt.Fprintf(os.Stderr, "%-9s %-30s %-30s %-30s\n", flowAll, ms(allRun, allRun99), ms(allFin, allFin99), ms(allSet, allSet99))
	fmt.Fprintf(os.Stderr, "%-9s %-30s %-30s %-30s\n", flowShepherd, ms(shepRun, shepRun99), ms(shepFin, shepFin99), ms(shepSet, shepSet99))
	fmt.Fprintf(os.Stderr, "median ratio shepherd / none: TrainJob to running %.3f, to finished %.3f; PodCliqueSet to running %.3f\n",
		float64(shepRun)/float64(noneRun), float64(shepFin)/float64(noneFin), float64(shepSet)/float64(noneSet))
	fmt.Fprintf(os.Stderr, "median ratio all-rules / none: TrainJob to running %.3f, to finished %.3f; PodCliqueSet to running %.3f\n",
		float64(allRun)/float64(noneRun), float64(allFin)/float64(noneFin), float64(allSet)/float64(noneSet))
	fmt.Fprintf(os.Stderr, "shepherd webhook calls per TrainJob life: %.1f (all-rules %.1f); per PodCliqueSet until running (its PodCliques included): %.1f (all-rules %.1f)\n\n", perJob, perJobAll, perSet, perSetAll)
	b.ReportMetric(float64(shepRun)/float64(noneRun), "running-ratio")
	b.ReportMetric(float64(shepSet)/float64(noneSet), "pcs-running-ratio")
	b.ReportMetric(perJob, "webhook-calls/trainjob")
	b.ReportMetric(perSet, "webhook-calls/podcliqueset")
	b.ReportMetric(perJobAll, "all-rules-webhook-calls/trainjob")
}

// percentiles are the median and p99 of f over jobs.
func percentiles(jobs []flowJob, f func(flowJob) time.Duration) (time.Duration, time.Duration) {
	var ds []time.Duration
	for _, j := range jobs {
		ds = append(ds, f(j))
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[min(len(ds)-1, len(ds)*99/100)]
}

// switchFlowMode takes shepherd out of the bed (its webhook
// configurations deleted, serve stopped) or puts it back.
func switchFlowMode(b *testing.B, from, to flowMode) {
	ctx := context.Background()
	if from != flowNone {
		if err := kit.Serve.Stop(); err != nil {
			b.Fatal(err)
		}
	}
	if to != flowNone {
		// Registered afresh from deploy/webhook: without the conditions
		// serve keeps in them, which the default mode's serve writes again.
		if err := kit.Bed.RegisterWebhooks(ctx, kit.Webhooks, kit.WebhookAddr); err != nil {
			b.Fatal(err)
		}
		s, err := kit.Cluster.Serve(flowServeArgs(to)...)
		if err != nil {
			b.Fatal(err)
		}
		kit.Serve = s
		if to == flowShepherd {
			kit.Eventually(b, time.Minute, "the has-work condition in place", func() (bool, string) {
				c := workCondition(b)
				return c != "", c
			})
		}
		// The apiserver's webhook configuration cache catches up.
		time.Sleep(2 * time.Second)
		return
	}
	for _, u := range kit.Webhooks {
		var obj client.Object = &admissionv1.ValidatingWebhookConfiguration{}
		if u.GetKind() == "MutatingWebhookConfiguration" {
			obj = &admissionv1.MutatingWebhookConfiguration{}
		}
		obj.SetName(u.GetName())
		if err := kit.Cluster.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			b.Fatal(err)
		}
	}
	// The apiserver's webhook configuration cache catches up.
	time.Sleep(2 * time.Second)
}

// runFlow creates, in a new namespace and at once, n one-node TrainJobs
// and n one-pod Training PodCliqueSets, follows each TrainJob to all pods
// Running and to Complete and each set to its pod Running, then deletes
// them.
func runFlow(b *testing.B, n int, prefix string) flowRound {
	ctx := context.Background()
	ns := kit.Cluster.Namespace(b)
	round := flowRound{jobs: make([]flowJob, n), sets: make([]flowJob, n)}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			round.jobs[i].created = time.Now()
			u := bed.TrainJobObject(ns, fmt.Sprintf("%s-%d", prefix, i), 1, bed.OnRuntime(bed.TorchRuntime, "docker.io/torch-run", 1))
			if err := kit.Cluster.Client.Create(ctx, u); err != nil {
				b.Errorf("creating TrainJob %s: %v", u.GetName(), err)
			}
		}()
		go func() {
			defer wg.Done()
			round.sets[i].created = time.Now()
			u := trainingSetObject(ns, fmt.Sprintf("%s-set-%d", prefix, i), 1, nil)
			if err := kit.Cluster.Client.Create(ctx, u); err != nil {
				b.Errorf("creating PodCliqueSet %s: %v", u.GetName(), err)
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
		if err := kit.Cluster.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		phases := map[string][]corev1.PodPhase{}
		for _, p := range pods.Items {
			name := p.Labels["jobset.sigs.k8s.io/jobset-name"]
			if set := p.Labels[api.LabelPartOf]; set != "" {
				name = set
			}
			phases[name] = append(phases[name], p.Status.Phase)
		}
		running := func(name string) bool {
			ps := phases[name]
			return len(ps) > 0 && !slices.Contains(ps, corev1.PodPending)
		}
		done := 0
		for i := range round.jobs {
			name := fmt.Sprintf("%s-%d", prefix, i)
			if round.jobs[i].running.IsZero() && running(name) {
				round.jobs[i].running = now
			}
			if round.jobs[i].finished.IsZero() {
				if u := kit.GetTrainJob(b, ns, name); u != nil {
					if _, ok := bed.ConditionTrue(u, "Complete"); ok {
						round.jobs[i].finished = now
					}
				}
			}
			if !round.jobs[i].finished.IsZero() && !round.jobs[i].running.IsZero() {
				done++
			}
			if set := fmt.Sprintf("%s-set-%d", prefix, i); round.sets[i].running.IsZero() && running(set) {
				round.sets[i].running = now
			}
			if !round.sets[i].running.IsZero() {
				done++
			}
		}
		if done == 2*n {
			break
		}
		if now.After(deadline) {
			b.Fatalf("%s: %d of %d TrainJobs and PodCliqueSets ran (and the TrainJobs finished) within 3 minutes", prefix, done, 2*n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cleanupFlow(b, ns)
	return round
}

// cleanupFlow deletes a round's TrainJobs and PodCliqueSets and waits until their pods are
// gone, so the next round finds the nodes free.
func cleanupFlow(b *testing.B, ns string) {
	ctx := context.Background()
	for _, u := range []*unstructured.Unstructured{bed.TrainJobObject(ns, "", 0, nil), trainingSetObject(ns, "", 0, nil)} {
		if err := kit.Cluster.Client.DeleteAllOf(ctx, u, client.InNamespace(ns), client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			b.Fatal(err)
		}
	}
	if err := testkit.Poll(100*time.Millisecond, time.Minute, func() (bool, error) {
		var pods corev1.PodList
		err := kit.Cluster.Client.List(ctx, &pods, client.InNamespace(ns))
		return err == nil && len(pods.Items) == 0, err
	}); err != nil {
		b.Fatalf("pods of %s not gone after their TrainJobs were deleted: %v", ns, err)
	}
}

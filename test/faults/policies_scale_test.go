package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

const (
	// scalePolicies is how many WorkloadPolicies the scale test creates.
	scalePolicies = 10000
	// memoryLimit is the chart's memory limit; GOMEMLIMIT is 80 % of it,
	// as the chart sets it (goMemLimitPercent).
	memoryLimit = 512 << 20
	// scaleBatch is how many policies one deletecollection removes.
	scaleBatch = 500
	// deleteWorkers is how many batches are deleted at once.
	deleteWorkers = 5
)

// deleteScalePolicies deletes the scale test's policies, a batch at a
// time, deleteWorkers batches at once: the apiserver deletes a
// collection's objects one after another (--delete-collection-workers is
// 1), and the 20 batches one after another took 80 s.
func deleteScalePolicies(ctx context.Context) error {
	batches := make(chan int)
	errs := make(chan error, scalePolicies/scaleBatch+1)
	var wg sync.WaitGroup
	for range deleteWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				if err := env.Client.DeleteAllOf(ctx, &shepherdv1alpha1.WorkloadPolicy{},
					client.MatchingLabels{"shepherd.dev/test": "scale", "shepherd.dev/batch": strconv.Itoa(b)}); err != nil {
					errs <- fmt.Errorf("deleting batch %d of the policies: %w", b, err)
				}
			}
		}()
	}
	for b := 0; b*scaleBatch < scalePolicies; b++ {
		batches <- b
	}
	close(batches)
	wg.Wait()
	close(errs)
	return <-errs // nil when none failed
}

// gauge reads one sample of a replica's /metrics: the line that starts
// with series, e.g. `shepherd_workload_policies{ready="true"}`.
func gauge(t *testing.T, metrics, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// collectGarbage has the replica whose pprof server is at addr collect
// garbage (/debug/pprof/heap?gc=1 runs runtime.GC before profiling).
func collectGarbage(t *testing.T, addr string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?gc=1") //nolint:gosec // local test URL
	if err != nil {
		t.Fatalf("collecting the replica's garbage: %v", err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("collecting the replica's garbage: HTTP %d, %v", resp.StatusCode, err)
	}
}

// scalePolicy is policy i of the scale test, as a platform generates one
// per team: it applies to the namespaces labelled for team i, with an
// expression of its own (the thresholds differ). The load's namespace is
// team 0's, so one policy judges each of its TrainJobs (and never denies:
// the threshold is far above their one node) while every policy goes
// through the matcher.
func scalePolicy(i int) *shepherdv1alpha1.WorkloadPolicy {
	return testkit.TrainJobPolicy(fmt.Sprintf("scale-%05d", i)).
		Labels(map[string]string{
			"shepherd.dev/test": "scale",
			// A deletecollection of all 10,000 outlasts the apiserver's
			// request timeout: they are deleted a batch at a time.
			"shepherd.dev/batch": strconv.Itoa(i / scaleBatch),
		}).
		NamespaceLabels(map[string]string{"shepherd.dev/team": fmt.Sprintf("team-%05d", i)}).
		Validation(fmt.Sprintf("!has(object.spec.trainer) || !has(object.spec.trainer.numNodes) || object.spec.trainer.numNodes <= %d", 1000+i),
			fmt.Sprintf("at most %d nodes", 1000+i)).
		Obj()
}

// 10,000 WorkloadPolicies created at once beside a steady load of
// admissions through the apiserver: every admission succeeds meanwhile
// (the replica stays ready: readiness is about the first compile only),
// every policy compiles, the replica's peak RSS stays under the chart's
// memory limit (with the chart's GOMEMLIMIT), and once the policies are
// deleted the heap they took is given back. The time to compile them
// all is logged (README's reliability section).
func TestTenThousandWorkloadPolicies(t *testing.T) {
	t.Setenv("GOMEMLIMIT", strconv.Itoa(memoryLimit*8/10))
	leaseNS := env.Namespace(t)
	p := startProxy(t)
	// pprof's heap endpoint collects garbage on request (gc=1): the heap
	// is read once garbage was collected, and so after the deletes once
	// the deleted policies were, not when the collector next happens to
	// run (a minute or more later: without policies being applied the
	// replica allocates little).
	pprofAddr := cluster.FreeAddr()
	extra := []string{"--pprof-bind-address=" + pprofAddr}
	if v := os.Getenv("SHEPHERD_SCALE_SERVE_ARGS"); v != "" { // e.g. --zap-log-level=info
		extra = append(extra, strings.Fields(v)...)
	}
	t.Logf("the replica serves /debug/pprof at %s", pprofAddr)
	r := env.StartReplica(t, replicaFlags(leaseNS, extra...)...)
	p.waitReady(t, p.add(r))
	ns := env.Namespace(t)
	nsObj := &corev1.Namespace{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: ns}, nsObj); err != nil {
		t.Fatal(err)
	}
	orig := nsObj.DeepCopy()
	nsObj.Labels = map[string]string{"shepherd.dev/team": "team-00000"}
	if err := env.Client.Patch(context.Background(), nsObj, client.MergeFrom(orig)); err != nil {
		t.Fatalf("labelling namespace %s for team 0: %v", ns, err)
	}
	rt := createRuntime(t, r)
	l := startLoad(t, ns, rt, 20)
	collectGarbage(t, pprofAddr)
	heapBefore := gauge(t, scrape(t, r), "go_memstats_heap_inuse_bytes")

	// Readiness, polled throughout.
	var notReady atomic.Int64
	stopProbe := make(chan struct{})
	var probe sync.WaitGroup
	probe.Add(1)
	go func() {
		defer probe.Done()
		for {
			select {
			case <-stopProbe:
				return
			case <-time.After(500 * time.Millisecond):
			}
			resp, err := http.Get(r.Health + "/readyz") //nolint:gosec // local test URL
			if err != nil || resp.StatusCode != http.StatusOK {
				notReady.Add(1)
			}
			if resp != nil {
				resp.Body.Close()
			}
		}
	}()

	start := time.Now()
	ctx := context.Background()
	work := make(chan int)
	var createErrs atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := env.Client.Create(ctx, scalePolicy(i)); err != nil {
					if createErrs.Add(1) == 1 {
						t.Errorf("creating WorkloadPolicy %d: %v", i, err)
					}
				}
			}
		}()
	}
	for i := range scalePolicies {
		work <- i
	}
	close(work)
	wg.Wait()
	created := time.Since(start)
	t.Cleanup(func() { _ = deleteScalePolicies(context.Background()) })
	// A policy not created never compiles: waiting for all of them would
	// only spend the 10 minutes below before failing.
	if n := createErrs.Load(); n > 0 {
		t.Fatalf("%d of %d WorkloadPolicy creates failed (the first is above)", n, scalePolicies)
	}

	var compiled float64
	if err := testkit.Poll(time.Second, 10*time.Minute, func() bool {
		alive(t, "the replica", r)
		compiled = gauge(t, scrape(t, r), `shepherd_workload_policies{ready="true"}`)
		return compiled >= scalePolicies
	}); err != nil {
		t.Fatalf("%v of %d policies compiled within 10 minutes: %v", compiled, scalePolicies, err)
	}
	allCompiled := time.Since(start)
	peak := r.MaxRSS()
	collectGarbage(t, pprofAddr)
	heapPeak := gauge(t, scrape(t, r), "go_memstats_heap_inuse_bytes")
	t.Logf("%d WorkloadPolicies: created in %v, all compiled %v after the first create; peak RSS %d MiB; heap in use %.0f MiB (%.0f before them); %d admissions so far, %d failed; /readyz failed %d times",
		scalePolicies, created.Round(100*time.Millisecond), allCompiled.Round(100*time.Millisecond), peak>>20,
		heapPeak/(1<<20), heapBefore/(1<<20), l.total.Load(), l.failed.Load(), notReady.Load())

	deleteStart := time.Now()
	if err := deleteScalePolicies(ctx); err != nil {
		t.Fatal(err)
	}
	deleted := time.Since(deleteStart)
	var heapAfter float64
	if err := testkit.Poll(time.Second, 5*time.Minute, func() bool {
		collectGarbage(t, pprofAddr)
		m := scrape(t, r)
		heapAfter = gauge(t, m, "go_memstats_heap_inuse_bytes")
		return gauge(t, m, `shepherd_workload_policies{ready="true"}`) == 0 && heapAfter < heapBefore+(heapPeak-heapBefore)/2
	}); err != nil {
		t.Errorf("after deleting the policies the heap in use is %.0f MiB (%.0f MiB before them, %.0f MiB with them): not given back: %v",
			heapAfter/(1<<20), heapBefore/(1<<20), heapPeak/(1<<20), err)
	}
	close(stopProbe)
	probe.Wait()
	l.end()

	total, failed := l.total.Load(), l.failed.Load()
	peak = r.MaxRSS()
	t.Logf("deleted in %v, and forgotten %v after the first delete; peak RSS %d MiB (limit %d MiB, GOMEMLIMIT 80%%); heap in use %.0f → %.0f → %.0f MiB (before, with, after the policies); %d admissions in all, %d failed; /readyz failed %d times",
		deleted.Round(100*time.Millisecond), time.Since(deleteStart).Round(100*time.Millisecond), peak>>20, memoryLimit>>20,
		heapBefore/(1<<20), heapPeak/(1<<20), heapAfter/(1<<20), total, failed, notReady.Load())
	if failed > 0 {
		t.Errorf("%d of %d admissions failed while the policies compiled:%s", failed, total, l.errors())
	}
	if n := notReady.Load(); n > 0 {
		t.Errorf("/readyz failed %d times while the policies compiled: a replica ready once stays ready", n)
	}
	if peak == 0 || peak >= memoryLimit {
		t.Errorf("peak RSS %d MiB, want under the chart's %d MiB limit", peak>>20, memoryLimit>>20)
	}
}

package grove

import (
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/shepherd-k8s/shepherd/api"
	grovev1alpha1 "github.com/shepherd-k8s/shepherd/api/grove/v1alpha1"
	"github.com/shepherd-k8s/shepherd/api/install"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/proc"
)

// BenchmarkGangTermination measures gang termination at scale on the real
// apiserver: SHEPHERD_BENCH_SETS PodCliqueSets (default 300) × 3 cliques × 4
// pods, one pod lost per set at once, terminationDelay 5 s. It reports the lag
// from each set's delay expiry (the breach condition's lastTransitionTime +
// delay, exactly what shepherd computes) to the moment a watch sees the last
// PodClique of that replica deleted — p50 and p99 — the resident memory of
// this process (shepherd's controllers plus the harness's client and watch),
// and the CPU time this process, kube-apiserver and etcd used meanwhile.
// Targets: p99 ≤ 1 s, RSS ≤ 256 MiB. Run once:
//
//	KUBEBUILDER_ASSETS=$(./hack/build-controlplane.sh) go test -run '^$' -bench GangTermination -benchtime=1x ./test/grove/
func BenchmarkGangTermination(b *testing.B) {
	sets := 300
	if v := os.Getenv("SHEPHERD_BENCH_SETS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("SHEPHERD_BENCH_SETS=%q: want a positive integer", v)
		}
		sets = n
	}
	const cliquesPerSet, podsPerClique = 3, 4
	delay := 5 * time.Second
	for range b.N {
		b.StopTimer()
		w := newWorld(b)
		w.timeout = 15 * time.Minute // setup of thousands of objects on 2 cores
		w.startShepherd()

		start := time.Now()
		parallel(b, sets, func(i int) {
			name := fmt.Sprintf("s%03d", i)
			spec := setSpec{name: name, replicas: 1, delay: &delay}
			for c := range cliquesPerSet {
				spec.cliques = append(spec.cliques, cliqueSpec{name: fmt.Sprintf("c%d", c), replicas: podsPerClique, minAvailable: podsPerClique})
			}
			w.createSet(spec)
		})
		var pods corev1.PodList
		if err := w.c.List(w.ctx, &pods, client.InNamespace(w.ns)); err != nil {
			b.Fatal(err)
		}
		parallel(b, len(pods.Items), func(i int) { cluster.SetPodStatus(w.t, w.c, &pods.Items[i], running) })
		w.eventually("every clique available", func() (bool, error) {
			var l shepherdv1alpha1.WorkloadRecordList
			if err := w.c.List(w.ctx, &l, client.InNamespace(w.ns)); err != nil {
				return false, err
			}
			n := 0
			for _, r := range l.Items {
				for _, c := range r.Status.Cliques {
					if c.WasAvailable {
						n++
					}
				}
			}
			return n == sets*cliquesPerSet, nil
		})
		b.Logf("setup: %d sets, %d cliques, %d pods in %s", sets, sets*cliquesPerSet, len(pods.Items), time.Since(start).Round(time.Second))

		lagCount0, lagSum0, lagLE1s0 := lagHistogram(b)
		rec := watchCliques(b, w)
		parallel(b, sets, func(i int) { w.losePod(fmt.Sprintf("s%03d-0-c0", i)) })
		stopProfile := profileAPIServer(b)
		cpu0 := cpuTimes(b)
		b.StartTimer()
		w.eventually("every breached replica terminated", func() (bool, error) { return rec.deletedSets() == sets, nil })
		b.StopTimer()
		cpu := cpuTimes(b)
		stopProfile()

		lags := rec.lags(delay)
		if len(lags) != sets {
			b.Fatalf("measured %d lags, want %d", len(lags), sets)
		}
		slices.Sort(lags)
		p50, p99 := lags[len(lags)*50/100], lags[min(len(lags)-1, len(lags)*99/100)]
		rss, hwm, err := proc.Memory(proc.Self)
		if err != nil {
			b.Fatal(err)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(p50.Milliseconds()), "p50-lag-ms")
		b.ReportMetric(float64(p99.Milliseconds()), "p99-lag-ms")
		b.ReportMetric(float64(lags[len(lags)-1].Milliseconds()), "max-lag-ms")
		// Breach conditions carry second-precision timestamps, so every set
		// that breached in the same second expires at the same instant: the
		// largest such cohort is the burst the p99 measures.
		b.ReportMetric(float64(rec.largestCohort()), "largest-cohort-sets")
		lagCount, lagSum, lagLE1s := lagHistogram(b)
		if n := lagCount - lagCount0; n > 0 {
			b.ReportMetric((lagSum-lagSum0)/float64(n)*1000, "shepherd-mean-lag-ms")
			b.ReportMetric(float64(lagLE1s-lagLE1s0)/float64(n)*100, "shepherd-lag-le1s-%")
		}
		// Where the machine's two cores went between the breaches and the
		// last termination: the apiserver, etcd, and this process (shepherd's
		// controllers and the harness).
		for _, name := range slices.Sorted(maps.Keys(cpu)) {
			b.ReportMetric((cpu[name] - cpu0[name]).Seconds(), name+"-cpu-s")
		}
		b.ReportMetric(rss, "rss-MiB")
		b.ReportMetric(hwm, "peak-rss-MiB")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
		b.Logf("lag p50 %s p99 %s max %s; RSS %.0f MiB (peak %.0f MiB)", p50, p99, lags[len(lags)-1], rss, hwm)
	}
}

// profileAPIServer, when SHEPHERD_APISERVER_PROFILE names a file, records a
// CPU profile of kube-apiserver from now for SHEPHERD_APISERVER_PROFILE_SECONDS
// (default 10: the breaches, then the terminations 5 s later) into it; the
// returned function waits for it. This is how the apiserver's share of a
// termination burst is examined (kube-apiserver serves /debug/pprof to the
// test's admin user):
//
//	go tool pprof -top $SHEPHERD_APISERVER_PROFILE
func profileAPIServer(b *testing.B) (wait func()) {
	b.Helper()
	file := os.Getenv("SHEPHERD_APISERVER_PROFILE")
	if file == "" {
		return func() {}
	}
	secs := "10"
	if v := os.Getenv("SHEPHERD_APISERVER_PROFILE_SECONDS"); v != "" {
		secs = v
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", secs).DoRaw(context.Background())
		if err == nil {
			err = os.WriteFile(file, raw, 0o644)
		}
		done <- err
	}()
	return func() {
		if err := <-done; err != nil {
			b.Errorf("profiling kube-apiserver: %v", err)
		}
	}
}

// parallel runs f(0..n-1) on a few workers.
func parallel(b *testing.B, n int, f func(int)) {
	b.Helper()
	var wg sync.WaitGroup
	// Buffered and filled up front: a worker stopped by a failed check can
	// never leave the producer blocked.
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// recorder remembers, per set, when its clique 0 was last seen breached and
// when each of its cliques was seen deleted.
type cliqueRecorder struct {
	mu      sync.Mutex
	since   map[string]time.Time   // set → breach lastTransitionTime of clique 0
	deleted map[string][]time.Time // set → deletion observations
}

func watchCliques(b *testing.B, w *world) *cliqueRecorder {
	b.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: install.NewScheme()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(w.ctx)
	b.Cleanup(cancel)
	watchFrom := func(rv string) (watch.Interface, error) {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(grovev1alpha1.GroupVersion.WithKind(api.KindPodClique + "List"))
		return wc.Watch(ctx, l, client.InNamespace(w.ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
	}
	watcher, err := watchFrom("")
	if err != nil {
		b.Fatal(err)
	}
	r := &cliqueRecorder{since: map[string]time.Time{}, deleted: map[string][]time.Time{}}
	go func() {
		// The apiserver may end a watch (one that fell behind during the
		// burst, say); it resumes from the last event seen, so no deletion
		// goes unrecorded and the wait for them cannot hang.
		rv := ""
		for {
			for ev := range watcher.ResultChan() {
				now := time.Now()
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					continue
				}
				c, err := grove.CliqueFrom(u)
				if err != nil {
					continue
				}
				rv = c.ResourceVersion
				r.record(ev.Type, &c, now)
			}
			if ctx.Err() != nil {
				return
			}
			for {
				if watcher, err = watchFrom(rv); err == nil {
					break
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}()
	return r
}

func (r *cliqueRecorder) record(t watch.EventType, c *grove.Clique, at time.Time) {
	set := c.Labels[api.LabelPartOf]
	r.mu.Lock()
	defer r.mu.Unlock()
	switch t {
	case watch.Deleted:
		r.deleted[set] = append(r.deleted[set], at)
	case watch.Modified, watch.Added:
		cond := meta.FindStatusCondition(c.Status.Conditions, api.ConditionMinAvailableBreached)
		if strings.HasSuffix(c.Name, "-0-c0") && cond != nil && cond.Status == "True" {
			r.since[set] = cond.LastTransitionTime.Time
		}
	}
}

func (r *cliqueRecorder) deletedSets() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ts := range r.deleted {
		if len(ts) == 3 {
			n++
		}
	}
	return n
}

// largestCohort is the largest number of sets whose breach of clique 0 has
// the same (second-precision) lastTransitionTime.
func (r *cliqueRecorder) largestCohort() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := map[time.Time]int{}
	for _, since := range r.since {
		n[since]++
	}
	return slices.Max(slices.Collect(maps.Values(n)))
}

// lags returns, per set, the time from delay expiry to the last of its
// cliques being seen deleted.
func (r *cliqueRecorder) lags(delay time.Duration) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Duration
	for set, ts := range r.deleted {
		since, ok := r.since[set]
		if !ok {
			continue
		}
		out = append(out, slices.MaxFunc(ts, func(a, b time.Time) int { return a.Compare(b) }).Sub(since.Add(delay)))
	}
	return out
}

// cpuTimes is the CPU time used so far by this process ("test") and by the
// kube-apiserver and etcd it started.
func cpuTimes(b *testing.B) map[string]time.Duration {
	b.Helper()
	pids, err := proc.Children("kube-apiserver", "etcd")
	if err != nil {
		b.Fatal(err)
	}
	pids["test"] = proc.Self
	out := map[string]time.Duration{}
	for name, pid := range pids {
		if out[name], err = proc.CPU(pid); err != nil {
			b.Fatal(err)
		}
	}
	return out
}

// lagHistogram reads shepherd's own shepherd_gang_termination_lag_seconds
// {level="pcs"}: observations, their sum, and how many were at most 1 s.
func lagHistogram(b *testing.B) (count uint64, sum float64, le1s uint64) {
	b.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "shepherd_gang_termination_lag_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabel(m, "level", "pcs") {
				continue
			}
			h := m.GetHistogram()
			for _, bk := range h.GetBucket() {
				if bk.GetUpperBound() == 1 {
					le1s = bk.GetCumulativeCount()
				}
			}
			return h.GetSampleCount(), h.GetSampleSum(), le1s
		}
	}
	return 0, 0, 0
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

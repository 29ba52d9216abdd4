package perf

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/api/install"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/events"
	"github.com/shepherd-k8s/shepherd/integrations/trainer/trainjob"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/proc"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// rss is this process's resident set size now, in MiB (NaN if unreadable).
func rss() float64 {
	v, _, err := proc.Memory(proc.Self)
	if err != nil {
		return math.NaN()
	}
	return v
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// BenchmarkTrainJobDeadline creates SHEPHERD_PERF_JOBS TrainJobs (default
// 5,000) whose deadlines fall evenly over SHEPHERD_PERF_SPREAD_SECONDS
// (default 60) starting SHEPHERD_PERF_LEAD_SECONDS (default 60) after the
// benchmark starts creating them, with shepherd's deadline controller
// running in this process. It reports the lag from each deadline
// (creationTimestamp + activeDeadlineSeconds, the instant shepherd computes)
// to the moment a watch sees Failed=True/DeadlineExceeded — p50, p99, max —
// and the process's peak RSS (VmHWM; the harness's own watch and clients
// are included, the apiserver and etcd are separate processes).
// Targets: p99 ≤ 1 s, RSS ≤ 256 MiB. SHEPHERD_PERF_QPS and
// SHEPHERD_PERF_BURST set shepherd's client rate limit (default 500/1000).
func BenchmarkTrainJobDeadline(b *testing.B) {
	jobs := testkit.EnvInt(b, "SHEPHERD_PERF_JOBS", 5000)
	spread := time.Duration(testkit.EnvInt(b, "SHEPHERD_PERF_SPREAD_SECONDS", 60)) * time.Second
	lead := time.Duration(testkit.EnvInt(b, "SHEPHERD_PERF_LEAD_SECONDS", 60)) * time.Second
	ctrl.SetLogger(logr.Discard())

	// Trainer's upstream CRDs; no Trainer runs, and shepherd is given no
	// Enforcement, so the deadline is shepherd's to enforce.
	c := cluster.Start(b, cluster.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := c.Namespace(b)
	rt := testkit.ClusterTrainingRuntime("perf", "").RuntimeJobs(jobsetv1alpha2.ReplicatedJob{Name: "node", Template: batchv1.JobTemplateSpec{
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "node", Image: "busybox"}},
		}}},
	}}).Obj()
	if err := c.Client.Create(ctx, rt); err != nil {
		b.Fatal(err)
	}
	rssBefore := rss()

	// shepherd's client rate limit: SHEPHERD_PERF_QPS / SHEPHERD_PERF_BURST,
	// default the test cluster's 500 / 1000. Each expiry costs one status
	// patch and one event, so at 5,000 deadlines a minute a limit below
	// ~170 QPS queues writes and shows up directly as lag.
	mgrCfg := rest.CopyConfig(c.Config)
	mgrCfg.QPS = float32(testkit.EnvInt(b, "SHEPHERD_PERF_QPS", int(c.Config.QPS)))
	mgrCfg.Burst = testkit.EnvInt(b, "SHEPHERD_PERF_BURST", c.Config.Burst)
	b.Logf("shepherd client rate limit: %.0f QPS, burst %d", mgrCfg.QPS, mgrCfg.Burst)
	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{
		Scheme:                 install.NewScheme(),
		Metrics:                server.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		b.Fatal(err)
	}
	// Events on their own rate-limited client, as `shepherd serve` sends them.
	if mgr, err = events.Manager(mgr, events.Options{}); err != nil {
		b.Fatal(err)
	}
	if err := trainjob.Setup(mgr, clock.RealClock{}, nil); err != nil {
		b.Fatal(err)
	}
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-mgrDone; err != nil {
			b.Errorf("manager: %v", err)
		}
	}()

	// Observer: the first time each job is seen Failed by its deadline.
	wc, err := client.NewWithWatch(c.Config, client.Options{Scheme: install.NewScheme()})
	if err != nil {
		b.Fatal(err)
	}
	w, err := wc.Watch(ctx, &trainerv1alpha1.TrainJobList{}, client.InNamespace(ns))
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	deadlines := make(map[string]time.Time, jobs)
	seen := make(map[string]time.Time, jobs)
	allSeen := make(chan struct{})
	go func() {
		for ev := range w.ResultChan() {
			now := time.Now()
			if ev.Type != watch.Modified {
				continue
			}
			tj, ok := ev.Object.(*trainerv1alpha1.TrainJob)
			if !ok {
				continue
			}
			c := meta.FindStatusCondition(tj.Status.Conditions, api.TrainJobFailed)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != api.ReasonDeadlineExceeded {
				continue
			}
			mu.Lock()
			if _, dup := seen[tj.Name]; !dup {
				seen[tj.Name] = now
				deadlines[tj.Name] = tj.CreationTimestamp.Add(time.Duration(*tj.Spec.ActiveDeadlineSeconds) * time.Second)
				if len(seen) == jobs {
					close(allSeen)
				}
			}
			mu.Unlock()
		}
	}()
	defer w.Stop()

	// RSS sampler.
	var peakRSS atomic.Uint64
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if v := rss(); v > math.Float64frombits(peakRSS.Load()) {
					peakRSS.Store(math.Float64bits(v))
				}
			}
		}
	}()

	b.Logf("load average at start: %s", loadavg())
	b.ResetTimer()
	start := time.Now()
	windowStart := start.Add(lead)
	var created atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				target := windowStart.Add(time.Duration(int64(spread) * int64(i) / int64(jobs)))
				// The apiserver truncates creationTimestamp to the second, so
				// the deadline shepherd computes is within a second of target.
				ads := int64(math.Ceil(time.Until(target).Seconds()))
				if ads < 1 {
					ads = 1
				}
				tj := &trainerv1alpha1.TrainJob{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("tj-%05d", i)},
					Spec: trainerv1alpha1.TrainJobSpec{
						RuntimeRef:            trainerv1alpha1.RuntimeRef{Name: rt.GetName()},
						ActiveDeadlineSeconds: ptr.To(ads),
					},
				}
				if err := c.Client.Create(ctx, tj); err != nil {
					select {
					case errs <- fmt.Errorf("creating %s: %w", tj.Name, err):
					default:
					}
					return
				}
				created.Add(1)
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	createdIn := time.Since(start)
	b.Logf("created %d TrainJobs in %v (%.0f/s); deadline window opens %v after start",
		created.Load(), createdIn.Round(time.Millisecond), float64(created.Load())/createdIn.Seconds(), lead)
	if createdIn > lead {
		b.Logf("WARNING: creation overran the lead time; early deadlines fell while jobs were still being created")
	}

	select {
	case <-allSeen:
	case <-time.After(time.Until(windowStart.Add(spread + 2*time.Minute))):
	}
	b.StopTimer()
	b.Logf("load average at end: %s (the machine is shared; lag includes CPU contention)", loadavg())

	mu.Lock()
	lags := make([]float64, 0, len(seen))
	for name, at := range seen {
		lags = append(lags, at.Sub(deadlines[name]).Seconds())
	}
	mu.Unlock()
	sort.Float64s(lags)
	missed := jobs - len(lags)
	p50, p99, pmax := quantile(lags, 0.50), quantile(lags, 0.99), quantile(lags, 1)
	_, hwm, err := proc.Memory(proc.Self)
	if err != nil {
		hwm = math.NaN()
	}
	peak := math.Float64frombits(peakRSS.Load())
	b.ReportMetric(float64(jobs), "jobs")
	b.ReportMetric(float64(missed), "missed")
	b.ReportMetric(p50, "p50-lag-s")
	b.ReportMetric(p99, "p99-lag-s")
	b.ReportMetric(pmax, "max-lag-s")
	b.ReportMetric(peak, "peak-rss-MiB")
	b.ReportMetric(hwm, "hwm-rss-MiB")
	b.Logf("jobs %d, failed-by-deadline seen %d, missed %d; lag p50 %.3fs p99 %.3fs max %.3fs (min %.3fs); RSS before manager %.0f MiB, peak sampled %.0f MiB, VmHWM %.0f MiB",
		jobs, len(lags), missed, p50, p99, pmax, quantile(lags, 0), rssBefore, peak, hwm)
	if within, n, ok := decisionLagWithin(1); ok {
		b.ReportMetric(100*within/n, "%decided-within-1s")
		b.Logf("shepherd's own view (shepherd_trainjob_deadline_lag_seconds, deadline to status write start): %.0f of %.0f within 1s", within, n)
	}
	if missed > 0 {
		b.Errorf("%d TrainJobs never seen Failed by their deadline", missed)
	}
}

// decisionLagWithin reads shepherd's own deadline lag histogram — deadline to
// the start of the status write, i.e. without the apiserver write and the
// watch delivery — and returns how many observations fell within le
// seconds (a bucket bound) out of n.
func decisionLagWithin(le float64) (within, n float64, ok bool) {
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		return 0, 0, false
	}
	for _, mf := range mfs {
		if mf.GetName() != "shepherd_trainjob_deadline_lag_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			for _, bk := range h.GetBucket() {
				if bk.GetUpperBound() == le {
					return float64(bk.GetCumulativeCount()), float64(h.GetSampleCount()), true
				}
			}
		}
	}
	return 0, 0, false
}

// loadavg is /proc/loadavg's 1, 5 and 15 minute load averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

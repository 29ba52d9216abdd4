package perf

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/api/install"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/proc"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// BenchmarkAudit (`make bench-audit`) is the background audit at scale:
// AUDIT_TRAINJOBS (10,000) TrainJobs and AUDIT_PODCLIQUESETS (2,000)
// PodCliqueSets stored, ten WorkloadPolicies beside the built-in rules,
// then `shepherd serve` (built from this tree, its own process) started.
// It reports the first full pass (start to figures), a second full pass
// (one policy changed: every object judged again), shepherd's RSS and
// peak RSS, and the latency of dry-run creates through the apiserver and
// shepherd's webhooks, one client, while a pass runs and while none does.
// serve inherits the environment: GOMEMLIMIT=230MiB runs it as the chart
// does under a 256 MiB limit (goMemLimitPercent 90). AUDIT_PPROF=DIR
// serves serve's pprof and writes its heap profile to DIR when it is
// ready, after the first pass and after the second (go tool pprof
// -sample_index=inuse_space DIR/heap-first.pb.gz): where the memory goes.
func BenchmarkAudit(b *testing.B) {
	nTJ := testkit.EnvInt(b, "AUDIT_TRAINJOBS", 10000)
	nPCS := testkit.EnvInt(b, "AUDIT_PODCLIQUESETS", 2000)
	bin := filepath.Join(b.TempDir(), "shepherd")
	build := exec.Command("go", "build", "-o", bin, "./cmd/shepherd")
	build.Dir = cluster.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building shepherd: %v\n%s", err, out)
	}
	c := cluster.Start(b, cluster.Options{Webhooks: envtest.WebhookInstallOptions{
		Paths:            []string{filepath.Join(cluster.RepoRoot(), "deploy", "webhook")},
		LocalServingHost: "127.0.0.1",
	}})
	ctx := context.Background()
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	k, err := client.New(cfg, client.Options{Scheme: install.NewScheme()})
	if err != nil {
		b.Fatal(err)
	}

	// The objects go in without admission (the webhooks are put back
	// before serve starts): seeding 12,000 objects through a webhook
	// would measure the webhook, not the audit.
	var mwc admissionregistrationv1.MutatingWebhookConfigurationList
	var vwc admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := k.List(ctx, &mwc); err != nil {
		b.Fatal(err)
	}
	if err := k.List(ctx, &vwc); err != nil {
		b.Fatal(err)
	}
	for i := range mwc.Items {
		must(b, k.Delete(ctx, &mwc.Items[i]))
	}
	for i := range vwc.Items {
		must(b, k.Delete(ctx, &vwc.Items[i]))
	}

	start := time.Now()
	const namespaces = 20
	for i := range namespaces {
		must(b, k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("audit-%02d", i)}}))
	}
	must(b, k.Create(ctx, testkit.ClusterTrainingRuntime("torch", "torch:2").Obj()))
	parallel(b, k, nTJ+nPCS, 32, func(i int) client.Object {
		ns := fmt.Sprintf("audit-%02d", i%namespaces)
		if i < nTJ {
			// One in ten asks for more nodes than the policies allow,
			// one in seven lacks the team label.
			tj := testkit.TrainJob(ns, fmt.Sprintf("tj-%05d", i), "torch", int64(1+(i%10)/9*7)).Image("torch:2").
				Set(int64(3600+i%5), "spec", "activeDeadlineSeconds")
			if i%7 != 0 {
				tj.Labels("team=ml")
			}
			return tj.Obj()
		}
		return testkit.PodCliqueSet(ns, fmt.Sprintf("pcs-%05d", i), testkit.Clique("worker", int64(1+i%4), "server:v1", map[string]any{"minAvailable": 1})).
			Annotations("shepherd.dev/workload-type=Inference").Obj()
	})
	b.Logf("seeded %d TrainJobs and %d PodCliqueSets in %s", nTJ, nPCS, time.Since(start).Round(time.Second))
	for _, p := range auditPolicies() {
		must(b, k.Create(ctx, obj(b, p)))
	}
	for i := range mwc.Items {
		m := mwc.Items[i].DeepCopy()
		m.ResourceVersion, m.UID = "", ""
		must(b, k.Create(ctx, m))
	}
	for i := range vwc.Items {
		v := vwc.Items[i].DeepCopy()
		v.ResourceVersion, v.UID = "", ""
		must(b, k.Create(ctx, v))
	}

	// serve, the probe of admission latency running from the moment it is
	// ready.
	dir := b.TempDir()
	health := cluster.FreeAddr()
	args, err := c.ServeArgs(dir, health, cluster.FreeAddr(), "--leader-elect=false", "--metrics-secure=false", "--zap-log-level=info")
	if err != nil {
		b.Fatal(err)
	}
	heap := heapProfiles{dir: os.Getenv("AUDIT_PPROF")}
	if heap.dir != "" {
		heap.addr = cluster.FreeAddr()
		args = append(args, "--pprof-bind-address="+heap.addr)
	}
	logPath := filepath.Join(dir, "shepherd.log")
	logf, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	s := &serveProcess{cmd: exec.Command(bin, args...), log: logPath, done: make(chan error, 1)}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	serveStart := time.Now()
	if err := s.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	a := &admissionBench{b: b}
	b.Cleanup(func() { _ = a.stopProcess(s) })
	if err := testkit.Poll(100*time.Millisecond, settle, func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + health + "/readyz") //nolint:gosec // local test URL
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		log, _ := os.ReadFile(logPath)
		b.Fatalf("serve was not ready: %v\n%s", err, log)
	}
	readyAfter := time.Since(serveStart)
	memAt := func(when string) {
		rss, peak, err := proc.Memory(s.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("shepherd RSS %s: %.0f MiB, peak so far %.0f MiB (%s)", when, rss, peak, rssParts(s.cmd.Process.Pid))
		heap.write(b, when)
	}
	memAt("ready")
	probe := startProbe(b, k, "audit-00")
	passes := &passWatch{path: logPath}

	first := passes.wait(b, 1, 5*time.Minute)
	firstDone := time.Now()
	b.Logf("first pass: %+v, %s after serve started (ready after %s)", first, firstDone.Sub(serveStart).Round(time.Millisecond), readyAfter.Round(time.Millisecond))
	memAt("first")
	time.Sleep(15 * time.Second) // idle: no pass runs
	idleFrom, idleTo := firstDone.Add(2*time.Second), time.Now()
	// A changed policy: every object judged again.
	p := &unstructured.Unstructured{}
	p.SetAPIVersion("shepherd.dev/v1alpha1")
	p.SetKind("WorkloadPolicy")
	p.SetName("audit-bench-0")
	must(b, k.Patch(ctx, p, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"validations":[{"expression":"object.spec.trainer.numNodes <= 3","message":"at most 3 nodes","fieldPath":"spec.trainer.numNodes"}]}}`))))
	second := passes.wait(b, 2, 5*time.Minute)
	secondDone := time.Now()
	time.Sleep(2 * time.Second)
	lat := probe.stop()
	memAt("second")
	rss, peak, err := proc.Memory(s.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}

	var during, idle []float64
	for _, l := range lat {
		in := func(from, to time.Time) bool { return !l.at.Before(from) && !l.at.After(to) }
		switch {
		case in(firstDone.Add(-first.took), firstDone) || in(secondDone.Add(-second.took), secondDone):
			during = append(during, l.ms)
		case in(idleFrom, idleTo):
			idle = append(idle, l.ms)
		}
	}
	slices.Sort(during)
	slices.Sort(idle)
	b.Logf("first pass: %d objects, %d violating, %d evaluated in %s; %s from serve start to figures",
		first.Objects, first.Violating, first.Evaluated, first.took.Round(time.Millisecond), firstDone.Sub(serveStart).Round(time.Millisecond))
	b.Logf("second pass (a policy changed): %d evaluated in %s", second.Evaluated, second.took.Round(time.Millisecond))
	b.Logf("shepherd RSS %.0f MiB, peak %.0f MiB", rss, peak)
	b.Logf("admission (dry-run create of a PodCliqueSet, 1 client): idle p50 %.2f ms p99 %.2f ms (n=%d); during a pass p50 %.2f ms p99 %.2f ms (n=%d)",
		quantile(idle, .5), quantile(idle, .99), len(idle), quantile(during, .5), quantile(during, .99), len(during))
	b.Logf("load average at end: %s", loadavg())
	heap.keepLog(b, logPath)
	b.ReportMetric(first.took.Seconds(), "first-pass-s")
	b.ReportMetric(firstDone.Sub(serveStart).Seconds(), "start-to-figures-s")
	b.ReportMetric(second.took.Seconds(), "second-pass-s")
	b.ReportMetric(rss, "shepherd-rss-MiB")
	b.ReportMetric(peak, "shepherd-peak-rss-MiB")
	b.ReportMetric(quantile(idle, .5), "idle-p50-ms")
	b.ReportMetric(quantile(idle, .99), "idle-p99-ms")
	b.ReportMetric(quantile(during, .5), "during-pass-p50-ms")
	b.ReportMetric(quantile(during, .99), "during-pass-p99-ms")
	if want := nTJ + nPCS + 1; first.Objects != want { // + the ClusterTrainingRuntime
		b.Errorf("the first pass covered %d objects, want %d", first.Objects, want)
	}
}

// auditPolicies are ten WorkloadPolicies, five per kind, of the kinds of
// rule admins write: bounds, required labels, names, images.
func auditPolicies() []string {
	tj := []string{
		`object.spec.trainer.numNodes <= 4`,
		`has(object.metadata.labels) && 'team' in object.metadata.labels`,
		`object.metadata.name.startsWith('tj-')`,
		`has(object.spec.activeDeadlineSeconds) && object.spec.activeDeadlineSeconds <= 86400`,
		`!has(object.spec.trainer.image) || !object.spec.trainer.image.endsWith(':latest')`,
	}
	pcs := []string{
		`object.spec.replicas <= 4`,
		`object.spec.template.cliques.all(c, c.spec.replicas <= 3)`,
		`object.spec.template.cliques.all(c, c.spec.podSpec.containers.all(x, !x.image.endsWith(':latest')))`,
		`object.metadata.name.size() < 40`,
		`!has(object.metadata.labels) || !('forbidden' in object.metadata.labels)`,
	}
	var out []string
	for i, e := range append(tj, pcs...) {
		group, kind := "trainer.kubeflow.org", "TrainJob"
		if i >= len(tj) {
			group, kind = "grove.io", "PodCliqueSet"
		}
		out = append(out, fmt.Sprintf(`apiVersion: shepherd.dev/v1alpha1
kind: WorkloadPolicy
metadata: {name: audit-bench-%d}
spec:
  action: Audit
  match: {resources: [{apiGroups: [%s], kinds: [%s]}]}
  validations: [{expression: %q, message: "policy %d"}]
`, i, group, kind, e, i))
	}
	return out
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

func obj(b *testing.B, manifest string) *unstructured.Unstructured {
	b.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		b.Fatalf("%v\n%s", err, manifest)
	}
	return u
}

// parallel creates the n objects mk makes through k with clients
// goroutines.
func parallel(b *testing.B, k client.Client, n, clients int, mk func(i int) client.Object) {
	b.Helper()
	var next, failed atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := k.Create(context.Background(), mk(i)); err != nil {
					failed.Add(1)
					once.Do(func() { first = err })
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d creates failed; the first: %v", f, n, first)
	}
}

// heapProfiles fetches serve's in-use heap profile from its pprof server
// (AUDIT_PPROF); a zero one fetches nothing.
type heapProfiles struct {
	dir, addr string
}

func (h heapProfiles) write(b *testing.B, name string) {
	b.Helper()
	if h.dir == "" {
		return
	}
	// gc=1: the live heap after a collection, not what awaits one.
	resp, err := http.Get("http://" + h.addr + "/debug/pprof/heap?gc=1") //nolint:gosec // local test URL
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(h.dir, "heap-"+name+".pb.gz")
	must(b, os.WriteFile(path, body, 0o644))
	b.Logf("heap profile: %s", path)
}

// rssParts says how much of a process's RSS is its heap and stacks
// (RssAnon) and how much the pages of its binary (RssFile): GOMEMLIMIT
// bounds only the first.
func rssParts(pid int) string {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "RssAnon:") || strings.HasPrefix(l, "RssFile:") {
			parts = append(parts, strings.Join(strings.Fields(l), " "))
		}
	}
	return strings.Join(parts, ", ")
}

// keepLog copies serve's log beside the profiles (with GODEBUG=gctrace=1
// in the environment it says when the heap peaked).
func (h heapProfiles) keepLog(b *testing.B, path string) {
	if h.dir == "" {
		return
	}
	log, err := os.ReadFile(path)
	must(b, err)
	must(b, os.WriteFile(filepath.Join(h.dir, "shepherd.log"), log, 0o644))
}

// passInfo is one "audit pass" log line.
type passInfo struct {
	Objects, Violating, Evaluated int
	Took                          string `json:"took"`
	took                          time.Duration
}

// passWatch reads serve's log for its audit passes.
type passWatch struct {
	path string
}

// wait returns the n-th audit pass that judged at least one object.
func (w *passWatch) wait(b *testing.B, n int, within time.Duration) passInfo {
	b.Helper()
	var found passInfo
	if err := testkit.Poll(100*time.Millisecond, within, func() (bool, error) {
		var seen []passInfo
		f, err := os.Open(w.path)
		if err != nil {
			return false, testkit.Stop(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, `"msg":"audit pass"`) {
				continue
			}
			var p passInfo
			if json.Unmarshal([]byte(line), &p) != nil || p.Evaluated == 0 {
				continue
			}
			p.took, _ = time.ParseDuration(p.Took)
			seen = append(seen, p)
		}
		if len(seen) < n {
			return false, fmt.Errorf("%d passes that judged an object", len(seen))
		}
		found = seen[n-1]
		return true, nil
	}); err != nil {
		b.Fatalf("no audit pass #%d: %v", n, err)
	}
	return found
}

// probe creates PodCliqueSets in dry run, one at a time, and times each.
type probe struct {
	stopped atomic.Bool
	done    chan struct{}
	mu      sync.Mutex
	lats    []latency
}

type latency struct {
	at time.Time // when the create returned
	ms float64
}

func startProbe(b *testing.B, k client.Client, ns string) *probe {
	p := &probe{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for i := 0; !p.stopped.Load(); i++ {
			u := testkit.PodCliqueSet(ns, fmt.Sprintf("probe-%d", i), testkit.Clique("w", 1, "s:v1", nil)).Obj()
			t0 := time.Now()
			err := k.Create(context.Background(), u, client.DryRunAll)
			d := time.Since(t0)
			if err != nil {
				continue
			}
			p.mu.Lock()
			p.lats = append(p.lats, latency{at: time.Now(), ms: float64(d) / float64(time.Millisecond)})
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *probe) stop() []latency {
	p.stopped.Store(true)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lats
}

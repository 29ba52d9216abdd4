package perf

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/proc"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// admissionExample is the object every measured request creates: a
// two-clique Training PodCliqueSet that shepherd admits as written (every
// default is already set, so the mutating webhook answers with no patch and
// each mode judges the same object).
const admissionExample = "examples/valid/podcliqueset-training.yaml"

// probeRule is the one rule the deny probe breaks (a clique's minAvailable
// above its replicas); its policy and binding are created last, so once the
// probe is denied by it the apiserver has every earlier one too.
const probeRule = "V-PCS-4"

// admissionWarmup is how many requests each mode sends, at full
// concurrency, before it is measured: connections, caches, compiled CEL.
const admissionWarmup = 200

// settle bounds every wait for a configuration change to take effect.
const settle = 2 * time.Minute

// BenchmarkAdmission measures what admission costs a PodCliqueSet create
// through a real kube-apiserver, one mode after the other on one control
// plane: `none` (no policy, no webhook), `vap` (shepherd's exported
// ValidatingAdmissionPolicies), `webhook` (`shepherd serve`, built from this
// tree, with the webhook configurations of deploy/webhook), `empty-webhook`
// (an in-test TLS server that allows everything, registered the same way:
// the price of two webhook calls alone) and, when SHEPHERD_BASELINE_BIN
// names another shepherd binary, `webhook-baseline` (the same as `webhook`
// with that binary, to compare two builds in one run). Every request is a
// dry-run create (client.DryRunAll) of examples/valid/podcliqueset-training
// under a fresh name. Each mode warms up, then sends ADMISSION_N requests
// (default 2000) from one client, then from ADMISSION_CLIENTS concurrent
// clients (default 32; goroutines sharing one client, i.e. one HTTP/2
// connection, as a controller does). It reports per mode and concurrency
// the median and p99 latency, creates/s, the overhead over `none` (median
// minus none's median), the kube-apiserver's and shepherd's CPU per create,
// and shepherd serve's RSS at the end of its mode. Any request that is not
// allowed fails the benchmark; timings are never asserted (the machine is
// shared: compare modes within one run, not runs).
func BenchmarkAdmission(b *testing.B) {
	n := envInt(b, "ADMISSION_N", 2000)
	clients := envInt(b, "ADMISSION_CLIENTS", 32)
	baseline := os.Getenv("SHEPHERD_BASELINE_BIN")
	if baseline != "" {
		if st, err := os.Stat(baseline); err != nil || st.IsDir() {
			b.Fatalf("SHEPHERD_BASELINE_BIN=%q: want a shepherd binary (%v)", baseline, err)
		}
	}
	// The binary, not serve in this process: shepherd then has its own
	// runtime and RSS, as deployed, and compares like for like with a
	// baseline binary.
	bin := filepath.Join(b.TempDir(), "shepherd")
	build := exec.Command("go", "build", "-o", bin, "./cmd/shepherd")
	build.Dir = cluster.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building shepherd: %v\n%s", err, out)
	}

	c := cluster.Start(b, cluster.Options{
		WorkloadAPI: cluster.WorkloadAPIV1beta1,
		Webhooks: envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(cluster.RepoRoot(), "deploy", "webhook")},
			LocalServingHost: "127.0.0.1",
		},
	})
	a := newAdmissionBench(b, c, n, clients)
	ctx := context.Background()
	b.Logf("ADMISSION_N=%d ADMISSION_CLIENTS=%d, warm-up %d; load average at start: %s", n, clients, admissionWarmup, loadavg())

	// none: envtest registered shepherd's webhooks at start; nothing serves
	// them yet, so until both are gone every create fails.
	a.removeWebhooks(ctx)
	a.waitFor(ctx, "no webhook and no policy in effect", a.denyProbeAllowed)
	a.measure(ctx, "none", nil)

	// vap: every exported policy and binding, the probe rule's last.
	vaps, bindings := a.exportedPolicies()
	for _, p := range vaps {
		a.create(ctx, p)
	}
	for _, bd := range bindings {
		a.create(ctx, bd)
	}
	a.waitFor(ctx, "the exported policies in effect", a.denyProbeDeniedByPolicy)
	a.measure(ctx, "vap", nil)
	for _, bd := range bindings {
		a.delete(ctx, bd)
	}
	a.waitFor(ctx, "the exported policies out of effect", a.denyProbeAllowed)
	for _, p := range vaps {
		a.delete(ctx, p)
	}

	// webhook: shepherd serve of this tree, its configurations as
	// deploy/webhook has them (pointed at it by envtest).
	s := a.startServe(bin)
	a.setWebhooks(ctx, a.shepherdAddr)
	a.waitFor(ctx, "shepherd's webhooks in effect", a.shepherdAnswers)
	a.measure(ctx, "webhook", s)

	// empty-webhook: the same two configurations pointed at a server that
	// allows everything.
	empty := a.startEmptyWebhook()
	a.setWebhooks(ctx, empty.addr)
	a.waitFor(ctx, "the empty webhooks in effect", empty.answersBoth(a))
	a.stopServe(s)
	before := empty.calls()
	a.measure(ctx, "empty-webhook", nil)
	// Every create of the mode (warm-up, one client, many) reached both
	// webhooks, once each.
	if got, want := empty.calls().sub(before), admissionWarmup+2*n; got.mutate != want || got.validate != want {
		b.Errorf("empty-webhook: %d mutate and %d validate calls for %d creates: want one of each per create", got.mutate, got.validate, want)
	}

	if baseline != "" {
		s := a.startServe(baseline)
		a.setWebhooks(ctx, a.shepherdAddr)
		a.waitFor(ctx, "the baseline's webhooks in effect", a.shepherdAnswers)
		empty.stop()
		a.measure(ctx, "webhook-baseline", s)
		a.stopServe(s)
	} else {
		empty.stop()
	}
	b.Logf("load average at end: %s (the machine is shared: compare modes within one run)", loadavg())
	a.report()
}

// admissionBench is the state of one BenchmarkAdmission run.
type admissionBench struct {
	b       *testing.B
	c       *cluster.Cluster
	ns      string
	n       int
	clients int
	// k is the measured client: no client-side rate limit, its warnings
	// collected.
	k        client.Client
	warnings *cluster.Warnings
	// pcs is the measured object; denyProbe breaks probeRule alone;
	// mutateProbe leaves a default (restartPolicy) to the mutating webhook.
	pcs, denyProbe, mutateProbe *unstructured.Unstructured
	names                       atomic.Int64
	// The webhook configurations as envtest registered them from
	// deploy/webhook, and the host:port they point at.
	mutating     []*admissionregistrationv1.MutatingWebhookConfiguration
	validating   []*admissionregistrationv1.ValidatingWebhookConfiguration
	shepherdAddr string
	apiserverPID int
	results      []admissionResult
}

// admissionResult is one mode at one concurrency.
type admissionResult struct {
	mode          string
	clients       int
	requests      int
	p50, p99      float64 // ms
	rate          float64 // creates/s
	apiserverCPU  float64 // ms of kube-apiserver CPU per create
	shepherdCPU   float64 // ms of shepherd serve CPU per create; NaN without it
	shepherdRSS   float64 // MiB at the end of the mode; NaN without it
	shepherdPeak  float64 // MiB, VmHWM at the end of the mode; NaN without it
	warnings      int
	load          string
	overhead      float64 // ms, p50 minus none's p50 at the same concurrency
	overheadValid bool
}

func newAdmissionBench(b *testing.B, c *cluster.Cluster, n, clients int) *admissionBench {
	a := &admissionBench{b: b, c: c, ns: c.Namespace(b), n: n, clients: clients, warnings: &cluster.Warnings{}}
	cfg := rest.CopyConfig(c.Config)
	// A negative QPS turns client-go's rate limiter off: the benchmark
	// measures the apiserver, not the limiter.
	cfg.QPS, cfg.Burst = -1, 0
	cfg.WarningHandler = a.warnings
	var err error
	if a.k, err = client.New(cfg, client.Options{Scheme: c.Client.Scheme()}); err != nil {
		b.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), admissionExample))
	if err != nil {
		b.Fatal(err)
	}
	// Through JSON into unstructured, so numbers are int64 as the client
	// would send them.
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		b.Fatalf("%s: %v", admissionExample, err)
	}
	a.pcs = &unstructured.Unstructured{}
	if err := a.pcs.UnmarshalJSON(js); err != nil {
		b.Fatalf("%s: %v", admissionExample, err)
	}
	a.pcs.SetNamespace(a.ns)
	cliques, _, err := unstructured.NestedSlice(a.pcs.Object, "spec", "template", "cliques")
	if err != nil || len(cliques) == 0 {
		b.Fatalf("%s: spec.template.cliques: want a list of cliques (%v)", admissionExample, err)
	}
	a.denyProbe = a.withClique0(func(clique map[string]any) {
		replicas, ok, err := unstructured.NestedInt64(clique, "spec", "replicas")
		if !ok || err != nil {
			b.Fatalf("%s: spec.template.cliques[0].spec.replicas: want an integer (%v)", admissionExample, err)
		}
		if err := unstructured.SetNestedField(clique, replicas+1, "spec", "minAvailable"); err != nil {
			b.Fatal(err)
		}
	})
	a.mutateProbe = a.withClique0(func(clique map[string]any) {
		unstructured.RemoveNestedField(clique, "spec", "podSpec", "restartPolicy")
	})

	wh := c.Env.WebhookInstallOptions
	a.mutating, a.validating = wh.MutatingWebhooks, wh.ValidatingWebhooks
	if len(a.mutating) == 0 || len(a.validating) == 0 {
		b.Fatal("deploy/webhook: want a mutating and a validating webhook configuration")
	}
	a.shepherdAddr = net.JoinHostPort(wh.LocalServingHost, fmt.Sprint(wh.LocalServingPort))
	pids, err := proc.Children("kube-apiserver")
	if err != nil || pids["kube-apiserver"] == 0 {
		b.Fatalf("finding the kube-apiserver process: %v", err)
	}
	a.apiserverPID = pids["kube-apiserver"]
	return a
}

// withClique0 is a copy of the measured object with its first clique
// changed by f.
func (a *admissionBench) withClique0(f func(map[string]any)) *unstructured.Unstructured {
	u := a.pcs.DeepCopy()
	cliques, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "cliques")
	clique, ok := cliques[0].(map[string]any)
	if !ok {
		a.b.Fatalf("%s: spec.template.cliques[0] is not an object", admissionExample)
	}
	f(clique)
	if err := unstructured.SetNestedSlice(u.Object, cliques, "spec", "template", "cliques"); err != nil {
		a.b.Fatal(err)
	}
	return u
}

// dryRun creates a copy of u under a fresh name with dryRun=All and returns
// what the apiserver answered.
func (a *admissionBench) dryRun(ctx context.Context, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	obj := u.DeepCopy()
	obj.SetName(fmt.Sprintf("pcs-%07d", a.names.Add(1)))
	err := a.k.Create(ctx, obj, client.DryRunAll)
	return obj, err
}

func (a *admissionBench) exportedPolicies() ([]*admissionregistrationv1.ValidatingAdmissionPolicy, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	schemas, err := celrules.PinnedSchemas()
	if err != nil {
		a.b.Fatal(err)
	}
	chain, err := webhook.NewChain(webhook.ChainOptions{Rules: celrules.Config{Schemas: schemas}})
	if err != nil {
		a.b.Fatal(err)
	}
	vaps, bindings := chain.Engine().Export()
	last := celrules.PolicyName(probeRule, celrules.SourceBuiltin)
	i := slices.IndexFunc(vaps, func(p *admissionregistrationv1.ValidatingAdmissionPolicy) bool { return p.Name == last })
	if i < 0 || len(bindings) != len(vaps) {
		a.b.Fatalf("export: want a policy %s and one binding per policy (%d policies, %d bindings)", last, len(vaps), len(bindings))
	}
	vaps = append(slices.Delete(slices.Clone(vaps), i, i+1), vaps[i])
	bindings = append(slices.Delete(slices.Clone(bindings), i, i+1), bindings[i])
	a.b.Logf("vap: %d exported policies and bindings", len(vaps))
	return vaps, bindings
}

func (a *admissionBench) create(ctx context.Context, obj client.Object) {
	if err := a.c.Client.Create(ctx, obj); err != nil {
		a.b.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func (a *admissionBench) delete(ctx context.Context, obj client.Object) {
	if err := a.c.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		a.b.Fatalf("deleting %T %s: %v", obj, obj.GetName(), err)
	}
}

func (a *admissionBench) removeWebhooks(ctx context.Context) {
	for _, m := range a.mutating {
		a.delete(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: m.Name}})
	}
	for _, v := range a.validating {
		a.delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: v.Name}})
	}
}

// setWebhooks installs deploy/webhook's configurations as envtest rendered
// them, every URL pointed at hostPort: created, or updated in place so no
// request slips through with no webhook.
func (a *admissionBench) setWebhooks(ctx context.Context, hostPort string) {
	retarget := func(cc *admissionregistrationv1.WebhookClientConfig) {
		if cc.URL == nil {
			a.b.Fatalf("deploy/webhook: a webhook without a URL after envtest: %+v", cc)
		}
		u, err := url.Parse(*cc.URL)
		if err != nil {
			a.b.Fatal(err)
		}
		u.Host = hostPort
		s := u.String()
		cc.URL = &s
	}
	for _, m := range a.mutating {
		want := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Labels: m.Labels}}
		want.Webhooks = slices.Clone(m.DeepCopy().Webhooks)
		for i := range want.Webhooks {
			retarget(&want.Webhooks[i].ClientConfig)
		}
		a.put(ctx, want, &admissionregistrationv1.MutatingWebhookConfiguration{})
	}
	for _, v := range a.validating {
		want := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: v.Name, Labels: v.Labels}}
		want.Webhooks = slices.Clone(v.DeepCopy().Webhooks)
		for i := range want.Webhooks {
			retarget(&want.Webhooks[i].ClientConfig)
		}
		a.put(ctx, want, &admissionregistrationv1.ValidatingWebhookConfiguration{})
	}
}

// put creates want, or replaces the live object of its name (read into
// live) with it.
func (a *admissionBench) put(ctx context.Context, want, live client.Object) {
	err := a.c.Client.Get(ctx, client.ObjectKeyFromObject(want), live)
	switch {
	case apierrors.IsNotFound(err):
		a.create(ctx, want)
	case err != nil:
		a.b.Fatal(err)
	default:
		want.SetResourceVersion(live.GetResourceVersion())
		if err := a.c.Client.Update(ctx, want); err != nil {
			a.b.Fatalf("updating %T %s: %v", want, want.GetName(), err)
		}
	}
}

// waitFor polls cond until it holds, failing the benchmark with cond's last
// observation after settle.
func (a *admissionBench) waitFor(ctx context.Context, what string, cond func(context.Context) error) {
	a.b.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, settle, true, func(ctx context.Context) (bool, error) {
		last = cond(ctx)
		return last == nil, nil
	})
	if err != nil {
		a.b.Fatalf("waiting for %s: %v (last: %v)", what, err, last)
	}
	a.warnings.Take()
}

func (a *admissionBench) denyProbeAllowed(ctx context.Context) error {
	_, err := a.dryRun(ctx, a.denyProbe)
	return err
}

func (a *admissionBench) denyProbeDeniedByPolicy(ctx context.Context) error {
	_, err := a.dryRun(ctx, a.denyProbe)
	want := fmt.Sprintf("ValidatingAdmissionPolicy '%s'", celrules.PolicyName(probeRule, celrules.SourceBuiltin))
	if err == nil || !strings.Contains(err.Error(), want) {
		return fmt.Errorf("the deny probe (%s) answered %v, want a denial by %s", probeRule, err, want)
	}
	return nil
}

// shepherdAnswers holds when shepherd's validating webhook denies the deny
// probe and its mutating webhook defaults the mutate probe.
func (a *admissionBench) shepherdAnswers(ctx context.Context) error {
	_, err := a.dryRun(ctx, a.denyProbe)
	want := fmt.Sprintf("admission webhook %q denied the request", a.validating[0].Webhooks[0].Name)
	if err == nil || !strings.Contains(err.Error(), want) {
		return fmt.Errorf("the deny probe (%s) answered %v, want %q", probeRule, err, want)
	}
	got, err := a.dryRun(ctx, a.mutateProbe)
	if err != nil {
		return fmt.Errorf("the mutate probe: %w", err)
	}
	cliques, _, _ := unstructured.NestedSlice(got.Object, "spec", "template", "cliques")
	var policy string
	if len(cliques) > 0 {
		if clique, ok := cliques[0].(map[string]any); ok {
			policy, _, _ = unstructured.NestedString(clique, "spec", "podSpec", "restartPolicy")
		}
	}
	if policy != "Never" {
		return fmt.Errorf("the mutate probe came back with restartPolicy %q, want shepherd's default Never", policy)
	}
	return nil
}

// measure warms mode up, then sends n creates from one client and n from
// a.clients, and records both; s is the shepherd serve the mode runs, if
// any.
func (a *admissionBench) measure(ctx context.Context, mode string, s *serveProcess) {
	a.b.Helper()
	a.b.Logf("%s: warming up", mode)
	a.run(ctx, mode+" warm-up", admissionWarmup, a.clients)
	a.warnings.Take()
	for _, cl := range []int{1, a.clients} {
		load := loadavg()
		api0 := a.cpu(a.apiserverPID)
		sh0 := math.NaN()
		if s != nil {
			sh0 = a.cpu(s.cmd.Process.Pid)
		}
		lat, wall := a.run(ctx, mode, a.n, cl)
		r := admissionResult{
			mode: mode, clients: cl, requests: a.n,
			p50: quantile(lat, 0.5), p99: quantile(lat, 0.99),
			rate:         float64(a.n) / wall.Seconds(),
			apiserverCPU: (a.cpu(a.apiserverPID) - api0) / float64(a.n),
			shepherdCPU:  math.NaN(), shepherdRSS: math.NaN(), shepherdPeak: math.NaN(),
			warnings: len(a.warnings.Take()),
			load:     load,
		}
		if s != nil {
			r.shepherdCPU = (a.cpu(s.cmd.Process.Pid) - sh0) / float64(a.n)
			var err error
			if r.shepherdRSS, r.shepherdPeak, err = proc.Memory(s.cmd.Process.Pid); err != nil {
				a.b.Fatalf("reading shepherd serve's memory: %v", err)
			}
		}
		a.results = append(a.results, r)
		a.b.Logf("%s, %d client(s): p50 %.2f ms, p99 %.2f ms, %.0f creates/s", mode, cl, r.p50, r.p99, r.rate)
	}
}

// cpu is a process's CPU time so far, in ms.
func (a *admissionBench) cpu(pid int) float64 {
	d, err := proc.CPU(pid)
	if err != nil {
		a.b.Fatalf("reading the CPU time of pid %d: %v", pid, err)
	}
	return float64(d) / float64(time.Millisecond)
}

// run sends total dry-run creates of the measured object from clients
// goroutines and returns their sorted latencies in ms and the wall time.
// Any create that is not allowed fails the benchmark.
func (a *admissionBench) run(ctx context.Context, what string, total, clients int) ([]float64, time.Duration) {
	var (
		next   atomic.Int64
		failed atomic.Int64
		first  sync.Once
		ferr   error
		wg     sync.WaitGroup
		lats   = make([][]float64, clients)
	)
	start := time.Now()
	for g := range clients {
		wg.Go(func() {
			mine := make([]float64, 0, total/clients+1)
			for next.Add(1) <= int64(total) {
				t0 := time.Now()
				_, err := a.dryRun(ctx, a.pcs)
				d := time.Since(t0)
				if err != nil {
					failed.Add(1)
					first.Do(func() { ferr = err })
					continue
				}
				mine = append(mine, float64(d)/float64(time.Millisecond))
			}
			lats[g] = mine
		})
	}
	wg.Wait()
	wall := time.Since(start)
	if f := failed.Load(); f > 0 {
		a.b.Fatalf("%s: %d of %d creates of %s not allowed; the first: %v", what, f, total, admissionExample, ferr)
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	return all, wall
}

// report prints the table and reports every figure with b.ReportMetric.
func (a *admissionBench) report() {
	none := map[int]float64{}
	for _, r := range a.results {
		if r.mode == "none" {
			none[r.clients] = r.p50
		}
	}
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tclients\tcreates\tp50 ms\tp99 ms\tcreates/s\toverhead ms\tapiserver CPU ms/create\tshepherd CPU ms/create\tshepherd RSS MiB (peak)\twarnings\tload avg\t")
	for i := range a.results {
		r := &a.results[i]
		if base, ok := none[r.clients]; ok {
			r.overhead, r.overheadValid = r.p50-base, true
		}
		shCPU, shRSS := "-", "-"
		if !math.IsNaN(r.shepherdCPU) {
			shCPU = fmt.Sprintf("%.3f", r.shepherdCPU)
			shRSS = fmt.Sprintf("%.0f (%.0f)", r.shepherdRSS, r.shepherdPeak)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.2f\t%.0f\t%+.2f\t%.3f\t%s\t%s\t%d\t%s\t\n",
			r.mode, r.clients, r.requests, r.p50, r.p99, r.rate, r.overhead, r.apiserverCPU, shCPU, shRSS, r.warnings, r.load)

		key := fmt.Sprintf("%s-c%d-", r.mode, r.clients)
		a.b.ReportMetric(r.p50, key+"p50-ms")
		a.b.ReportMetric(r.p99, key+"p99-ms")
		a.b.ReportMetric(r.rate, key+"creates/s")
		a.b.ReportMetric(r.overhead, key+"overhead-ms")
		a.b.ReportMetric(r.apiserverCPU, key+"apiserver-cpu-ms/create")
		if !math.IsNaN(r.shepherdCPU) {
			a.b.ReportMetric(r.shepherdCPU, key+"shepherd-cpu-ms/create")
			a.b.ReportMetric(r.shepherdRSS, key+"shepherd-rss-MiB")
			a.b.ReportMetric(r.shepherdPeak, key+"shepherd-peak-rss-MiB")
		}
	}
	_ = tw.Flush()
	fmt.Printf("\nBenchmarkAdmission: dry-run creates of %s through kube-apiserver %s (overhead = p50 - none's p50 at the same concurrency; load avg = 1/5/15 min at the start of the row)\n%s\n",
		admissionExample, cluster.K8sVersion, sb.String())
}

// serveProcess is a `shepherd serve` binary running against the cluster.
type serveProcess struct {
	cmd  *exec.Cmd
	log  string
	done chan error
}

// flagsKnownTo drops the flags bin's `serve --help` does not list: the
// baseline may be an older build than the harness's ServeArgs.
func (a *admissionBench) flagsKnownTo(bin string, args []string) []string {
	a.b.Helper()
	help, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		a.b.Fatalf("%s serve --help: %v\n%s", bin, err, help)
	}
	out := args[:0:0]
	for _, arg := range args {
		name, _, _ := strings.Cut(arg, "=")
		if strings.HasPrefix(name, "--") && !strings.Contains(string(help), name+" ") {
			a.b.Logf("%s does not know %s: left out", bin, name)
			continue
		}
		out = append(out, arg)
	}
	return out
}

// startServe runs bin as `shepherd serve` on the port envtest registered the
// webhooks for, with its certificate, and waits until /readyz answers 200.
// Leader election and the reconcilers are off: only admission is measured.
func (a *admissionBench) startServe(bin string) *serveProcess {
	a.b.Helper()
	dir := a.b.TempDir()
	health := cluster.FreeAddr()
	args, err := a.c.ServeArgs(dir, health, cluster.FreeAddr(), "--leader-elect=false", "--disable-reconcilers")
	if err != nil {
		a.b.Fatal(err)
	}
	args = a.flagsKnownTo(bin, args)
	s := &serveProcess{cmd: exec.Command(bin, args...), log: filepath.Join(dir, "shepherd.log"), done: make(chan error, 1)}
	logf, err := os.Create(s.log)
	if err != nil {
		a.b.Fatal(err)
	}
	defer logf.Close()
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		a.b.Fatalf("starting %s serve: %v", bin, err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	a.b.Cleanup(func() { _ = a.stopProcess(s) })
	ready := func(context.Context) error {
		select {
		case err := <-s.done:
			s.done <- err
			return fmt.Errorf("%s serve exited: %v", bin, err)
		default:
		}
		resp, err := http.Get("http://" + health + "/readyz") //nolint:gosec // local test URL
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	}
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, settle, true, func(ctx context.Context) (bool, error) {
		last = ready(ctx)
		return last == nil, nil
	}); err != nil {
		log, _ := os.ReadFile(s.log)
		a.b.Fatalf("%s serve was not ready: %v (last: %v)\n%s", bin, err, last, log)
	}
	return s
}

func (a *admissionBench) stopServe(s *serveProcess) {
	if err := a.stopProcess(s); err != nil {
		log, _ := os.ReadFile(s.log)
		a.b.Errorf("stopping shepherd serve: %v\n%s", err, log)
	}
}

// stopProcess interrupts s and waits for it to exit (killing it after a
// minute); stopping an exited process is a no-op.
func (a *admissionBench) stopProcess(s *serveProcess) error {
	select {
	case err := <-s.done:
		s.done <- err
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-s.done:
		s.done <- err
		var exit *exec.ExitError
		if errors.As(err, &exit) && !exit.Exited() {
			return nil // ended by the signal
		}
		return err
	case <-time.After(time.Minute):
		_ = s.cmd.Process.Kill()
		return fmt.Errorf("shepherd serve did not exit within a minute of SIGINT; killed")
	}
}

// emptyWebhook is a TLS admission webhook server that allows every request
// unchanged, on envtest's serving certificate: the cost of a webhook call
// with no work behind it. Like shepherd it speaks HTTP/1.1 only.
type emptyWebhook struct {
	addr             string
	srv              *http.Server
	mutate, validate atomic.Int64
}

type webhookCalls struct{ mutate, validate int }

func (c webhookCalls) sub(o webhookCalls) webhookCalls {
	return webhookCalls{c.mutate - o.mutate, c.validate - o.validate}
}

func (e *emptyWebhook) calls() webhookCalls {
	return webhookCalls{int(e.mutate.Load()), int(e.validate.Load())}
}

func (a *admissionBench) startEmptyWebhook() *emptyWebhook {
	dir := a.c.Env.WebhookInstallOptions.LocalServingCertDir
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		a.b.Fatalf("envtest's serving certificate: %v", err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	if err != nil {
		a.b.Fatal(err)
	}
	e := &emptyWebhook{addr: l.Addr().String()}
	e.srv = &http.Server{Handler: http.HandlerFunc(e.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.srv.Serve(l) }()
	a.b.Cleanup(e.stop)
	return e
}

func (e *emptyWebhook) stop() { _ = e.srv.Close() }

func (e *emptyWebhook) serveHTTP(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("want an AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	switch path.Base(r.URL.Path) {
	case "mutate":
		e.mutate.Add(1)
	case "validate":
		e.validate.Add(1)
	}
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// answersBoth holds when one create reaches both of e's webhooks.
func (e *emptyWebhook) answersBoth(a *admissionBench) func(context.Context) error {
	return func(ctx context.Context) error {
		before := e.calls()
		if _, err := a.dryRun(ctx, a.pcs); err != nil {
			return err
		}
		if got := e.calls().sub(before); got.mutate != 1 || got.validate != 1 {
			return fmt.Errorf("one create reached the empty webhook's /mutate %d and /validate %d times, want once each", got.mutate, got.validate)
		}
		return nil
	}
}

package perf

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/proc"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// admissionKinds are the measured objects: each is admitted as written in
// every mode (the defaults shepherd would set on the PodCliqueSet are
// already there), so every mode judges the same object.
var admissionKinds = []struct{ name, file string }{
	{"TrainJob", "examples/valid/trainjob.yaml"},
	{"PodCliqueSet", "examples/valid/podcliqueset-training.yaml"},
	{"JobSet", "examples/valid/jobset.yaml"},
}

// admissionRuntime is the ClusterTrainingRuntime the TrainJob refers to:
// created once, before any measurement (V-TJ-3 looks it up).
const admissionRuntime = "examples/valid/clustertrainingruntime.yaml"

// probeRule is the one rule the deny probe (a PodCliqueSet whose first
// clique's minAvailable is above its replicas) breaks; probeDefault is the
// default the mutate probe (the same PodCliqueSet without the clique's
// restartPolicy) gets, from shepherd's mutating webhook or from its
// MutatingAdmissionPolicy. Their policies and bindings are created last
// and deleted last, so once the probes see them the apiserver has every
// other one too (one watch per resource delivers changes in order).
const (
	probeRule    = "V-PCS-4"
	probeDefault = "D-PCS-3"
)

// settle bounds every wait for a configuration change to take effect.
const settle = 2 * time.Minute

// BenchmarkAdmission measures what admission adds to a create through a
// real kube-apiserver, for each admission mode, on one control plane:
//
//   - none: no policy, no webhook.
//   - vap: deploy/native's ValidatingAdmissionPolicies and
//     MutatingAdmissionPolicies (what `shepherd export vap --audit` and
//     `shepherd export map` generate), no webhook.
//   - empty-webhook: deploy/webhook's two configurations pointed at a TLS
//     server that decodes each review and allows it, in a process of its
//     own (this binary again): the floor of the webhook hop (the
//     apiserver's calls, TLS, JSON) with no work behind it.
//   - webhook: `shepherd serve` built from this tree behind deploy/webhook's
//     configurations.
//   - webhook-baseline, when SHEPHERD_BASELINE_BIN names another shepherd
//     binary: the same with that binary, to compare two builds in one run.
//   - native: `shepherd serve --admission-mode=native` with deploy/native's
//     policies and narrowed webhook configurations (the audit sink is left
//     unconfigured: recording verdicts happens after admission).
//
// Every webhook configuration also carries the UPDATE matchCondition serve
// keeps in it by default (--skip-unread-updates): a create evaluates it too.
//
// The modes are measured in ADMISSION_ROUNDS rounds (default 3), each
// visiting every mode in turn, in reverse order every other round, so
// that a drift of the shared machine weighs on every mode alike. Each
// visit switches the configuration (and starts that mode's serve, stopping
// the previous one: one shepherd runs at a time, as in a cluster, and only
// that one's informers see the stored creates) and
// waits until probes show it in effect: the deny and mutate probes
// answered as the mode must, and one create of each kind reaching exactly
// the webhooks it must (counted by the empty webhook and by serve's
// shepherd_admission_requests_total). Then, for each kind of
// ADMISSION_KINDS (default TrainJob,PodCliqueSet,JobSet; the TrainJob's
// ClusterTrainingRuntime is created once beforehand), it warms up with
// ADMISSION_WARMUP dry-run creates at full concurrency (default 200) and
// sends ADMISSION_N creates (default 500) under fresh names from one
// client, then from ADMISSION_CLIENTS concurrent clients (default 32;
// goroutines sharing one client, i.e. one HTTP/2 connection, as a
// controller does): dry runs (client.DryRunAll), then, unless
// ADMISSION_STORED=false, stored creates. The stored objects are deleted
// (DeleteAllOf, not timed) after each measurement; no controller runs, so
// until then they only sit in etcd.
//
// A cell is (mode, kind, dry-run or stored, clients). Its latencies are
// pooled over the rounds: every round adds the same N, so each weighs
// alike, and the p99 rests on R×N samples rather than N (the per-round
// medians are printed beside it, to show the drift). creates/s is all the
// cell's creates over all its wall time. Per cell the benchmark reports
// p50, p99, creates/s, the overhead over none (p50 minus none's p50 in the
// same kind, operation and concurrency), the CPU per create of
// kube-apiserver, etcd and shepherd serve, and serve's RSS; then the
// issue's ratios: webhook overhead / empty-webhook overhead (target ≤ 1.1),
// native overhead / vap overhead (≤ 1.2), both at one client, and each
// mode's rate at ADMISSION_CLIENTS over none's (≥ 0.9). Any create that is
// not allowed fails the benchmark; timings and targets are reported, never
// asserted (the machine is shared: compare modes within one run).
//
// At the defaults a run is 3 rounds × 5 modes × 3 kinds × 2 operations × 2
// concurrencies = 180 cells of 500 creates, plus the warm-ups: about a
// quarter of an hour on a 2-core VM. ADMISSION_MODES (comma-separated; none
// is always measured) narrows the modes, for a quick look at one.
func BenchmarkAdmission(b *testing.B) {
	cfg := admissionConfigFromEnv(b)
	// The binary, not serve in this process: shepherd then has its own
	// runtime, CPU and RSS, as deployed, and compares like for like with a
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
	a := newAdmissionBench(b, c, cfg)
	ctx := context.Background()
	start := time.Now()
	b.Logf("ADMISSION_N=%d ADMISSION_CLIENTS=%d ADMISSION_ROUNDS=%d ADMISSION_WARMUP=%d ADMISSION_STORED=%t kinds %v, modes %v; load average at start: %s",
		cfg.n, cfg.clients, cfg.rounds, cfg.warmup, cfg.stored, a.kindNames(), cfg.modes, loadavg())

	a.setUp(ctx, bin)
	modes := a.modes(bin)
	for round := range cfg.rounds {
		order := slices.Clone(modes)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, m := range order {
			a.enter(ctx, m)
			a.measureMode(ctx, round, m)
		}
	}
	a.leave()
	b.Logf("load average at end: %s; %s in all (the machine is shared: compare modes within one run)", loadavg(), time.Since(start).Round(time.Second))
	a.report()
}

// admissionConfig is the benchmark's size, from the environment.
type admissionConfig struct {
	n, clients, rounds, warmup int
	stored                     bool
	kinds, modes               []string
	baseline                   string
}

// The modes, in the order a round visits them: the ones with policies last
// and next to each other, so that the policies go on and off once per two
// rounds.
const (
	modeNone     = "none"
	modeEmpty    = "empty-webhook"
	modeWebhook  = "webhook"
	modeBaseline = "webhook-baseline"
	modeNative   = "native"
	modeVAP      = "vap"
)

var admissionModeOrder = []string{modeNone, modeEmpty, modeWebhook, modeBaseline, modeNative, modeVAP}

func admissionConfigFromEnv(b *testing.B) admissionConfig {
	cfg := admissionConfig{
		n:        testkit.EnvInt(b, "ADMISSION_N", 500),
		clients:  testkit.EnvInt(b, "ADMISSION_CLIENTS", 32),
		rounds:   testkit.EnvInt(b, "ADMISSION_ROUNDS", 3),
		warmup:   testkit.EnvInt(b, "ADMISSION_WARMUP", 200),
		stored:   true,
		baseline: os.Getenv("SHEPHERD_BASELINE_BIN"),
	}
	if v := os.Getenv("ADMISSION_STORED"); v != "" {
		s, err := strconv.ParseBool(v)
		if err != nil {
			b.Fatalf("ADMISSION_STORED=%q: want true or false", v)
		}
		cfg.stored = s
	}
	if cfg.baseline != "" {
		if st, err := os.Stat(cfg.baseline); err != nil || st.IsDir() {
			b.Fatalf("SHEPHERD_BASELINE_BIN=%q: want a shepherd binary (%v)", cfg.baseline, err)
		}
	}
	for _, k := range admissionKinds {
		cfg.kinds = append(cfg.kinds, k.name)
	}
	if v := os.Getenv("ADMISSION_KINDS"); v != "" {
		cfg.kinds = nil
		for _, name := range strings.Split(v, ",") {
			i := slices.IndexFunc(admissionKinds, func(k struct{ name, file string }) bool {
				return strings.EqualFold(k.name, strings.TrimSpace(name))
			})
			if i < 0 {
				b.Fatalf("ADMISSION_KINDS=%q: %q is none of TrainJob, PodCliqueSet, JobSet", v, name)
			}
			if !slices.Contains(cfg.kinds, admissionKinds[i].name) {
				cfg.kinds = append(cfg.kinds, admissionKinds[i].name)
			}
		}
	}
	want := map[string]bool{}
	if v := os.Getenv("ADMISSION_MODES"); v != "" {
		for _, m := range strings.Split(v, ",") {
			m = strings.TrimSpace(m)
			if !slices.Contains(admissionModeOrder, m) {
				b.Fatalf("ADMISSION_MODES=%q: %q is none of %v", v, m, admissionModeOrder)
			}
			want[m] = true
		}
	}
	for _, m := range admissionModeOrder {
		switch {
		case m == modeNone: // every overhead is over it
		case m == modeBaseline && cfg.baseline == "":
			continue
		case len(want) > 0 && !want[m]:
			continue
		}
		cfg.modes = append(cfg.modes, m)
	}
	return cfg
}

// admissionBench is the state of one BenchmarkAdmission run.
type admissionBench struct {
	b   *testing.B
	c   *cluster.Cluster
	cfg admissionConfig
	ns  string
	// k is the measured client: no client-side rate limit, its warnings
	// collected.
	k        client.Client
	warnings *cluster.Warnings
	kinds    []*admissionKind
	// pcs is the PodCliqueSet the probes are made of; denyProbe breaks
	// probeRule alone; mutateProbe leaves probeDefault's restartPolicy
	// unset.
	pcs, denyProbe, mutateProbe *unstructured.Unstructured
	names                       atomic.Int64
	// webhookSet is deploy/webhook's configurations, nativeSet
	// deploy/native's; policies deploy/native's admission policies.
	webhookSet, nativeSet *webhookSet
	policies              *policySet
	empty                 *emptyWebhook
	apiserverPID, etcdPID int
	// The configuration in effect now, and the serve running (nil: none).
	state admissionState
	serve *serveProcess
	cells map[admissionCellKey]*admissionCell
}

// admissionKind is one measured kind and its object.
type admissionKind struct {
	name string
	file string
	obj  *unstructured.Unstructured
}

func newAdmissionBench(b *testing.B, c *cluster.Cluster, cfg admissionConfig) *admissionBench {
	a := &admissionBench{b: b, c: c, cfg: cfg, ns: c.Namespace(b), warnings: &cluster.Warnings{}, cells: map[admissionCellKey]*admissionCell{}}
	rc := rest.CopyConfig(c.Config)
	// A negative QPS turns client-go's rate limiter off: the benchmark
	// measures the apiserver, not the limiter.
	rc.QPS, rc.Burst = -1, 0
	rc.WarningHandler = a.warnings
	var err error
	if a.k, err = client.New(rc, client.Options{Scheme: c.Client.Scheme()}); err != nil {
		b.Fatal(err)
	}
	for _, k := range admissionKinds {
		obj := readAdmissionObject(b, k.file)
		obj.SetNamespace(a.ns)
		if k.name == "PodCliqueSet" {
			a.pcs = obj
		}
		if slices.Contains(cfg.kinds, k.name) {
			a.kinds = append(a.kinds, &admissionKind{name: k.name, file: k.file, obj: obj})
		}
	}
	cliques, _, err := unstructured.NestedSlice(a.pcs.Object, "spec", "template", "cliques")
	if err != nil || len(cliques) == 0 {
		b.Fatalf("PodCliqueSet: spec.template.cliques: want a list of cliques (%v)", err)
	}
	a.denyProbe = a.withClique0(func(clique map[string]any) {
		replicas, ok, err := unstructured.NestedInt64(clique, "spec", "replicas")
		if !ok || err != nil {
			b.Fatalf("PodCliqueSet: spec.template.cliques[0].spec.replicas: want an integer (%v)", err)
		}
		if err := unstructured.SetNestedField(clique, replicas+1, "spec", "minAvailable"); err != nil {
			b.Fatal(err)
		}
	})
	a.mutateProbe = a.withClique0(func(clique map[string]any) {
		unstructured.RemoveNestedField(clique, "spec", "podSpec", "restartPolicy")
	})

	pids, err := proc.Children("kube-apiserver", "etcd")
	if err != nil || pids["kube-apiserver"] == 0 || pids["etcd"] == 0 {
		b.Fatalf("finding the kube-apiserver and etcd processes: %v (found %v)", err, pids)
	}
	a.apiserverPID, a.etcdPID = pids["kube-apiserver"], pids["etcd"]
	return a
}

func readAdmissionObject(b *testing.B, file string) *unstructured.Unstructured {
	raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), file))
	if err != nil {
		b.Fatal(err)
	}
	// Through JSON into unstructured, so numbers are int64 as the client
	// would send them.
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		b.Fatalf("%s: %v", file, err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		b.Fatalf("%s: %v", file, err)
	}
	return u
}

func (a *admissionBench) kindNames() []string {
	var out []string
	for _, k := range a.kinds {
		out = append(out, k.name)
	}
	return out
}

// withClique0 is a copy of the probe PodCliqueSet with its first clique
// changed by f.
func (a *admissionBench) withClique0(f func(map[string]any)) *unstructured.Unstructured {
	u := a.pcs.DeepCopy()
	cliques, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "cliques")
	clique, ok := cliques[0].(map[string]any)
	if !ok {
		a.b.Fatal("PodCliqueSet: spec.template.cliques[0] is not an object")
	}
	f(clique)
	if err := unstructured.SetNestedSlice(u.Object, cliques, "spec", "template", "cliques"); err != nil {
		a.b.Fatal(err)
	}
	return u
}

// setUp reads the configurations and policies of the modes, learns the
// UPDATE matchCondition serve keeps in its webhooks, creates the
// TrainJob's runtime and starts the empty webhook. It leaves the cluster
// in the webhook mode, with serve running.
func (a *admissionBench) setUp(ctx context.Context, bin string) {
	a.webhookSet, a.nativeSet, a.policies = a.readConfigurations()
	// serve on the port envtest registered deploy/webhook's configurations
	// for: its leader adds the UPDATE matchCondition to them, and every
	// configuration the benchmark installs carries the same one.
	port := a.c.Env.WebhookInstallOptions.LocalServingPort
	a.serve = a.startServe(modeWebhook, bin, port) // set first: a failed wait prints its log
	cond := a.updateMatchCondition(ctx)
	a.webhookSet.addCondition(cond)
	a.nativeSet.addCondition(cond)
	s := a.serve
	a.state = admissionState{hooks: a.webhookSet, server: s}

	runtime := readAdmissionObject(a.b, admissionRuntime)
	a.waitFor(ctx, "the TrainJob's ClusterTrainingRuntime created", func(ctx context.Context) error {
		err := a.c.Client.Create(ctx, runtime.DeepCopy())
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	a.empty = a.startEmptyWebhook()
}

// updateMatchCondition waits until serve's leader has put the UPDATE
// matchCondition into every webhook of deploy/webhook's configurations and
// returns it; nil when the rules want every UPDATE (no condition).
func (a *admissionBench) updateMatchCondition(ctx context.Context) *admissionregistrationv1.MatchCondition {
	schemas, err := celrules.PinnedSchemas()
	if err != nil {
		a.b.Fatal(err)
	}
	chain, err := webhook.NewChain(webhook.ChainOptions{Rules: celrules.Config{Schemas: schemas}})
	if err != nil {
		a.b.Fatal(err)
	}
	if _, ok := chain.Engine().UpdateReads().UpdateMatchCondition(); !ok {
		a.b.Log("the built-in rules read the whole object: serve keeps no UPDATE matchCondition")
		return nil
	}
	var cond *admissionregistrationv1.MatchCondition
	a.waitFor(ctx, "serve's UPDATE matchCondition in deploy/webhook's configurations", func(ctx context.Context) error {
		var err error
		cond, err = a.liveUpdateCondition(ctx, a.webhookSet)
		return err
	})
	return cond
}

// admissionState is a configuration of the cluster: the policies on or
// off, which webhook configurations are installed (nil: none) and the
// server they point at.
type admissionState struct {
	policies bool
	hooks    *webhookSet
	server   admissionServer
}

// admissionServer is what the webhook configurations can point at: the
// empty webhook or a shepherd serve.
type admissionServer interface {
	name() string
	addr() string
	// shepherd reports whether it runs shepherd's chain (it denies the
	// deny probe and defaults the mutate probe in the webhook mode).
	shepherd() bool
	// calls is how many requests each webhook has answered so far; false
	// when it cannot say (a baseline build whose metrics are not served
	// in plain HTTP).
	calls() (webhookCalls, bool)
}

// admissionMode is one measured mode.
type admissionMode struct {
	name     string
	policies bool
	hooks    *webhookSet
	// bin and args run a serve for the mode; empty uses the empty webhook
	// (when hooks is set).
	bin  string
	args []string
}

func (a *admissionBench) modes(bin string) []*admissionMode {
	var out []*admissionMode
	for _, name := range a.cfg.modes {
		m := &admissionMode{name: name}
		switch name {
		case modeVAP:
			m.policies = true
		case modeEmpty:
			m.hooks = a.webhookSet
		case modeWebhook:
			m.hooks, m.bin = a.webhookSet, bin
		case modeBaseline:
			m.hooks, m.bin = a.webhookSet, a.cfg.baseline
		case modeNative:
			m.policies, m.hooks, m.bin = true, a.nativeSet, bin
			m.args = []string{"--admission-mode=native"}
		}
		out = append(out, m)
	}
	return out
}

// enter switches the cluster to m, waiting until each step is in effect:
// the policies come off first (while the webhooks in place are the
// previous mode's, which the probes tell apart), then the webhook
// configurations change, then the policies go on. A mode with a serve gets
// a new one, started before its configurations point at it; the previous
// serve stops only once nothing is sent to it any more.
func (a *admissionBench) enter(ctx context.Context, m *admissionMode) {
	a.b.Helper()
	var s *serveProcess
	var target admissionServer
	switch {
	case m.bin != "":
		s = a.startServe(m.name, m.bin, 0, m.args...)
		target = s
	case m.hooks != nil:
		target = a.empty
	}
	running := []admissionServer{a.empty}
	if a.serve != nil {
		running = append(running, a.serve)
	}
	if s != nil {
		running = append(running, s)
	}
	step := func(what string, next admissionState) {
		a.waitFor(ctx, m.name+": "+what, func(ctx context.Context) error { return a.inEffect(ctx, next, running) })
		a.state = next
	}
	st := a.state
	if st.policies && !m.policies {
		a.policies.remove(ctx, a)
		st.policies = false
		step("the policies out of effect", st)
	}
	if st.hooks != m.hooks || st.server != target {
		if m.hooks == nil {
			a.removeWebhooks(ctx)
		} else {
			a.putWebhooks(ctx, m.hooks, target.addr())
		}
		st.hooks, st.server = m.hooks, target
		step("its webhook configurations in effect", st)
	}
	if !st.policies && m.policies {
		a.policies.create(ctx, a)
		st.policies = true
		step("the policies in effect", st)
	}
	if a.serve != nil && a.serve != s {
		a.stopServe(a.serve)
	}
	a.serve = s
}

// leave stops the last mode's serve.
func (a *admissionBench) leave() {
	if a.serve != nil {
		a.stopServe(a.serve)
		a.serve = nil
	}
}

// inEffect holds when the cluster answers as st must: the deny probe
// denied by the policy or by shepherd's validating webhook, or allowed;
// the mutate probe defaulted by the policy or by shepherd's mutating
// webhook, or not; and one create of each measured kind allowed, having
// reached the webhooks of st's configurations at st's server the expected
// number of times, and no other server at all.
func (a *admissionBench) inEffect(ctx context.Context, st admissionState, running []admissionServer) error {
	shepherdWebhooks := st.hooks == a.webhookSet && st.server != nil && st.server.shepherd()
	_, err := a.create(ctx, a.denyProbe, true)
	switch {
	case st.policies:
		want := fmt.Sprintf("ValidatingAdmissionPolicy '%s'", celrules.PolicyName(probeRule, celrules.SourceBuiltin))
		if err == nil || !strings.Contains(err.Error(), want) {
			return fmt.Errorf("the deny probe (%s) answered %v, want a denial by %s", probeRule, err, want)
		}
	case shepherdWebhooks:
		want := fmt.Sprintf("admission webhook %q denied the request", a.webhookSet.validating[0].Webhooks[0].Name)
		if err == nil || !strings.Contains(err.Error(), want) {
			return fmt.Errorf("the deny probe (%s) answered %v, want %q", probeRule, err, want)
		}
	default:
		if err != nil {
			return fmt.Errorf("the deny probe (%s) answered %v, want it allowed", probeRule, err)
		}
	}
	got, err := a.create(ctx, a.mutateProbe, true)
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
	if wantDefault := st.policies || shepherdWebhooks; wantDefault != (policy == "Never") {
		return fmt.Errorf("the mutate probe came back with restartPolicy %q; want %s's default Never: %t", policy, probeDefault, wantDefault)
	}
	for _, k := range a.kinds {
		before := a.allCalls(running)
		if _, err := a.create(ctx, k.obj, true); err != nil {
			return fmt.Errorf("a dry-run create of the %s: %w", k.name, err)
		}
		after := a.allCalls(running)
		for i, s := range running {
			if !before[i].ok || !after[i].ok {
				continue
			}
			var want webhookCalls
			if st.hooks != nil && s == st.server {
				want = st.hooks.perCreate[k.name]
			}
			if got := after[i].calls.sub(before[i].calls); got != want {
				return fmt.Errorf("a create of the %s reached %s's webhooks %+v times, want %+v", k.name, s.name(), got, want)
			}
		}
	}
	return nil
}

type countedCalls struct {
	calls webhookCalls
	ok    bool
}

func (a *admissionBench) allCalls(servers []admissionServer) []countedCalls {
	out := make([]countedCalls, len(servers))
	for i, s := range servers {
		out[i].calls, out[i].ok = s.calls()
	}
	return out
}

// waitFor polls cond until it holds, failing the benchmark with cond's last
// observation after settle.
func (a *admissionBench) waitFor(ctx context.Context, what string, cond func(context.Context) error) {
	a.b.Helper()
	var last error
	err := testkit.Poll(250*time.Millisecond, settle, func(ctx context.Context) (bool, error) {
		last = cond(ctx)
		return last == nil, nil
	})
	if err != nil {
		msg := fmt.Sprintf("waiting for %s: %v (last: %v)", what, err, last)
		if a.serve != nil {
			log, _ := os.ReadFile(a.serve.log)
			msg += "\nshepherd serve's log:\n" + string(log)
		}
		a.b.Fatal(msg)
	}
	a.warnings.Take()
}

// create creates a copy of u under a fresh name, a dry run or stored, and
// returns what the apiserver answered.
func (a *admissionBench) create(ctx context.Context, u *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	obj := u.DeepCopy()
	obj.SetName(fmt.Sprintf("bench-%07d", a.names.Add(1)))
	var opts []client.CreateOption
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	err := a.k.Create(ctx, obj, opts...)
	return obj, err
}

// measureMode measures every cell of mode m in this round.
func (a *admissionBench) measureMode(ctx context.Context, round int, m *admissionMode) {
	a.b.Helper()
	rvs := a.webhookVersions(ctx)
	var line []string
	for _, k := range a.kinds {
		a.run(ctx, m.name+" "+k.name+" warm-up", k, true, a.cfg.warmup, a.cfg.clients)
		for _, dryRun := range a.dryRuns() {
			for _, cl := range a.concurrencies() {
				p50 := a.measureCell(ctx, round, m, k, dryRun, cl)
				line = append(line, fmt.Sprintf("%s %s c%d %.2f ms", k.name, admissionOp(dryRun), cl, p50))
			}
		}
	}
	// Nothing may rewrite the configurations while a mode is measured
	// (serve's leader writes its matchCondition only when the rules
	// change).
	if got := a.webhookVersions(ctx); got != rvs {
		a.b.Errorf("%s, round %d: the webhook configurations changed during the measurement (resourceVersions %s, then %s)", m.name, round+1, rvs, got)
	}
	a.b.Logf("round %d, %s: p50 %s", round+1, m.name, strings.Join(line, ", "))
}

// dryRuns are the operations measured, as create's dryRun: dry runs, then
// stored creates.
func (a *admissionBench) dryRuns() []bool {
	if a.cfg.stored {
		return []bool{true, false}
	}
	return []bool{true}
}

func (a *admissionBench) concurrencies() []int {
	if a.cfg.clients == 1 {
		return []int{1}
	}
	return []int{1, a.cfg.clients}
}

// measureCell sends N creates of k from clients clients, records them in
// the cell and returns their median (ms).
func (a *admissionBench) measureCell(ctx context.Context, round int, m *admissionMode, k *admissionKind, dryRun bool, clients int) float64 {
	a.b.Helper()
	a.warnings.Take()
	api0, etcd0 := a.cpu(a.apiserverPID), a.cpu(a.etcdPID)
	sh0 := math.NaN()
	if a.serve != nil {
		sh0 = a.cpu(a.serve.pid())
	}
	var server admissionServer
	if a.state.hooks != nil {
		server = a.state.server
	}
	var calls0 webhookCalls
	counted := false
	if server != nil {
		calls0, counted = server.calls()
	}
	// The empty webhook's CPU, beside shepherd's: the difference is what
	// shepherd's own work costs per create.
	empty, _ := server.(*emptyWebhook)
	em0 := math.NaN()
	if empty != nil {
		em0 = a.cpu(empty.pid())
	}
	what := fmt.Sprintf("%s %s %s, %d client(s)", m.name, k.name, admissionOp(dryRun), clients)
	lat, wall := a.run(ctx, what, k, dryRun, a.cfg.n, clients)

	key := admissionCellKey{mode: m.name, kind: k.name, stored: !dryRun, clients: clients}
	c := a.cells[key]
	if c == nil {
		c = &admissionCell{shepherdRSS: math.NaN(), shepherdPeak: math.NaN()}
		a.cells[key] = c
	}
	c.lats = append(c.lats, lat...)
	c.wall += wall
	c.creates += len(lat)
	c.roundP50 = append(c.roundP50, quantile(lat, 0.5))
	c.apiserverCPU += a.cpu(a.apiserverPID) - api0
	c.etcdCPU += a.cpu(a.etcdPID) - etcd0
	c.warnings += len(a.warnings.Take())
	if a.serve != nil {
		c.hasShepherd = true
		c.shepherdCPU += a.cpu(a.serve.pid()) - sh0
		rss, peak, err := proc.Memory(a.serve.pid())
		if err != nil {
			a.b.Fatalf("reading shepherd serve's memory: %v", err)
		}
		c.shepherdRSS, c.shepherdPeak = rss, max(peak, admissionNaNToZero(c.shepherdPeak))
	}
	if empty != nil {
		c.hasEmpty = true
		c.emptyCPU += a.cpu(empty.pid()) - em0
	}
	if counted {
		if calls1, ok := server.calls(); ok {
			got, want := calls1.sub(calls0), a.state.hooks.perCreate[k.name].times(a.cfg.n)
			c.calls, c.callsCounted = webhookCalls{c.calls.mutate + got.mutate, c.calls.validate + got.validate}, true
			if got != want {
				a.b.Errorf("%s: %s's webhooks answered %+v calls for %d creates, want %+v", what, server.name(), got, a.cfg.n, want)
			}
		}
	}
	if !dryRun {
		a.deleteAll(ctx, k)
	}
	return quantile(lat, 0.5)
}

func admissionNaNToZero(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

func admissionOp(dryRun bool) string {
	if dryRun {
		return "dry-run"
	}
	return "stored"
}

// deleteAll deletes every object of k's kind in the namespace (only the
// benchmark's stored creates live there) and waits until they are gone.
func (a *admissionBench) deleteAll(ctx context.Context, k *admissionKind) {
	a.b.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(k.obj.GroupVersionKind())
	if err := a.c.Client.DeleteAllOf(ctx, u, client.InNamespace(a.ns)); err != nil {
		a.b.Fatalf("deleting the stored %ss: %v", k.name, err)
	}
	a.waitFor(ctx, "the stored "+k.name+"s deleted", func(ctx context.Context) error {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(k.obj.GroupVersionKind().GroupVersion().WithKind(k.obj.GetKind() + "List"))
		if err := a.c.Client.List(ctx, list, client.InNamespace(a.ns)); err != nil {
			return err
		}
		if n := len(list.Items); n > 0 {
			return fmt.Errorf("%d left", n)
		}
		return nil
	})
}

// cpu is a process's CPU time so far, in ms.
func (a *admissionBench) cpu(pid int) float64 {
	d, err := proc.CPU(pid)
	if err != nil {
		a.b.Fatalf("reading the CPU time of pid %d: %v", pid, err)
	}
	return float64(d) / float64(time.Millisecond)
}

// run sends total creates of k from clients goroutines, dry runs or
// stored, and returns their sorted latencies in ms and the wall time. Any
// create that is not allowed fails the benchmark.
func (a *admissionBench) run(ctx context.Context, what string, k *admissionKind, dryRun bool, total, clients int) ([]float64, time.Duration) {
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
				_, err := a.create(ctx, k.obj, dryRun)
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
		a.b.Fatalf("%s: %d of %d creates of %s not allowed; the first: %v", what, f, total, k.file, ferr)
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	return all, wall
}

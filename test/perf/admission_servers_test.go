package perf

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/install"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// webhookCalls counts admission requests by webhook.
type webhookCalls struct{ mutate, validate int }

func (c webhookCalls) sub(o webhookCalls) webhookCalls {
	return webhookCalls{c.mutate - o.mutate, c.validate - o.validate}
}

func (c webhookCalls) times(n int) webhookCalls { return webhookCalls{c.mutate * n, c.validate * n} }

// webhookSet is one mode's webhook configurations, every clientConfig a
// URL with envtest's CA (putWebhooks points them at a server), and what
// one create of each measured kind costs at them.
type webhookSet struct {
	name       string
	mutating   []*admissionregistrationv1.MutatingWebhookConfiguration
	validating []*admissionregistrationv1.ValidatingWebhookConfiguration
	perCreate  map[string]webhookCalls
}

// policySet is deploy/native's admission policies and bindings, each list
// in the order they are created and deleted: the validating ones, then the
// mutating ones, the probes' last in each.
type policySet struct {
	policies, bindings []*unstructured.Unstructured
}

// readConfigurations returns deploy/webhook's configurations as envtest
// registered them, deploy/native's narrowed ones (pointed at a URL with
// envtest's CA, as envtest does) and deploy/native's policies.
func (a *admissionBench) readConfigurations() (*webhookSet, *webhookSet, *policySet) {
	wh := a.c.Env.WebhookInstallOptions
	ws := &webhookSet{
		name: "deploy/webhook",
		// Every kind goes to the validating webhook; the kinds with
		// defaults (JobSets, PodCliqueSets) to the mutating one too.
		perCreate: map[string]webhookCalls{"TrainJob": {0, 1}, "PodCliqueSet": {1, 1}, "JobSet": {1, 1}},
	}
	for _, m := range wh.MutatingWebhooks {
		ws.mutating = append(ws.mutating, m.DeepCopy())
	}
	for _, v := range wh.ValidatingWebhooks {
		ws.validating = append(ws.validating, v.DeepCopy())
	}
	if len(ws.mutating) != 1 || len(ws.validating) != 1 {
		a.b.Fatalf("deploy/webhook: %d mutating and %d validating configurations, want one each", len(ws.mutating), len(ws.validating))
	}

	objs, err := install.Build(install.Dir("native"))
	if err != nil {
		a.b.Fatal(err)
	}
	ns := &webhookSet{
		name: "deploy/native",
		// Only a TrainJob CREATE reaches a webhook (V-TJ-3: its runtime
		// must exist); a JobSet no TrainJob controls and a PodCliqueSet
		// never do.
		perCreate: map[string]webhookCalls{"TrainJob": {0, 1}, "PodCliqueSet": {}, "JobSet": {}},
	}
	// As envtest renders a service reference.
	urlOf := func(cc *admissionregistrationv1.WebhookClientConfig) {
		if cc.Service == nil || cc.Service.Path == nil {
			a.b.Fatalf("deploy/native: a webhook without a service path: %+v", cc)
		}
		u := fmt.Sprintf("https://%s/%s", net.JoinHostPort(wh.LocalServingHost, strconv.Itoa(wh.LocalServingPort)), *cc.Service.Path)
		cc.URL, cc.Service, cc.CABundle = &u, nil, wh.LocalServingCAData
	}
	ps := &policySet{}
	for _, o := range objs {
		switch o.GetKind() {
		case "MutatingWebhookConfiguration":
			w := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, w); err != nil {
				a.b.Fatal(err)
			}
			for i := range w.Webhooks {
				urlOf(&w.Webhooks[i].ClientConfig)
			}
			ns.mutating = append(ns.mutating, w)
		case "ValidatingWebhookConfiguration":
			w := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, w); err != nil {
				a.b.Fatal(err)
			}
			for i := range w.Webhooks {
				urlOf(&w.Webhooks[i].ClientConfig)
			}
			ns.validating = append(ns.validating, w)
		case "ValidatingAdmissionPolicy", "MutatingAdmissionPolicy":
			ps.policies = append(ps.policies, o)
		case "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicyBinding":
			ps.bindings = append(ps.bindings, o)
		}
	}
	if len(ns.mutating) != 1 || len(ns.validating) != 1 {
		a.b.Fatalf("deploy/native: %d mutating and %d validating configurations, want one each", len(ns.mutating), len(ns.validating))
	}
	// The probes' policies and bindings last, validating before mutating.
	order := func(o *unstructured.Unstructured) int {
		rank := 0
		if strings.HasPrefix(o.GetKind(), "Mutating") {
			rank = 2
		}
		if r := o.GetLabels()["shepherd.dev/rule"]; r == probeRule || r == probeDefault {
			rank++
		}
		return rank
	}
	for _, list := range [][]*unstructured.Unstructured{ps.policies, ps.bindings} {
		slices.SortStableFunc(list, func(x, y *unstructured.Unstructured) int { return cmp.Compare(order(x), order(y)) })
		if n := len(list); n < 4 || order(list[n-1]) != 3 || slices.IndexFunc(list, func(o *unstructured.Unstructured) bool { return order(o) == 1 }) < 0 {
			a.b.Fatalf("deploy/native: want the policies and bindings of %s and %s among its %d", probeRule, probeDefault, n)
		}
	}
	a.b.Logf("deploy/native: %d admission policies and %d bindings", len(ps.policies), len(ps.bindings))
	return ws, ns, ps
}

// addCondition adds serve's UPDATE matchCondition to every webhook of s.
func (s *webhookSet) addCondition(cond *admissionregistrationv1.MatchCondition) {
	if cond == nil {
		return
	}
	add := func(conds *[]admissionregistrationv1.MatchCondition) {
		*conds = slices.DeleteFunc(*conds, func(c admissionregistrationv1.MatchCondition) bool { return c.Name == cond.Name })
		*conds = append(*conds, *cond)
	}
	for _, m := range s.mutating {
		for i := range m.Webhooks {
			add(&m.Webhooks[i].MatchConditions)
		}
	}
	for _, v := range s.validating {
		for i := range v.Webhooks {
			if v.Webhooks[i].Name != api.PolicyWebhookName {
				add(&v.Webhooks[i].MatchConditions)
			}
		}
	}
}

// liveUpdateCondition is the UPDATE matchCondition the installed
// configurations of s's names carry, an error unless every webhook but the
// WorkloadPolicy one carries the same one.
func (a *admissionBench) liveUpdateCondition(ctx context.Context, s *webhookSet) (*admissionregistrationv1.MatchCondition, error) {
	var conds [][]admissionregistrationv1.MatchCondition
	for _, m := range s.mutating {
		live := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := a.c.Client.Get(ctx, client.ObjectKey{Name: m.Name}, live); err != nil {
			return nil, err
		}
		for _, w := range live.Webhooks {
			conds = append(conds, w.MatchConditions)
		}
	}
	for _, v := range s.validating {
		live := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := a.c.Client.Get(ctx, client.ObjectKey{Name: v.Name}, live); err != nil {
			return nil, err
		}
		for _, w := range live.Webhooks {
			// serve keeps no UPDATE condition on the WorkloadPolicy
			// webhook: no rule reads a WorkloadPolicy.
			if w.Name != api.PolicyWebhookName {
				conds = append(conds, w.MatchConditions)
			}
		}
	}
	var found *admissionregistrationv1.MatchCondition
	for _, cs := range conds {
		i := slices.IndexFunc(cs, func(c admissionregistrationv1.MatchCondition) bool {
			return c.Name == celrules.UpdateMatchConditionName
		})
		if i < 0 {
			return nil, fmt.Errorf("a webhook has no matchCondition %s yet", celrules.UpdateMatchConditionName)
		}
		if found != nil && *found != cs[i] {
			return nil, fmt.Errorf("two webhooks carry different matchConditions %s: %q and %q", celrules.UpdateMatchConditionName, found.Expression, cs[i].Expression)
		}
		found = &cs[i]
	}
	return found, nil
}

func (p *policySet) create(ctx context.Context, a *admissionBench) {
	for _, o := range slices.Concat(p.policies, p.bindings) {
		if err := a.c.Client.Create(ctx, o.DeepCopy()); err != nil {
			a.b.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// remove deletes the bindings first: a policy without a binding does
// nothing, and the probes then tell when the last binding is gone.
func (p *policySet) remove(ctx context.Context, a *admissionBench) {
	for _, o := range slices.Concat(p.bindings, p.policies) {
		if err := a.c.Client.Delete(ctx, o.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
			a.b.Fatalf("deleting %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// configNames are the names of every configuration either set installs.
func (a *admissionBench) configNames() (mutating, validating []string) {
	for _, s := range []*webhookSet{a.webhookSet, a.nativeSet} {
		for _, m := range s.mutating {
			if !slices.Contains(mutating, m.Name) {
				mutating = append(mutating, m.Name)
			}
		}
		for _, v := range s.validating {
			if !slices.Contains(validating, v.Name) {
				validating = append(validating, v.Name)
			}
		}
	}
	return mutating, validating
}

func (a *admissionBench) removeWebhooks(ctx context.Context) {
	a.removeWebhooksBut(ctx, nil)
}

// removeWebhooksBut deletes every configuration of either set but keep's.
func (a *admissionBench) removeWebhooksBut(ctx context.Context, keep *webhookSet) {
	mutating, validating := a.configNames()
	del := func(obj client.Object) {
		if err := a.c.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			a.b.Fatalf("deleting %T %s: %v", obj, obj.GetName(), err)
		}
	}
	for _, name := range mutating {
		if keep == nil || !slices.ContainsFunc(keep.mutating, func(m *admissionregistrationv1.MutatingWebhookConfiguration) bool { return m.Name == name }) {
			del(&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	}
	for _, name := range validating {
		if keep == nil || !slices.ContainsFunc(keep.validating, func(v *admissionregistrationv1.ValidatingWebhookConfiguration) bool { return v.Name == name }) {
			del(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	}
}

// putWebhooks installs s's configurations, every URL pointed at hostPort:
// created, or replacing the one of the same name in place so that no
// request slips through with no webhook; the other set's configurations
// of other names are deleted.
func (a *admissionBench) putWebhooks(ctx context.Context, s *webhookSet, hostPort string) {
	retarget := func(cc *admissionregistrationv1.WebhookClientConfig) {
		if cc.URL == nil {
			a.b.Fatalf("%s: a webhook without a URL: %+v", s.name, cc)
		}
		u, err := url.Parse(*cc.URL)
		if err != nil {
			a.b.Fatal(err)
		}
		u.Host = hostPort
		str := u.String()
		cc.URL = &str
	}
	for _, m := range s.mutating {
		want := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Labels: m.Labels}}
		want.Webhooks = m.DeepCopy().Webhooks
		for i := range want.Webhooks {
			retarget(&want.Webhooks[i].ClientConfig)
		}
		a.put(ctx, want, &admissionregistrationv1.MutatingWebhookConfiguration{})
	}
	for _, v := range s.validating {
		want := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: v.Name, Labels: v.Labels}}
		want.Webhooks = v.DeepCopy().Webhooks
		for i := range want.Webhooks {
			retarget(&want.Webhooks[i].ClientConfig)
		}
		a.put(ctx, want, &admissionregistrationv1.ValidatingWebhookConfiguration{})
	}
	a.removeWebhooksBut(ctx, s)
}

// put creates want, or replaces the live object of its name (read into
// live) with it.
func (a *admissionBench) put(ctx context.Context, want, live client.Object) {
	err := a.c.Client.Get(ctx, client.ObjectKeyFromObject(want), live)
	switch {
	case apierrors.IsNotFound(err):
		if err := a.c.Client.Create(ctx, want); err != nil {
			a.b.Fatalf("creating %T %s: %v", want, want.GetName(), err)
		}
	case err != nil:
		a.b.Fatal(err)
	default:
		want.SetResourceVersion(live.GetResourceVersion())
		if err := a.c.Client.Update(ctx, want); err != nil {
			a.b.Fatalf("updating %T %s: %v", want, want.GetName(), err)
		}
	}
}

// webhookVersions is the resourceVersion of every configuration either set
// names ("-" when absent), to tell whether anything rewrote them.
func (a *admissionBench) webhookVersions(ctx context.Context) string {
	mutating, validating := a.configNames()
	var out []string
	get := func(obj client.Object, name string) {
		err := a.c.Client.Get(ctx, client.ObjectKey{Name: name}, obj)
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, name+"=-")
		case err != nil:
			a.b.Fatal(err)
		default:
			out = append(out, name+"="+obj.GetResourceVersion())
		}
	}
	for _, n := range mutating {
		get(&admissionregistrationv1.MutatingWebhookConfiguration{}, n)
	}
	for _, n := range validating {
		get(&admissionregistrationv1.ValidatingWebhookConfiguration{}, n)
	}
	return strings.Join(out, ",")
}

// serveProcess is a `shepherd serve` binary running against the cluster.
type serveProcess struct {
	mode     string
	cmd      *exec.Cmd
	log      string
	done     chan error
	hostPort string
	metrics  string
}

func (s *serveProcess) name() string   { return s.mode + "'s shepherd serve" }
func (s *serveProcess) addr() string   { return s.hostPort }
func (s *serveProcess) shepherd() bool { return true }
func (s *serveProcess) pid() int       { return s.cmd.Process.Pid }

var admissionRequestsLine = regexp.MustCompile(`^shepherd_admission_requests_total\{(.*)\} (\S+)$`)

// calls reads shepherd_admission_requests_total from serve's metrics.
func (s *serveProcess) calls() (webhookCalls, bool) {
	resp, err := http.Get("http://" + s.metrics + "/metrics") //nolint:gosec // local test URL
	if err != nil {
		return webhookCalls{}, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return webhookCalls{}, false
	}
	var c webhookCalls
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := admissionRequestsLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return webhookCalls{}, false
		}
		switch {
		case strings.Contains(m[1], `webhook="mutating"`):
			c.mutate += int(n)
		case strings.Contains(m[1], `webhook="validating"`):
			c.validate += int(n)
		}
	}
	return c, sc.Err() == nil
}

// serveHelp caches each binary's `serve --help`.
var serveHelp sync.Map

// flagsKnownTo drops the flags bin's `serve --help` does not list: the
// baseline may be an older build than the harness's ServeArgs.
func (a *admissionBench) flagsKnownTo(bin string, args []string) []string {
	a.b.Helper()
	help, ok := serveHelp.Load(bin)
	if !ok {
		out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
		if err != nil {
			a.b.Fatalf("%s serve --help: %v\n%s", bin, err, out)
		}
		help = string(out)
		serveHelp.Store(bin, help)
	}
	out := args[:0:0]
	for _, arg := range args {
		name, _, _ := strings.Cut(arg, "=")
		if strings.HasPrefix(name, "--") && !strings.Contains(help.(string), name+" ") {
			a.b.Logf("%s does not know %s: left out", bin, name)
			continue
		}
		out = append(out, arg)
	}
	return out
}

// startServe runs bin as `shepherd serve` for mode, with envtest's
// certificate, on port (0: a free one), and waits until /readyz answers
// 200. Leader election and the reconcilers are off and so is the
// background audit (a pass over the stored objects in the middle of a
// measurement would be noise): only admission is measured. Its metrics are
// plain HTTP, to count its webhook calls.
func (a *admissionBench) startServe(mode, bin string, port int, extra ...string) *serveProcess {
	a.b.Helper()
	dir := a.b.TempDir()
	if port == 0 {
		_, p, _ := net.SplitHostPort(cluster.FreeAddr())
		port, _ = strconv.Atoi(p)
	}
	host := a.c.Env.WebhookInstallOptions.LocalServingHost
	health, metrics := cluster.FreeAddr(), cluster.FreeAddr()
	// ADMISSION_SERVE_ARGS adds flags to every serve, for diagnosis: e.g.
	// --pprof-bind-address=127.0.0.1:6060 to take a CPU profile mid-run.
	extra = append(extra, strings.Fields(os.Getenv("ADMISSION_SERVE_ARGS"))...)
	args, err := a.c.ServeArgs(dir, health, metrics, append([]string{
		"--leader-elect=false", "--disable-reconcilers", "--audit-interval=0", "--metrics-secure=false",
		"--webhook-port=" + strconv.Itoa(port),
	}, extra...)...)
	if err != nil {
		a.b.Fatal(err)
	}
	args = a.flagsKnownTo(bin, args)
	s := &serveProcess{
		mode: mode, cmd: exec.Command(bin, args...), log: filepath.Join(dir, "shepherd.log"), done: make(chan error, 1),
		hostPort: net.JoinHostPort(host, strconv.Itoa(port)), metrics: metrics,
	}
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
		return cluster.Healthy("http://" + health + "/readyz")
	}
	var last error
	if err := testkit.Poll(200*time.Millisecond, settle, func(ctx context.Context) (bool, error) {
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
		a.b.Errorf("stopping %s: %v\n%s", s.name(), err, log)
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
// with no work behind it. Like shepherd it speaks HTTP/1.1 only, and like
// shepherd it is a process of its own (this test binary as the child
// emptyWebhookRole): in the benchmark's own process its goroutines
// would share a scheduler with the clients that are kept busy waiting on
// it, and the floor would leave out the wake-up of an idle server process
// that every real webhook call pays.
type emptyWebhook struct {
	hostPort string
	cmd      *exec.Cmd
	client   *http.Client
}

// emptyWebhookRole is the child role (cluster.ChildCommand) of this test
// binary that serves the empty webhook, with envtest's serving
// certificate directory and the host to listen on as its arguments (the
// port chosen by the kernel, written to stdout).
const emptyWebhookRole = "empty-webhook"

func (e *emptyWebhook) name() string   { return "the empty webhook" }
func (e *emptyWebhook) addr() string   { return e.hostPort }
func (e *emptyWebhook) shepherd() bool { return false }
func (e *emptyWebhook) pid() int       { return e.cmd.Process.Pid }

// calls asks the empty webhook's /calls.
func (e *emptyWebhook) calls() (webhookCalls, bool) {
	resp, err := e.client.Get("https://" + e.hostPort + "/calls")
	if err != nil {
		return webhookCalls{}, false
	}
	defer resp.Body.Close()
	var c struct{ Mutate, Validate int }
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&c) != nil {
		return webhookCalls{}, false
	}
	return webhookCalls{c.Mutate, c.Validate}, true
}

func (a *admissionBench) startEmptyWebhook() *emptyWebhook {
	wh := a.c.Env.WebhookInstallOptions
	cmd := cluster.ChildCommand(context.Background(), emptyWebhookRole, wh.LocalServingCertDir, wh.LocalServingHost)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		a.b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		a.b.Fatalf("starting the empty webhook: %v", err)
	}
	a.b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		a.b.Fatalf("the empty webhook did not say where it listens: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(wh.LocalServingCAData) {
		a.b.Fatal("envtest's webhook CA is not PEM")
	}
	return &emptyWebhook{hostPort: strings.TrimSpace(line), cmd: cmd, client: &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}}
}

// runEmptyWebhook is the empty webhook's process (args: the certificate
// directory and the host): it serves until killed.
func runEmptyWebhook(args []string) int {
	if len(args) != 2 {
		fmt.Fprintf(os.Stderr, "the empty webhook: want the certificate directory and the host, got %q\n", args)
		return 2
	}
	err := serveEmptyWebhook(args[0], args[1])
	fmt.Fprintln(os.Stderr, "the empty webhook:", err)
	return 1
}

func serveEmptyWebhook(certDir, host string) error {
	cert, err := tls.LoadX509KeyPair(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	if err != nil {
		return fmt.Errorf("envtest's serving certificate: %w", err)
	}
	l, err := tls.Listen("tcp", net.JoinHostPort(host, "0"), &tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	if err != nil {
		return err
	}
	var mutate, validate atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/calls", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int64{"Mutate": mutate.Load(), "Validate": validate.Load()})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, fmt.Sprintf("want an AdmissionReview with a request: %v", err), http.StatusBadRequest)
			return
		}
		switch path.Base(r.URL.Path) {
		case "mutate":
			mutate.Add(1)
		case "validate":
			validate.Add(1)
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&review)
	})
	fmt.Println(l.Addr().String())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return srv.Serve(l)
}

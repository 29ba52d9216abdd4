// Package bed runs real upstream controllers beside a test control plane
// (test/cluster), each as a child process on loopback with a client identity
// of its own, so that tests see what shepherd does among the operators it is
// deployed with instead of among doubles of them:
//
//   - the JobSet v0.12.0 controller (sigs.k8s.io/jobset, the module's root
//     main) with its own mutating and validating webhooks registered;
//   - the Kubeflow Trainer v2.3.0 controller manager
//     (github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager) with its
//     TrainJob defaulter and its TrainJob and runtime validators registered;
//   - kube-controller-manager v1.37.1 (k8s.io/kubernetes) running the garbage
//     collector and the Job controller, so Jobs create Pods and dependents of
//     deleted owners go away;
//   - kube-scheduler v1.37.1, binding pods to nodes (with the GenericWorkload
//     gate on request: gang scheduling of Workloads and PodGroups);
//   - kwok v0.8.0 (sigs.k8s.io/kwok), playing the kubelets of fake nodes
//     that tests add (AddNodes): bound pods become Running and Ready, Job
//     pods complete (kwok.go says when), deleted pods go away — through
//     kwok's stages, so no test writes pod status.
//
// hack/build-bed.sh builds the binaries from the Go module proxy into a cache
// outside the repository ($SHEPHERD_BED, which make test sets; Dir). Both
// operators run with their own certificate management off: the bed issues a
// serving pair (certs) for 127.0.0.1, writes it where each expects it and
// registers their webhook configurations — read from their modules at the
// versions go.mod pins, with the kustomize patches of their default installs
// applied — rewritten to loopback URLs with the pair's CA.
//
// The control plane must run with APIServerOptions: no endpoint
// reconciler (with the aggregator routing test/cluster turns on for every
// control plane, a webhook configuration that still names a Service
// resolves to endpoints, of which there are none, and the apiserver never
// dials a ClusterIP), and an audit log of every write, which Writes reads
// to tell who wrote what.
package bed

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/shepherd-k8s/shepherd/certs"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// The versions hack/build-bed.sh builds by default; keep them in step with
// it (and with go.mod, whose pins the CRDs and webhook manifests come from).
const (
	JobSetVersion  = "v0.12.0"
	TrainerVersion = "v2.3.0"
	K8sVersion     = cluster.K8sVersion
)

// Env is the environment variable naming the directory hack/build-bed.sh
// prints; make test sets it.
const Env = "SHEPHERD_BED"

// The client identities of the bed's components (users of the control
// plane, each with a client certificate of its own).
const (
	JobSetUser    = "jobset-controller"
	TrainerUser   = "trainer-controller-manager"
	KCMUser       = "kube-controller-manager"
	SchedulerUser = "kube-scheduler"
	KwokUser      = "kwok-controller"
)

// KwokVersion is the kwok hack/build-bed.sh builds.
const KwokVersion = "v0.8.0"

// binaries are the bed's executables, relative to Dir.
var binaries = map[string]string{
	"jobset":    filepath.Join("jobset-"+JobSetVersion, "jobset-controller"),
	"trainer":   filepath.Join("trainer-"+TrainerVersion, "trainer-controller-manager"),
	"kcm":       filepath.Join("kube-controller-manager-"+K8sVersion, "kube-controller-manager"),
	"scheduler": filepath.Join("kube-scheduler-"+K8sVersion, "kube-scheduler"),
	"kwok":      filepath.Join("kwok-"+KwokVersion, "kwok"),
}

// Dir finds the bed's binaries: $SHEPHERD_BED, else the cache
// hack/build-bed.sh writes to. A missing binary is an error saying how to
// build it.
func Dir() (string, error) {
	dir := os.Getenv(Env)
	if dir == "" {
		cache := os.Getenv("SHEPHERD_CACHE")
		if cache == "" {
			base, err := os.UserCacheDir()
			if err != nil {
				return "", fmt.Errorf("%s is not set and the user cache directory is unknown: %w", Env, err)
			}
			cache = filepath.Join(base, "shepherd")
		}
		dir = filepath.Join(cache, "bed")
	}
	for _, bin := range binaries {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return "", fmt.Errorf("the test bed has no %s in %s ($%s=%q): run `make bed` (hack/build-bed.sh), or `make test`, which builds it: %w",
				bin, dir, Env, os.Getenv(Env), err)
		}
	}
	return dir, nil
}

// auditPolicy logs every write (metadata only; deletes with their
// DeleteOptions, whose preconditions a test reads, and TrainJob status
// writes with their patch, whose conditions a test reads), the GETs of the kinds
// shepherd reads as served (Bed.Gets: they must come from its cache), and
// nothing else; the apiserver's own lease renewals are left out.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  resources:
  - group: coordination.k8s.io
    resources: ["leases"]
- level: Request
  verbs: ["delete"]
- level: Request
  verbs: ["patch", "update"]
  resources:
  - group: trainer.kubeflow.org
    resources: ["trainjobs/status"]
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: Metadata
  verbs: ["get"]
  resources:
  - group: trainer.kubeflow.org
    resources: ["clustertrainingruntimes", "trainingruntimes"]
  - group: grove.io
    resources: ["podcliquesets", "podcliques", "podcliquescalinggroups"]
- level: None
`

// APIServerOptions returns o with what the bed needs of the apiserver: its
// audit policy (Bed.AuditLog is the log) and no endpoint reconciler.
func APIServerOptions(o cluster.Options) cluster.Options {
	o.AuditPolicy = auditPolicy
	flags := map[string]string{"endpoint-reconciler-type": "none"}
	for k, v := range o.ExtraAPIServerFlags {
		flags[k] = v
	}
	o.ExtraAPIServerFlags = flags
	return o
}

// Bed is the upstream controllers running beside a control plane.
type Bed struct {
	Cluster *cluster.Cluster
	// AuditLog is the apiserver's audit log (APIServerOptions).
	AuditLog string
	// CA is the PEM of the CA that signed Serving; Serving is a serving
	// pair for 127.0.0.1 and localhost (also for a webhook server of a
	// test's own: RegisterWebhooks).
	CA      []byte
	Serving *certs.KeyPair
	// Dir is the bed's working directory (kubeconfigs, configs, certs).
	Dir string

	JobSet, Trainer, KCM, Scheduler, Kwok *Process
}

// processes are the bed's components, in start order.
func (b *Bed) processes() []*Process {
	return []*Process{b.JobSet, b.Trainer, b.KCM, b.Scheduler, b.Kwok}
}

// Options configures the bed.
type Options struct {
	// GenericWorkload turns kube-scheduler's GenericWorkload feature gate
	// (gang scheduling of Workloads and PodGroups) and
	// kube-controller-manager's PodGroup protection controller on; the control plane
	// must serve scheduling.k8s.io/v1beta1 (cluster.WorkloadAPIV1beta1).
	GenericWorkload bool
}

// Process is one component of the bed: a child process of the test.
type Process struct {
	Name string
	// User is its client identity.
	User string
	// Health is the URL of its health check.
	Health string

	cmd  *exec.Cmd
	log  *cluster.SyncBuffer
	done chan error
}

// Log is what the process has written so far.
func (p *Process) Log() string { return p.log.String() }

// Start starts the bed beside c, which must have been started with the flags
// of APIServerOptions and with the upstream
// CRDs (cluster.UpstreamCRDs, the default): the three components, each
// waited for until healthy, and the operators' webhook configurations,
// registered once their servers answer. Stop it with Stop.
func Start(c *cluster.Cluster, opts Options) (b *Bed, err error) {
	bin, err := Dir()
	if err != nil {
		return nil, err
	}
	for _, gvr := range [][2]string{{"trainer.kubeflow.org/v1alpha1", "trainjobs"}, {"jobset.x-k8s.io/v1alpha2", "jobsets"}} {
		if ok, err := c.Serves(gvr[0], gvr[1]); err != nil || !ok {
			return nil, fmt.Errorf("the control plane does not serve %s %s (start it with cluster.UpstreamCRDs): %v", gvr[0], gvr[1], err)
		}
	}
	dir, err := os.MkdirTemp("", "shepherd-bed-")
	if err != nil {
		return nil, err
	}
	b = &Bed{Cluster: c, AuditLog: c.AuditLog, Dir: dir}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.Stop())
			if logs := b.Logs(); logs != "" {
				err = fmt.Errorf("%w\n%s", err, logs)
			}
		}
	}()
	now := time.Now()
	ca, err := certs.GenerateCA(now, 24*time.Hour, "shepherd test bed CA")
	if err != nil {
		return nil, err
	}
	b.CA = ca.CertPEM
	if b.Serving, err = certs.GenerateServing(now, 24*time.Hour, ca, []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}); err != nil {
		return nil, err
	}

	jsWebhook := cluster.FreeAddr()
	if b.JobSet, err = b.startJobSet(filepath.Join(bin, binaries["jobset"]), jsWebhook); err != nil {
		return nil, err
	}
	trWebhook := cluster.FreeAddr()
	if b.Trainer, err = b.startTrainer(filepath.Join(bin, binaries["trainer"]), trWebhook); err != nil {
		return nil, err
	}
	if b.KCM, err = b.startKCM(filepath.Join(bin, binaries["kcm"]), opts.GenericWorkload); err != nil {
		return nil, err
	}
	if b.Scheduler, err = b.startScheduler(filepath.Join(bin, binaries["scheduler"]), opts.GenericWorkload); err != nil {
		return nil, err
	}
	if b.Kwok, err = b.startKwok(filepath.Join(bin, binaries["kwok"])); err != nil {
		return nil, err
	}
	for _, p := range b.processes() {
		if err := p.waitHealthy(3 * time.Minute); err != nil {
			return nil, err
		}
	}
	for _, w := range []struct {
		addr string
		m    manifests
	}{{jsWebhook, jobSetWebhooks}, {trWebhook, trainerWebhooks}} {
		if err := b.answers(w.addr); err != nil {
			return nil, err
		}
		cfgs, err := w.m.read()
		if err != nil {
			return nil, err
		}
		if err := b.RegisterWebhooks(context.Background(), cfgs, w.addr); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// kubeconfig writes the kubeconfig of a component's user.
func (b *Bed) kubeconfig(user string) (string, error) {
	path, _, err := b.Cluster.KubeconfigAs(b.Dir, user)
	return path, err
}

// certDir writes the serving pair as tls.crt and tls.key into dir.
func (b *Bed) certDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), b.Serving.CertPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tls.key"), b.Serving.KeyPEM, 0o600)
}

func hostPort(addr string) (string, string) {
	h, p, _ := net.SplitHostPort(addr)
	return h, p
}

func (b *Bed) startJobSet(bin, webhook string) (*Process, error) {
	kc, err := b.kubeconfig(JobSetUser)
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(b.Dir, "jobset-certs")
	if err := b.certDir(certDir); err != nil {
		return nil, err
	}
	health := cluster.FreeAddr()
	host, port := hostPort(webhook)
	// sigs.k8s.io/jobset api/config/v1alpha1 Configuration.
	config := fmt.Sprintf(`apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: %s
  port: %s
  certDir: %s
health:
  healthProbeBindAddress: %s
`, host, port, certDir, health)
	cfgPath := filepath.Join(b.Dir, "jobset-config.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		return nil, err
	}
	return b.start("jobset", JobSetUser, "http://"+health+"/readyz", kc, nil,
		bin, "--config="+cfgPath, "--metrics-bind-address=0", "--zap-devel=false")
}

func (b *Bed) startTrainer(bin, webhook string) (*Process, error) {
	kc, err := b.kubeconfig(TrainerUser)
	if err != nil {
		return nil, err
	}
	// Trainer's config has no certDir: controller-runtime's default,
	// $TMPDIR/k8s-webhook-server/serving-certs, with a TMPDIR of its own.
	tmp := filepath.Join(b.Dir, "trainer-tmp")
	if err := b.certDir(filepath.Join(tmp, "k8s-webhook-server", "serving-certs")); err != nil {
		return nil, err
	}
	health := cluster.FreeAddr()
	host, port := hostPort(webhook)
	// github.com/kubeflow/trainer/v2 pkg/apis/config/v1alpha1 Configuration.
	config := fmt.Sprintf(`apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
certManagement:
  enable: false
webhook:
  host: %s
  port: %s
metrics:
  bindAddress: "0"
health:
  healthProbeBindAddress: %s
`, host, port, health)
	cfgPath := filepath.Join(b.Dir, "trainer-config.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		return nil, err
	}
	return b.start("trainer", TrainerUser, "http://"+health+"/readyz", kc, []string{"TMPDIR=" + tmp},
		bin, "--config="+cfgPath)
}

func (b *Bed) startKCM(bin string, genericWorkload bool) (*Process, error) {
	kc, err := b.kubeconfig(KCMUser)
	if err != nil {
		return nil, err
	}
	secure := cluster.FreeAddr()
	host, port := hostPort(secure)
	controllers, gates := "garbage-collector-controller,job-controller", []string(nil)
	if genericWorkload {
		// The PodGroup protection controller removes the
		// scheduling.k8s.io/podgroup-protection finalizer of a deleted
		// PodGroup once no pod uses it (it needs v1beta1 and the gate).
		controllers += ",podgroup-protection-controller"
		gates = []string{"--feature-gates=GenericWorkload=true"}
	}
	args := append([]string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--controllers=" + controllers,
		"--use-service-account-credentials=false",
		"--leader-elect=false",
		"--bind-address=" + host,
		"--secure-port=" + port,
		"--cert-dir=" + filepath.Join(b.Dir, "kcm-certs"),
		// The test apiserver has no request-header CA: do not look for it
		// (its health port is always-allowed anyway).
		"--authentication-skip-lookup=true"}, gates...)
	return b.start("kube-controller-manager", KCMUser, "https://"+secure+"/healthz", kc, nil, bin, args...)
}

// start runs a component with its kubeconfig (KUBECONFIG) and extra
// environment.
func (b *Bed) start(name, user, health, kubeconfig string, env []string, bin string, args ...string) (*Process, error) {
	p := &Process{Name: name, User: user, Health: health, log: &cluster.SyncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, args...) //nolint:gosec // the bed's binaries
	p.cmd.Env = append(append(os.Environ(), "KUBECONFIG="+kubeconfig), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	// Not in the test's process group: a ^C to `go test` reaches the test,
	// which stops the bed. A test killed outright takes the bed with it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p, nil
}

// exited reports whether the process has exited, and how.
func (p *Process) exited() (bool, error) {
	select {
	case err := <-p.done:
		p.done <- err
		return true, err
	default:
		return false, nil
	}
}

// waitHealthy polls the health URL until it answers 200.
func (p *Process) waitHealthy(within time.Duration) error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // kcm's self-signed health port on loopback
	}}
	err := testkit.Poll(250*time.Millisecond, within, func() error {
		if gone, err := p.exited(); gone {
			return testkit.Stop(fmt.Errorf("exited before it was healthy: %v", err))
		}
		resp, err := hc.Get(p.Health)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %d", p.Health, resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s was not healthy: %w", p.Name, err)
	}
	return nil
}

// answers checks that a webhook server at addr completes a TLS handshake
// with the bed's serving pair.
func (b *Bed) answers(addr string) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b.CA)
	if err := testkit.Poll(250*time.Millisecond, time.Minute, func() error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		if err != nil {
			return err
		}
		return conn.Close()
	}); err != nil {
		return fmt.Errorf("webhook server on %s does not answer: %w", addr, err)
	}
	return nil
}

// Pause stops the process (SIGSTOP) until Resume or the end of the test:
// the operator lagging behind, its reconciles and its webhooks waiting, so
// that a test sees what shepherd does alone where both would act.
func (p *Process) Pause(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("pausing %s: %v", p.Name, err)
	}
	t.Cleanup(func() { p.Resume(t) })
}

// Resume lets a paused process go on (SIGCONT); resuming a running
// process does nothing.
func (p *Process) Resume(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Errorf("resuming %s: %v", p.Name, err)
	}
}

// stop ends the process with SIGTERM, killing it after 20 s.
func (p *Process) stop() error {
	if p == nil {
		return nil
	}
	if gone, _ := p.exited(); gone {
		return nil
	}
	// A paused process would not act on the SIGTERM.
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within 20s after SIGTERM", p.Name)
	}
}

// Stop stops every component and removes the bed's directory. The webhook
// configurations stay: the control plane is going away too.
func (b *Bed) Stop() error {
	var errs []error
	ps := b.processes()
	slices.Reverse(ps)
	for _, p := range ps {
		if err := p.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if b.Dir != "" {
		errs = append(errs, os.RemoveAll(b.Dir))
	}
	return errors.Join(errs...)
}

// Logs is every component's log so far, each under a header.
func (b *Bed) Logs() string {
	var s strings.Builder
	for _, p := range b.processes() {
		if p == nil {
			continue
		}
		fmt.Fprintf(&s, "===== %s (user %s) =====\n%s\n", p.Name, p.User, p.Log())
	}
	return s.String()
}

// Exited names the components that have exited (they never should while
// the bed runs).
func (b *Bed) Exited() []string {
	var out []string
	for _, p := range b.processes() {
		if p == nil {
			continue
		}
		if gone, err := p.exited(); gone {
			out = append(out, fmt.Sprintf("%s (%v)", p.Name, err))
		}
	}
	return out
}

// ConfigAs is a rest.Config for a new user of the control plane (a client
// identity of its own, system:masters), with its kubeconfig written into
// the bed's directory.
func (b *Bed) ConfigAs(user string) (string, *rest.Config, error) {
	return b.Cluster.KubeconfigAs(b.Dir, user)
}

// ComponentLogs is each running component's log so far, by name.
func (b *Bed) ComponentLogs() map[string]string {
	out := map[string]string{}
	for _, p := range b.processes() {
		if p != nil {
			out[p.Name] = p.Log()
		}
	}
	return out
}

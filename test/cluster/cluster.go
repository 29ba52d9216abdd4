// Package cluster starts a real control plane — kube-apiserver and etcd built
// from the Go module proxy by hack/build-controlplane.sh — through envtest,
// with shepherd's CRDs and the upstream frameworks' CRDs installed (or, as an
// explicit option, the seed-shaped ones) and, optionally, the Workload API served and
// shepherd's webhooks registered. It is the one integration framework every
// suite under test/ and every package-level integration test uses.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/shepherd-k8s/shepherd/api/install"
	"github.com/shepherd-k8s/shepherd/integrations/pinned"
)

// WorkloadAPI selects whether and at which version the control plane serves
// scheduling.k8s.io Workloads and PodGroups.
type WorkloadAPI string

const (
	// WorkloadAPIOff serves neither Workloads nor PodGroups.
	WorkloadAPIOff WorkloadAPI = ""
	// WorkloadAPIV1beta1 serves scheduling.k8s.io/v1beta1.
	WorkloadAPIV1beta1 WorkloadAPI = "v1beta1"
	// WorkloadAPIV1alpha3 serves scheduling.k8s.io/v1alpha3 (Kubernetes 1.37).
	WorkloadAPIV1alpha3 WorkloadAPI = "v1alpha3"
)

// CRDSet selects the third-party CRDs a control plane starts with.
// shepherd's own (deploy/crds) are always installed.
type CRDSet int

const (
	// UpstreamCRDs installs what a platform admin's cluster has: Trainer's
	// and JobSet's CRDs of the pinned module versions and the Grove CRDs
	// that mirror Grove's published API (integrations/pinned). The default.
	UpstreamCRDs CRDSet = iota
	// SeedCRDs installs the seed designs' shapes of the third-party groups
	// (test/seedcrds): a cluster whose CRDs carry the seed fields.
	SeedCRDs
	// NoFrameworkCRDs installs none: no framework is present.
	NoFrameworkCRDs
)

// Options configures a control plane.
type Options struct {
	// CRDs selects the third-party CRDs installed at start.
	CRDs CRDSet
	// WorkloadAPI turns the GenericWorkload feature gate and the given
	// scheduling.k8s.io version on.
	WorkloadAPI WorkloadAPI
	// Webhooks, when it holds configurations, registers them with the
	// apiserver pointing at a local port with generated serving certificates
	// (see envtest.WebhookInstallOptions: LocalServingHost, LocalServingPort,
	// LocalServingCertDir).
	Webhooks envtest.WebhookInstallOptions
	// ExtraAPIServerFlags are appended to the apiserver's command line.
	ExtraAPIServerFlags map[string]string
	// AuditPolicy, when set, is the apiserver's audit policy (YAML): the
	// apiserver then writes every request it selects to Cluster.AuditLog
	// (JSON lines, read with CompletedRequests), so a test can tell who
	// wrote what.
	AuditPolicy string
	// RestartableAPIServer keeps the apiserver's certificates in a
	// directory of the cluster's own, so that StopAPIServer and
	// StartAPIServer bring it back with the same serving certificate (the
	// clients' kubeconfigs stay valid); envtest otherwise issues new ones.
	RestartableAPIServer bool
}

// Cluster is a running control plane.
type Cluster struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client client.Client

	// AuditLog is the apiserver's audit log when Options.AuditPolicy is
	// set.
	AuditLog string

	// restartable is Options.RestartableAPIServer.
	restartable bool
	// dirs are the directories of the cluster's own (the apiserver's
	// certificates when Options.RestartableAPIServer, the audit policy and
	// log), removed by Stop.
	dirs []string
}

// K8sVersion and EtcdVersion are the versions hack/build-controlplane.sh
// builds by default; keep them in step with it.
const (
	K8sVersion  = "v1.37.1"
	EtcdVersion = "v3.6.7"
)

// RepoRoot is the root of the shepherd repository.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// CRDDir is where shepherd's own generated CRDs live.
func CRDDir() string { return filepath.Join(RepoRoot(), "deploy", "crds") }

// SeedCRDDir is where the seed-shaped third-party CRDs live.
func SeedCRDDir() string { return filepath.Join(RepoRoot(), "test", "seedcrds") }

// FrameworkCRDs returns the third-party CRDs of a set.
func FrameworkCRDs(set CRDSet) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	switch set {
	case UpstreamCRDs:
		crds, err := pinned.CRDs()
		if err != nil {
			return nil, fmt.Errorf("%w (make test runs make pinned-crds first)", err)
		}
		return crds, nil
	case SeedCRDs:
		return pinned.Read(SeedCRDDir())
	case NoFrameworkCRDs:
		return nil, nil
	}
	return nil, fmt.Errorf("unknown CRD set %d", set)
}

// AssetsDir finds the kube-apiserver and etcd binaries: $KUBEBUILDER_ASSETS,
// else the cache hack/build-controlplane.sh writes to.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		cache := os.Getenv("SHEPHERD_CACHE")
		if cache == "" {
			base, err := os.UserCacheDir()
			if err != nil {
				return "", fmt.Errorf("locating the user cache directory: %w", err)
			}
			cache = filepath.Join(base, "shepherd")
		}
		dir = filepath.Join(cache, "controlplane", "k8s-"+K8sVersion+"-etcd-"+EtcdVersion)
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return "", fmt.Errorf("no %s in %s: run `make test` (or hack/build-controlplane.sh) to build the test control plane: %w", bin, dir, err)
		}
	}
	return dir, nil
}

// setLogger sends controller-runtime's logs (of the framework and of any
// controller a test runs) to stderr: errors only, unless SHEPHERD_TEST_LOG is
// "debug" or "info". Without it controller-runtime prints a warning and drops
// every log line, which hides why a controller misbehaved.
func setLogger() {
	level := zapcore.ErrorLevel
	switch os.Getenv("SHEPHERD_TEST_LOG") {
	case "debug":
		level = zapcore.DebugLevel
	case "info":
		level = zapcore.InfoLevel
	}
	var l logr.Logger = zap.New(zap.WriteTo(os.Stderr), zap.Level(level))
	ctrllog.SetLogger(l)
}

// New starts a control plane. Call Stop when done.
func New(opts Options) (*Cluster, error) {
	setLogger()
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	crds, err := FrameworkCRDs(opts.CRDs)
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDs:                     crds,
		CRDDirectoryPaths:        []string{CRDDir()},
		ErrorIfCRDPathMissing:    true,
		WebhookInstallOptions:    opts.Webhooks,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	if opts.WorkloadAPI != WorkloadAPIOff {
		args.Append("feature-gates", "GenericWorkload=true")
		args.Append("runtime-config", "scheduling.k8s.io/"+string(opts.WorkloadAPI)+"=true")
	}
	// Webhooks are called by loopback URL only: a configuration pointing
	// at a Service (deploy/'s, the chart's) resolves to the Service's
	// endpoints, of which there are none here, instead of making the
	// apiserver dial a ClusterIP off the loopback.
	args.Set("enable-aggregator-routing", "true")
	for k, v := range opts.ExtraAPIServerFlags {
		args.Append(k, v)
	}
	c := &Cluster{Env: env, restartable: opts.RestartableAPIServer}
	fail := func(err error) (*Cluster, error) {
		for _, d := range c.dirs {
			_ = os.RemoveAll(d)
		}
		return nil, err
	}
	if opts.AuditPolicy != "" {
		dir, err := os.MkdirTemp("", "shepherd-audit-")
		if err != nil {
			return nil, err
		}
		c.dirs = append(c.dirs, dir)
		policy := filepath.Join(dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(opts.AuditPolicy), 0o600); err != nil {
			return fail(err)
		}
		c.AuditLog = filepath.Join(dir, "audit.log")
		for k, v := range map[string]string{"audit-policy-file": policy, "audit-log-path": c.AuditLog, "audit-log-maxsize": "0", "audit-log-maxbackup": "0"} {
			args.Set(k, v)
		}
	}
	if opts.RestartableAPIServer {
		apiserverDir, err := os.MkdirTemp("", "shepherd-apiserver-")
		if err != nil {
			return fail(err)
		}
		c.dirs = append(c.dirs, apiserverDir)
		env.ControlPlane.GetAPIServer().CertDir = apiserverDir
		// Without it a stop waits out the 60 s request timeout for every
		// watch open (a serve's informers), then kills the apiserver.
		if _, set := opts.ExtraAPIServerFlags["shutdown-watch-termination-grace-period"]; !set {
			args.Append("shutdown-watch-termination-grace-period", "2s")
		}
	}
	cfg, err := env.Start()
	if err != nil {
		return fail(fmt.Errorf("starting control plane: %w", err))
	}
	// The tests create many objects quickly; client-go's default 5 QPS would
	// make them measure the rate limiter instead of shepherd.
	cfg.QPS, cfg.Burst = 500, 1000
	scheme := install.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return fail(errors.Join(err, env.Stop()))
	}
	if c.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return fail(errors.Join(fmt.Errorf("creating client: %w", err), env.Stop()))
	}
	c.Config = cfg
	return c, nil
}

// Start starts a control plane for one test and stops it when the test ends.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping control plane: %v", err)
		}
	})
	return c
}

// Stop stops the control plane.
func (c *Cluster) Stop() error {
	err := c.Env.Stop()
	for _, d := range c.dirs {
		err = errors.Join(err, os.RemoveAll(d))
	}
	return err
}

// Serves reports whether the apiserver serves resource in groupVersion.
func (c *Cluster) Serves(groupVersion, resource string) (bool, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		return false, err
	}
	list, err := dc.ServerResourcesForGroupVersion(groupVersion)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true, nil
		}
	}
	return false, nil
}

// Namespace creates a namespace with a generated name and returns its name.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := c.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

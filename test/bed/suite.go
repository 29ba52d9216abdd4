package bed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/grovemodel"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// The kinds the suites create, in the versions the upstream CRDs serve.
var (
	TrainJobGVK       = schema.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"}
	JobSetGVK         = schema.GroupVersionKind{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"}
	ClusterRuntimeGVK = schema.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "ClusterTrainingRuntime"}
	RuntimeGVK        = schema.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainingRuntime"}
)

// TorchRuntime is Trainer's own torch runtime
// (manifests/base/runtimes/torch_distributed.yaml of the pinned module),
// which every suite creates at start.
const TorchRuntime = "torch-distributed"

// SuiteOptions configures a Suite.
type SuiteOptions struct {
	// WorkloadAPI is the scheduling.k8s.io version the control plane
	// serves (none by default).
	WorkloadAPI cluster.WorkloadAPI
	// GenericWorkload turns kube-scheduler's gang scheduling on (Options).
	GenericWorkload bool
	// Grove starts the Grove behaviour model (test/grovemodel) with its
	// defaulting webhook: Grove is not on the module proxy.
	Grove bool
	// ServeArgs are serve's flags beyond the bed's own (webhook address
	// and serving pair), for every serve the suite starts.
	ServeArgs []string
	// NoServe starts no serve: the suite runs shepherd itself (replicas
	// in processes of their own, say) on WebhookAddr with CertDir's pair.
	NoServe bool
}

// Suite is shepherd installed as on a real cluster, among the real
// operators: a control plane with the audit log, the bed's components,
// optionally the Grove model, shepherd's webhook configurations
// (deploy/webhook) registered after the operators' on a loopback URL, and
// `shepherd serve` as its ServiceAccount bound by exactly the shipped RBAC.
// Every integration suite that involves Trainer or JobSet starts one:
// once per package (Setup) or once per test (StartSuite).
type Suite struct {
	Cluster *cluster.Cluster
	Bed     *Bed
	// Serve is the running serve; ServeWith replaces it for a test.
	Serve *cluster.Serving
	// ServeArgs is serve's command line beyond what cluster.Serve adds.
	ServeArgs []string
	// Webhooks are shepherd's webhook configurations, registered for
	// WebhookAddr.
	Webhooks    []*unstructured.Unstructured
	WebhookAddr string
	// CertDir holds the serving pair (tls.crt, tls.key) the webhook
	// configurations trust (Bed.CA).
	CertDir string

	grove *grovemodel.Operator
	dir   string
}

// NewSuite starts a Suite; Stop it when done. It fails, never skips,
// without the bed's binaries: make test builds them.
func NewSuite(o SuiteOptions) (s *Suite, err error) {
	s = &Suite{}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Stop())
		}
	}()
	if s.dir, err = os.MkdirTemp("", "shepherd-bed-suite-"); err != nil {
		return s, err
	}
	if _, err := Dir(); err != nil {
		return s, err
	}
	if s.Cluster, err = cluster.New(APIServerOptions(cluster.Options{WorkloadAPI: o.WorkloadAPI})); err != nil {
		return s, err
	}
	if s.Bed, err = Start(s.Cluster, Options{GenericWorkload: o.GenericWorkload}); err != nil {
		return s, err
	}
	if o.Grove {
		if s.grove, err = grovemodel.Start(context.Background(), s.Cluster, grovemodel.Options{}); err != nil {
			return s, err
		}
	}
	s.WebhookAddr = cluster.FreeAddr()
	if s.Webhooks, err = ReadWebhooks(filepath.Join(cluster.RepoRoot(), "deploy", "webhook")); err != nil {
		return s, err
	}
	if err := s.Bed.RegisterWebhooks(context.Background(), s.Webhooks, s.WebhookAddr); err != nil {
		return s, err
	}
	s.CertDir = filepath.Join(s.dir, "shepherd-certs")
	if err := os.MkdirAll(s.CertDir, 0o700); err != nil {
		return s, err
	}
	for name, b := range map[string][]byte{"tls.crt": s.Bed.Serving.CertPEM, "tls.key": s.Bed.Serving.KeyPEM} {
		if err := os.WriteFile(filepath.Join(s.CertDir, name), b, 0o600); err != nil {
			return s, err
		}
	}
	host, port, _ := strings.Cut(s.WebhookAddr, ":")
	s.ServeArgs = append([]string{"--leader-elect=false",
		"--webhook-host=" + host, "--webhook-port=" + port, "--cert-dir=" + s.CertDir, "--cert-mode=cert-manager"}, o.ServeArgs...)
	if o.NoServe {
		// Trainer's webhook needs no shepherd; shepherd's webhooks,
		// failing closed, do: the suite's runtime waits for its replicas.
		return s, nil
	}
	if s.Serve, err = s.Cluster.Serve(s.ServeArgs...); err != nil {
		return s, err
	}
	return s, s.CreateTorchRuntime(context.Background())
}

// Stop stops serve, the Grove model, the bed and the control plane.
func (s *Suite) Stop() error {
	var errs []error
	if s.Serve != nil {
		errs = append(errs, s.Serve.Stop())
		s.Serve = nil
	}
	if s.grove != nil {
		errs = append(errs, s.grove.Stop())
		s.grove = nil
	}
	if s.Bed != nil {
		errs = append(errs, s.Bed.Stop())
		s.Bed = nil
	}
	if s.Cluster != nil {
		errs = append(errs, s.Cluster.Stop())
		s.Cluster = nil
	}
	if s.dir != "" {
		errs = append(errs, os.RemoveAll(s.dir))
	}
	return errors.Join(errs...)
}

// Logs is every component's log and serve's.
func (s *Suite) Logs() string {
	var b strings.Builder
	if s.Bed != nil {
		b.WriteString(s.Bed.Logs())
	}
	if s.Serve != nil {
		fmt.Fprintf(&b, "===== shepherd serve (user %s) =====\n%s\n", cluster.ShepherdUser, s.Serve.Log())
	}
	return b.String()
}

// Setup starts a Suite (into) for a package's tests, as a cluster.RunMain
// setup: the Suite runs its own control plane, so the suite's RunMain has
// none (a nil env) or one of its own beside it. Its Teardown prints every
// log when the tests failed, and fails the suite when a bed component
// exited meanwhile.
func Setup(o SuiteOptions, into **Suite) cluster.Setup {
	return func(*cluster.Cluster) (cluster.Teardown, error) {
		start := time.Now()
		s, err := NewSuite(o)
		if err != nil {
			return nil, fmt.Errorf("test bed: %w", err)
		}
		*into = s
		fmt.Fprintf(os.Stderr, "test bed: JobSet %s, Trainer %s, kube-controller-manager and kube-scheduler %s, kwok %s up in %v\n",
			JobSetVersion, TrainerVersion, K8sVersion, KwokVersion, time.Since(start).Round(time.Millisecond))
		return s.teardown, nil
	}
}

func (s *Suite) teardown(failed bool) error {
	var exited error
	if gone := s.Bed.Exited(); len(gone) > 0 {
		exited = fmt.Errorf("test bed components exited: %v", gone)
	}
	if failed || exited != nil {
		fmt.Fprintln(os.Stderr, s.Logs())
	}
	return errors.Join(exited, s.Stop())
}

// StartSuite starts a Suite for one test, stopped when it ends (with every
// log when it failed).
func StartSuite(t *testing.T, o SuiteOptions) *Suite {
	t.Helper()
	s, err := NewSuite(o)
	if err != nil {
		t.Fatalf("starting the test bed: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(s.Logs())
		}
		if err := s.Stop(); err != nil {
			t.Errorf("stopping the test bed: %v", err)
		}
	})
	return s
}

// ServeWith runs serve with extra flags for the rest of the test, then
// with the suite's own again.
func (s *Suite) ServeWith(t *testing.T, extra ...string) *cluster.Serving {
	t.Helper()
	restart := func(args ...string) {
		if err := s.Serve.Stop(); err != nil {
			t.Errorf("stopping serve: %v", err)
		}
		srv, err := s.Cluster.Serve(args...)
		if err != nil {
			t.Fatalf("starting serve %v: %v", args, err)
		}
		s.Serve = srv
	}
	restart(append(slices.Clone(s.ServeArgs), extra...)...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve %v:\n%s", extra, s.Serve.Log())
		}
		restart(s.ServeArgs...)
	})
	return s.Serve
}

// ServeDown stops serve until up is called, or the test ends: shepherd
// down (a crash, a rollout) while the cluster goes on.
func (s *Suite) ServeDown(t *testing.T) (up func()) {
	t.Helper()
	if err := s.Serve.Stop(); err != nil {
		t.Errorf("stopping serve: %v", err)
	}
	down := true
	up = func() {
		t.Helper()
		if !down {
			return
		}
		srv, err := s.Cluster.Serve(s.ServeArgs...)
		if err != nil {
			t.Fatalf("starting serve again: %v", err)
		}
		s.Serve, down = srv, false
	}
	t.Cleanup(up)
	return up
}

// TrainerRuntime is one of the runtimes Trainer ships
// (manifests/base/runtimes/<file> of the pinned module), as it ships it.
func TrainerRuntime(file string) (*unstructured.Unstructured, error) {
	dir, err := ModuleDir("github.com/kubeflow/trainer/v2")
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifests", "base", "runtimes", file))
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := utilyaml.Unmarshal(raw, &u.Object); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if u.GroupVersionKind() != ClusterRuntimeGVK {
		return nil, fmt.Errorf("Trainer's %s is a %s, want a ClusterTrainingRuntime", file, u.GroupVersionKind())
	}
	return u, nil
}

// TorchRuntimeObject is Trainer's torch runtime as its module ships it.
func TorchRuntimeObject() (*unstructured.Unstructured, error) {
	u, err := TrainerRuntime("torch_distributed.yaml")
	if err != nil {
		return nil, err
	}
	if u.GetName() != TorchRuntime {
		return nil, fmt.Errorf("Trainer's torch_distributed.yaml is runtime %s, want %s", u.GetName(), TorchRuntime)
	}
	return u, nil
}

// CreateTorchRuntime creates Trainer's torch runtime (TorchRuntime),
// waiting for Trainer's webhook to answer; one that exists is kept.
func (s *Suite) CreateTorchRuntime(ctx context.Context) error {
	u, err := TorchRuntimeObject()
	if err != nil {
		return err
	}
	// Trainer's validating webhook may still be warming up its caches.
	if err := testkit.Poll(time.Second, time.Minute, func() error {
		if err := s.Cluster.Client.Create(ctx, u.DeepCopy()); !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	}); err != nil {
		return fmt.Errorf("creating ClusterTrainingRuntime %s: %w", TorchRuntime, err)
	}
	return nil
}

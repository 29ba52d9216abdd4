package frameworks

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/integrations"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// TestFrameworkCRDsInstalledAfterServeArePickedUp starts serve on a cluster
// without framework CRDs, then installs JobSet's, then Trainer's: each is
// picked up without a restart. Grove's are never installed and never hold
// readiness back.
func TestFrameworkCRDsInstalledAfterServeArePickedUp(t *testing.T) {
	ctx := context.Background()
	// Trainer v2.3.0's CRD carries activeDeadlineSeconds, so in auto
	// shepherd would leave the deadline to Trainer (not running here): on
	// makes shepherd's deadline controller the proof that the trainjob
	// controllers started.
	s := startServe(t, "--feature=trainjob-deadline=on")
	if code, body, err := s.Get("/readyz/" + integrations.ReadyzCheck); err != nil || code != http.StatusOK {
		t.Fatalf("/readyz/%s = %d %q %v, want 200", integrations.ReadyzCheck, code, body, err)
	}
	for _, f := range integrations.Frameworks {
		if v := gauge(t, f.Name); v != 0 {
			t.Errorf("shepherd_framework_active{framework=%q} = %v without its CRDs, want 0", f.Name, v)
		}
	}

	// JobSet alone: admission of a JobSet owned by a TrainJob must not
	// trip over the unserved TrainJob kind (D-WL-1 looks its owner up).
	install(t, api.JobSetGroup)
	testkit.Eventually(t, timeout, "the jobset framework to become active", func(context.Context) (bool, error) {
		return gauge(t, integrations.JobSet) == 1, nil
	})
	ns := env.Namespace(t)
	warns := &cluster.Warnings{}
	k := clientWithWarnings(t, warns)
	js := &jobsetv1alpha2.JobSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owned-by-a-trainjob", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: trainerv1alpha1.GroupVersion.String(), Kind: api.KindTrainJob, Name: "llama", UID: "0b3c6a52-5d0e-4a51-9d4e-2f1f7c3e9a10", Controller: ptr.To(true),
		}}},
		Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{Name: "node", Template: testkit.JobTemplate()}}},
	}
	if err := k.Create(ctx, js); err != nil {
		t.Fatalf("creating a JobSet owned by a TrainJob while Trainer is absent: %v", err)
	}
	if w := strings.Join(warns.Take(), "\n"); !strings.Contains(w, `TrainJob "llama" was not found`) {
		t.Errorf("admission warnings = %q, want D-WL-1's owner not found", w)
	}

	// Trainer: the lookups and the TrainJob controller start.
	install(t, api.TrainerGroup)
	testkit.Eventually(t, timeout, "the trainer framework to become active", func(context.Context) (bool, error) {
		return gauge(t, integrations.Trainer) == 1, nil
	})
	rt := testkit.ClusterTrainingRuntime("", "").GenerateName("ctr-").Set(int64(1), "spec", "mlPolicy", "numNodes").
		RuntimeJobs(jobsetv1alpha2.ReplicatedJob{Name: "node", Template: testkit.JobTemplate()}).Obj()
	if err := k.Create(ctx, rt); err != nil {
		t.Fatalf("creating a ClusterTrainingRuntime: %v", err)
	}
	tj := &trainerv1alpha1.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deadline"},
		Spec: trainerv1alpha1.TrainJobSpec{
			RuntimeRef:            trainerv1alpha1.RuntimeRef{Name: rt.GetName()},
			Trainer:               &trainerv1alpha1.Trainer{NumNodes: ptr.To[int32](1)},
			ActiveDeadlineSeconds: ptr.To[int64](1),
		},
	}
	// The runtime lookup (V-TJ-3) reads shepherd's cache, which sees the
	// runtime a moment after the apiserver stored it.
	testkit.Eventually(t, timeout, "the TrainJob to be admitted", func(ctx context.Context) (bool, error) {
		err := k.Create(ctx, tj.DeepCopy())
		if err != nil && strings.Contains(err.Error(), "V-TJ-3") {
			t.Logf("not admitted yet: %v", err)
			return false, nil
		}
		return err == nil, err
	})
	testkit.Eventually(t, timeout, "the TrainJob to fail with DeadlineExceeded", func(ctx context.Context) (bool, error) {
		var got trainerv1alpha1.TrainJob
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tj), &got); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, api.TrainJobFailed)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == api.ReasonDeadlineExceeded, nil
	})

	if code, body, err := s.Get("/readyz?verbose"); err != nil || code != http.StatusOK {
		t.Errorf("/readyz = %d %q %v after the frameworks arrived, want 200", code, body, err)
	}
	if v := gauge(t, integrations.Grove); v != 0 {
		t.Errorf("shepherd_framework_active{framework=\"grove\"} = %v, want 0 (its CRDs were never installed)", v)
	}
}

// TestRequiredFrameworkAbsentFailsServe: --framework-grove=on on a cluster
// without Grove's CRDs makes serve exit at start with an error naming them.
func TestRequiredFrameworkAbsentFailsServe(t *testing.T) {
	out, err := serveChild(t, "--framework-grove=on", "--framework-trainer=off", "--framework-jobset=off", "--disable-reconcilers")
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("serve = %v, want it to exit with an error naming Grove's missing CRDs; output:\n%s", err, out)
	}
	for _, want := range []string{"grove", "PodCliqueSet.grove.io", "PodClique.grove.io", "PodCliqueScalingGroup.grove.io"} {
		if !strings.Contains(out, want) {
			t.Errorf("serve's output does not name %s:\n%s", want, out)
		}
	}
}

// install creates the upstream CRDs of group and waits until the apiserver
// serves them.
func install(t *testing.T, group string) {
	t.Helper()
	all, err := cluster.FrameworkCRDs(cluster.UpstreamCRDs)
	if err != nil {
		t.Fatal(err)
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, c := range all {
		if c.Spec.Group == group {
			crds = append(crds, c)
			if err := env.Client.Create(context.Background(), c); err != nil {
				t.Fatalf("creating CRD %s: %v", c.Name, err)
			}
		}
	}
	if len(crds) == 0 {
		t.Fatalf("no upstream CRDs of %s", group)
	}
	if err := envtest.WaitForCRDs(env.Config, crds, envtest.CRDInstallOptions{MaxTime: timeout, PollInterval: 100 * time.Millisecond}); err != nil {
		t.Fatalf("waiting for the CRDs of %s: %v", group, err)
	}
}

// gauge is shepherd_framework_active{framework} on controller-runtime's
// registry, where serve, running in this process, registers it.
func gauge(t *testing.T, framework string) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "shepherd_framework_active" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "framework" && l.GetValue() == framework {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("shepherd_framework_active{framework=%q} is not registered", framework)
	return 0
}

func clientWithWarnings(t *testing.T, w rest.WarningHandler) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = w
	k, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

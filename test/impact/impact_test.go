// Package impact tests the commands that read a cluster through a
// kubeconfig, against a real kube-apiserver with the upstream CRDs: `shepherd
// audit --policy` (the dry run of a policy that is not applied yet, over the
// objects the cluster already stores) and `shepherd export --kubeconfig`
// (policies type-checked against the CRDs the cluster serves).
package impact

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/cmd/shepherd/app"
	"github.com/shepherd-k8s/shepherd/offline"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

var env *cluster.Cluster

func TestMain(m *testing.M) { cluster.RunMain(m, cluster.Options{}, &env) }

func create(t *testing.T, doc string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(context.Background(), u); err != nil {
		t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

const teamPolicy = `apiVersion: shepherd.dev/v1alpha1
kind: WorkloadPolicy
metadata: {name: team-label-required}
spec:
  match:
    resources:
    - apiGroups: [trainer.kubeflow.org]
      kinds: [TrainJob]
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: every TrainJob needs a team label
    fieldPath: metadata.labels
`

// brokenPolicy reads a field the served TrainJob schema does not have.
const brokenPolicy = `apiVersion: shepherd.dev/v1alpha1
kind: WorkloadPolicy
metadata: {name: broken}
spec:
  match:
    resources:
    - apiGroups: [trainer.kubeflow.org]
      kinds: [TrainJob]
  validations:
  - expression: "object.spec.noSuchField > 1"
`

// TestImpactAgainstTheCluster stores TrainJobs with no shepherd in the
// way, then asks what a policy not yet applied would deny: exactly the
// stored objects that break it, judged with the cluster's lookups (the
// runtime one of them names does not exist) and type-checked against the
// CRDs the cluster serves.
func TestImpactAgainstTheCluster(t *testing.T) {
	ns := env.Namespace(t)
	other := env.Namespace(t)
	create(t, `apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: impact-torch}
spec: {template: {spec: {replicatedJobs: [{name: node, template: {spec: {template: {spec: {containers: [{name: c, image: i}]}}}}}]}}}`)
	for _, tj := range []struct{ ns, name, labels, runtime string }{
		{ns, "labelled", "{team: vision}", "impact-torch"},
		{ns, "unlabelled", "{}", "impact-torch"},
		{other, "lost", "{}", "no-such-runtime"},
	} {
		create(t, `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: `+tj.name+`, namespace: `+tj.ns+`, labels: `+tj.labels+`}
spec: {runtimeRef: {name: `+tj.runtime+`}}`)
	}

	dir := t.TempDir()
	kubeconfig := testkit.WriteFile(t, dir, "kubeconfig", string(env.Env.KubeConfig))
	policy := testkit.WriteFile(t, dir, "policy.yaml", teamPolicy)

	run := func(wantCode int, args ...string) offline.ImpactReport {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := app.Main(append([]string{"audit", "--kubeconfig", kubeconfig, "-o", "json"}, args...), &out, &errOut); code != wantCode {
			t.Fatalf("exit %d, want %d\n%s%s", code, wantCode, out.String(), errOut.String())
		}
		var rep offline.ImpactReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return rep
	}
	names := func(rep offline.ImpactReport) []string {
		var out []string
		for _, o := range rep.Objects {
			for _, v := range o.Violations {
				out = append(out, o.Namespace+"/"+o.Name+" "+v.Rule)
			}
		}
		return out
	}

	// Other tests' namespaces may hold TrainJobs too: narrow to ours.
	rep := run(1, "--policy", policy, "-n", ns)
	if diff := cmp.Diff([]string{ns + "/unlabelled team-label-required"}, names(rep)); diff != "" {
		t.Errorf("violations in %s (-want +got):\n%s", ns, diff)
	}
	if rep.Evaluated != 2 {
		t.Errorf("evaluated %d TrainJobs in %s, want 2", rep.Evaluated, ns)
	}

	// With the built-ins, the lookup V-TJ-3 runs against what the cluster
	// stores: the runtime lost names is missing.
	rep = run(1, "--policy", policy, "-n", other, "--include-builtin")
	if diff := cmp.Diff([]string{other + "/lost team-label-required", other + "/lost V-TJ-3"}, names(rep)); diff != "" {
		t.Errorf("violations in %s (-want +got):\n%s", other, diff)
	}

	// Type-checked against the served CRDs: a field the served TrainJob
	// schema does not have is a compile error, exit 2, naming it.
	broken := testkit.WriteFile(t, dir, "broken.yaml", brokenPolicy)
	var out, errOut bytes.Buffer
	if code := app.Main([]string{"audit", "--kubeconfig", kubeconfig, "--policy", broken}, &out, &errOut); code != 2 {
		t.Fatalf("exit %d, want 2\n%s%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{`WorkloadPolicy "broken" does not compile`, "the CRDs", "spec.validations[0].expression"} {
		if !bytes.Contains(errOut.Bytes(), []byte(want)) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
		}
	}
}

// TestExportTypeChecksAgainstTheCluster: `shepherd export --kubeconfig`
// type-checks against the CRDs the cluster serves, so what it writes is
// what the apiserver there accepts, and a policy on a field the served
// schema lacks is refused, naming the cluster.
func TestExportTypeChecksAgainstTheCluster(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := testkit.WriteFile(t, dir, "kubeconfig", string(env.Env.KubeConfig))
	for _, sub := range []string{"vap", "map"} {
		var out, errOut bytes.Buffer
		if code := app.Main([]string{"export", sub, "--kubeconfig", kubeconfig}, &out, &errOut); code != 0 {
			t.Fatalf("export %s: exit %d\n%s", sub, code, errOut.String())
		}
		// Every policy it writes, the apiserver accepts (server-side dry
		// run: it type-checks them against what it serves too).
		n := 0
		for _, doc := range strings.Split(out.String(), "\n---\n") {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil || len(u.Object) == 0 {
				continue
			}
			if err := env.Client.Create(context.Background(), u, client.DryRunAll); err != nil {
				t.Errorf("export %s wrote %s %s, which the apiserver refuses: %v", sub, u.GetKind(), u.GetName(), err)
			}
			n++
		}
		if n < 10 {
			t.Errorf("export %s wrote %d objects", sub, n)
		}
	}
	broken := testkit.WriteFile(t, dir, "broken.yaml", brokenPolicy)
	var out, errOut bytes.Buffer
	if code := app.Main([]string{"export", "vap", "--kubeconfig", kubeconfig, "--policy", broken}, &out, &errOut); code != 2 {
		t.Fatalf("export of a policy on a field the cluster lacks: exit %d, want 2\n%s", code, errOut.String())
	}
	if !strings.Contains(errOut.String(), `"broken" does not compile`) {
		t.Errorf("stderr: %s", errOut.String())
	}
	if code := app.Main([]string{"export", "vap", "--kubeconfig", kubeconfig, "--crd", dir}, &out, &errOut); code != 2 {
		t.Errorf("--kubeconfig with --crd: exit %d, want 2", code)
	}
}

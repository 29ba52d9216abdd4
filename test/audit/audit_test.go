// Package audit tests the background audit of stored objects (package
// background) end to end: `shepherd serve` in a child process of the test
// binary (so it can be restarted), its webhooks registered with a real
// kube-apiserver serving the upstream CRDs, and objects created before the
// WorkloadPolicies that they violate exist.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/shepherd-k8s/shepherd/api"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/background"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

var env *cluster.Cluster

// timeout bounds every wait: generous, the machine is small and shared.
const timeout = 90 * time.Second

func TestMain(m *testing.M) {
	cluster.RunMain(m, cluster.Options{
		// shepherd's webhooks, registered and served by the replica, as in
		// a cluster: the objects go through admission.
		Webhooks: envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(cluster.RepoRoot(), "deploy", "webhook")},
			LocalServingHost: "127.0.0.1",
		},
	}, &env)
}

// serve starts a replica that leads alone, audits every 4 s, serves its
// metrics in plain HTTP and answers the apiserver's webhook calls.
func serve(t *testing.T) *cluster.Replica {
	t.Helper()
	// The webhook port the apiserver calls (StartReplica's own port is
	// for replicas behind a proxy).
	port := fmt.Sprintf("--webhook-port=%d", env.Env.WebhookInstallOptions.LocalServingPort)
	return env.StartReplica(t, "--leader-elect=false", "--metrics-secure=false", "--audit-interval=4s", "--zap-log-level=info", port)
}

func apply(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatalf("%v\n%s", err, manifest)
	}
	if err := env.Client.Create(context.Background(), u); err != nil {
		t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return u
}

func trainJob(ns, name string, nodes int) string {
	return testkit.TrainJob(ns, name, "audit-torch", int64(nodes)).YAML()
}

func podCliqueSet(ns, name string) string {
	return testkit.PodCliqueSet(ns, name, testkit.Clique("worker", 1, "server:v1", map[string]any{"minAvailable": 1})).YAML()
}

const runtime = `apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: audit-torch}
spec:
  template:
    spec:
      replicatedJobs:
      - {name: node, template: {spec: {template: {spec: {containers: [{name: node, image: torch:2}]}}}}}
`

// The policies: at most two nodes per TrainJob unless approved (a label:
// Trainer makes spec.trainer immutable, so a TrainJob is fixed by its
// metadata — which leaves its generation as it is), a team label on every
// PodCliqueSet.
const maxNodes = `apiVersion: shepherd.dev/v1alpha1
kind: WorkloadPolicy
metadata: {name: audit-max-nodes}
spec:
  action: Deny
  match:
    resources: [{apiGroups: [trainer.kubeflow.org], kinds: [TrainJob]}]
  validations:
  - expression: "!has(object.spec.trainer) || !has(object.spec.trainer.numNodes) || object.spec.trainer.numNodes <= 2 || (has(object.metadata.labels) && 'nodes-approved' in object.metadata.labels)"
    message: at most 2 nodes
    fieldPath: spec.trainer.numNodes
`

const teamLabel = `apiVersion: shepherd.dev/v1alpha1
kind: WorkloadPolicy
metadata: {name: audit-team-label}
spec:
  action: Audit
  match:
    resources: [{apiGroups: [grove.io], kinds: [PodCliqueSet]}]
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: a team label is required
    fieldPath: metadata.labels
`

func policy(ctx context.Context, name string) (*shepherdv1alpha1.WorkloadPolicy, error) {
	p := &shepherdv1alpha1.WorkloadPolicy{}
	return p, env.Client.Get(ctx, types.NamespacedName{Name: name}, p)
}

// waitViolations waits until policy name's status reports want violating
// objects and returns it.
func waitViolations(t *testing.T, name string, want int32) *shepherdv1alpha1.WorkloadPolicy {
	t.Helper()
	var p *shepherdv1alpha1.WorkloadPolicy
	testkit.Eventually(t, timeout, fmt.Sprintf("WorkloadPolicy %s reporting %d violations", name, want), func() (bool, string) {
		var err error
		if p, err = policy(context.Background(), name); err != nil {
			return false, err.Error()
		}
		if p.Status.Violations == nil {
			return false, "violations unset"
		}
		return *p.Status.Violations == want, fmt.Sprintf("violations %d", *p.Status.Violations)
	})
	return p
}

func samples(p *shepherdv1alpha1.WorkloadPolicy) []string {
	var out []string
	for _, s := range p.Status.ViolationSamples {
		out = append(out, fmt.Sprintf("%s %s/%s %s: %s", s.Kind, s.Namespace, s.Name, s.Field, s.Message))
	}
	return out
}

func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url) //nolint:gosec // local test URL
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v: %s", url, resp.StatusCode, err, b)
	}
	return b
}

// metric returns the line of series in r's /metrics, "" if absent.
func metric(t *testing.T, r *cluster.Replica, series string) string {
	t.Helper()
	for _, l := range strings.Split(string(get(t, "http://"+r.Metrics+"/metrics")), "\n") {
		if strings.HasPrefix(l, series+" ") {
			return l
		}
	}
	return ""
}

// printedViolations is the Violations column of `kubectl get
// workloadpolicy name`: the apiserver's Table of it.
func printedViolations(t *testing.T, name string) string {
	t.Helper()
	cfg := env.Config
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/apis/shepherd.dev/v1alpha1/workloadpolicies/"+name, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var tbl metav1.Table
	if err := json.Unmarshal(body, &tbl); err != nil {
		t.Fatalf("%s %s: %v: %s", req.URL, resp.Status, err, body)
	}
	var cols []string
	for _, c := range tbl.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if len(tbl.Rows) != 1 {
		t.Fatalf("table of %s: %d rows", name, len(tbl.Rows))
	}
	for i, c := range cols {
		if c == "Violations" {
			return fmt.Sprint(tbl.Rows[0].Cells[i])
		}
	}
	t.Fatalf("no Violations column among %v", cols)
	return ""
}

func TestStoredObjectsAreAudited(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	// shepherd's webhooks fail closed: it runs before anything is created.
	r := serve(t)
	rt := apply(t, runtime)
	// Before any policy exists: the objects, admitted.
	// tj-4 and tj-ok pass the policy; pcs-a and pcs-b lack the label.
	tjs := map[string]*unstructured.Unstructured{}
	for name, nodes := range map[string]int{"tj-1": 4, "tj-2": 3, "tj-3": 8, "tj-ok": 1} {
		tjs[name] = apply(t, trainJob(ns, name, nodes))
	}
	apply(t, podCliqueSet(ns, "pcs-a"))
	apply(t, podCliqueSet(ns, "pcs-b"))

	apply(t, maxNodes)
	apply(t, teamLabel)
	t.Cleanup(func() {
		for _, n := range []string{"audit-max-nodes", "audit-team-label"} {
			_ = env.Client.Delete(ctx, &shepherdv1alpha1.WorkloadPolicy{ObjectMeta: metav1.ObjectMeta{Name: n}})
		}
	})

	// Reported once applied, with the first samples in a fixed order.
	p := waitViolations(t, "audit-max-nodes", 3)
	want := []string{
		"TrainJob " + ns + "/tj-1 spec.trainer.numNodes: at most 2 nodes",
		"TrainJob " + ns + "/tj-2 spec.trainer.numNodes: at most 2 nodes",
		"TrainJob " + ns + "/tj-3 spec.trainer.numNodes: at most 2 nodes",
	}
	if got := samples(p); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("samples:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, api.ConditionPolicyReady); c == nil || c.Status != metav1.ConditionTrue || p.Status.ObservedGeneration != p.Generation {
		t.Errorf("the compile status beside the audit's figures: %+v, observedGeneration %d", p.Status.Conditions, p.Status.ObservedGeneration)
	}
	if p.Status.AuditedGeneration != p.Generation || p.Status.LastAuditTime == nil {
		t.Errorf("auditedGeneration %d (generation %d), lastAuditTime %v", p.Status.AuditedGeneration, p.Generation, p.Status.LastAuditTime)
	}
	waitViolations(t, "audit-team-label", 2)
	if got := printedViolations(t, "audit-max-nodes"); got != "3" {
		t.Errorf("kubectl get workloadpolicies shows Violations %q, want 3", got)
	}

	// Fixed, and deleted: the count drops.
	if err := env.Client.Patch(ctx, tjs["tj-1"], client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"nodes-approved":"true"}}}`))); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, tjs["tj-2"]); err != nil {
		t.Fatal(err)
	}
	p = waitViolations(t, "audit-max-nodes", 1)
	if got := samples(p); len(got) != 1 || !strings.Contains(got[0], "/tj-3 ") {
		t.Errorf("samples after the fix and the delete: %v, want tj-3 alone", got)
	}
	if got := metric(t, r, `shepherd_audit_violations{kind="TrainJob",rule="audit-max-nodes"}`); !strings.HasSuffix(got, " 1") {
		t.Errorf("gauge: %q, want 1", got)
	}

	// A built-in rule on stored objects: the runtime goes away, and every
	// TrainJob left now fails V-TJ-3 (a lookup), found by the interval's
	// pass: an AUDIT record each in /audit, and the gauge.
	if err := env.Client.Delete(ctx, rt); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, timeout, "the V-TJ-3 gauge at 3", func() (bool, string) {
		m := metric(t, r, `shepherd_audit_violations{kind="TrainJob",rule="V-TJ-3"}`)
		return strings.HasSuffix(m, " 3"), fmt.Sprintf("%q", m)
	})
	names := map[string]bool{}
	for _, rec := range cluster.AuditRecords(t, r.Metrics, url.Values{"rule": {"V-TJ-3"}, "namespace": {ns}}) {
		if rec.Operation != api.AuditOperation || rec.Kind != "TrainJob" || rec.Action != "Deny" || rec.User != "" {
			t.Errorf("audit record %+v: want operation AUDIT, a Deny of a TrainJob, no user", rec)
		}
		names[rec.Name] = true
	}
	if len(names) != 3 || !names["tj-1"] || !names["tj-3"] || !names["tj-ok"] {
		t.Errorf("V-TJ-3 audit records name %v, want tj-1, tj-3 and tj-ok", names)
	}
	var res background.Results
	if err := json.Unmarshal(get(t, "http://"+r.Metrics+"/audit/violations?namespace="+ns), &res); err != nil {
		t.Fatal(err)
	}
	if rr := res.Rules["V-TJ-3"]; rr == nil || rr.Objects != 3 || len(res.Namespaces[ns]) != 5 {
		t.Errorf("/audit/violations: V-TJ-3 %+v, %d violating objects in %s (want 3 and 5: three TrainJobs, two PodCliqueSets)", rr, len(res.Namespaces[ns]), ns)
	}

	// Restart: the figures are found again from scratch. The status is
	// made wrong while shepherd is away, so only a recount puts it right.
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	stale := []byte(`{"status":{"violations":99,"violationSamples":null}}`)
	for _, n := range []string{"audit-max-nodes", "audit-team-label"} {
		pol := &shepherdv1alpha1.WorkloadPolicy{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if err := env.Client.Status().Patch(ctx, pol, client.RawPatch(types.MergePatchType, stale)); err != nil {
			t.Fatal(err)
		}
	}
	r = serve(t)
	p = waitViolations(t, "audit-max-nodes", 1)
	if got := samples(p); len(got) != 1 || !strings.Contains(got[0], "/tj-3 ") {
		t.Errorf("samples after the restart: %v, want tj-3 alone", got)
	}
	waitViolations(t, "audit-team-label", 2)
	if got := printedViolations(t, "audit-team-label"); got != "2" {
		t.Errorf("kubectl get workloadpolicies shows Violations %q after the restart, want 2", got)
	}

	// A policy deleted: its gauge series goes.
	if err := env.Client.Delete(ctx, &shepherdv1alpha1.WorkloadPolicy{ObjectMeta: metav1.ObjectMeta{Name: "audit-team-label"}}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, timeout, "the deleted policy's gauge series gone", func() (bool, string) {
		m := metric(t, r, `shepherd_audit_violations{kind="PodCliqueSet",rule="audit-team-label"}`)
		return m == "", fmt.Sprintf("%q", m)
	})
}

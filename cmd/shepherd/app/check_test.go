package app

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// runtimeYAML asks for the Workload API the way Trainer v2.3.0's runtime CRD
// (the pinned schema check uses by default) allows: by annotation.
const runtimeYAML = `apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: torch
  annotations:
    shepherd.dev/pod-group-policy: workload
spec:
  template:
    spec:
      replicatedJobs:
      - name: node
        template: {spec: {template: {spec: {containers: [{name: c, image: i}]}}}}
`

const trainJobsYAML = `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: good
spec:
  runtimeRef: {name: torch}
  activeDeadlineSeconds: 3600
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: bad
spec:
  runtimeRef: {name: torch}
  activeDeadlineSeconds: 0
`

func runMain(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Main(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCheckJSONOutputAndExitCodeOnDenial(t *testing.T) {
	dir := t.TempDir()
	jobs := writeFile(t, dir, "jobs.yaml", trainJobsYAML)
	rt := writeFile(t, dir, "rt.yaml", runtimeYAML)
	code, out, errOut := runMain("check", "-f", jobs, "--context", rt, "-o", "json")
	if code != 1 {
		t.Fatalf("exit %d, want 1 (one object denied); stderr %s", code, errOut)
	}
	var results []map[string]any
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatalf("output is not a JSON list: %v\n%s", err, out)
	}
	if len(results) != 2 {
		t.Fatalf("%d results, want 2", len(results))
	}
	for _, k := range []string{"apiVersion", "kind", "namespace", "name", "operation", "allowed", "violations", "warnings", "patch", "object"} {
		if _, ok := results[0][k]; !ok {
			t.Errorf("result has no %q field: %v", k, results[0])
		}
	}
	if results[0]["allowed"] != true || results[1]["allowed"] != false {
		t.Errorf("allowed = %v, %v; want true, false", results[0]["allowed"], results[1]["allowed"])
	}
	viols := results[1]["violations"].([]any)
	if len(viols) != 1 {
		t.Fatalf("violations %v, want one", viols)
	}
	v := viols[0].(map[string]any)
	if v["rule"] != "V-TJ-1" || v["field"] != "spec.activeDeadlineSeconds" || v["action"] != "Deny" || v["message"] == "" {
		t.Errorf("violation %v", v)
	}
	if results[1]["namespace"] != "default" || results[1]["operation"] != "CREATE" {
		t.Errorf("namespace/operation %v/%v", results[1]["namespace"], results[1]["operation"])
	}
}

func TestCheckAllowedExitsZeroAndShowsDefaults(t *testing.T) {
	dir := t.TempDir()
	pcs := writeFile(t, dir, "pcs.json", `{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"p","annotations":{"shepherd.dev/workload-type":"Training"}},"spec":{"replicas":1,"template":{"cliques":[{"name":"a","spec":{"roleName":"a","replicas":2,"podSpec":{"containers":[{"name":"c","image":"i"}]}}}]}}}`)
	code, out, errOut := runMain("check", "-f", dir, "-o", "yaml")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s, out %s", code, errOut, out)
	}
	// On Grove's schema the restart budget is defaulted into its carrier,
	// and no terminationDelay of 0s (Grove's webhook would reject it).
	for _, want := range []string{"/metadata/annotations/shepherd.dev~1max-restarts", "restartPolicy: Never", "allowed: true"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "/spec/template/terminationDelay") || strings.Contains(out, "/spec/trainingSpec") {
		t.Errorf("defaults written where Grove's schema has no field or Grove rejects them:\n%s", out)
	}
	// The same in the seed designs' shape, against CRDs that carry it.
	seed := writeFile(t, t.TempDir(), "pcs.json", `{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"p"},"spec":{"replicas":1,"workloadType":"Training","template":{"cliques":[{"name":"a","spec":{"replicas":2,"podSpec":{"containers":[{"name":"c","image":"i"}]}}}]}}}`)
	code, out, errOut = runMain("check", "-f", seed, "-o", "yaml", "--crd", "../../../test/seedcrds")
	if code != 0 {
		t.Fatalf("seed shape: exit %d, stderr %s, out %s", code, errOut, out)
	}
	for _, want := range []string{"/spec/template/terminationDelay", "/spec/trainingSpec", "restartPolicy: Never", "allowed: true"} {
		if !strings.Contains(out, want) {
			t.Errorf("seed shape: output lacks %q:\n%s", want, out)
		}
	}
	_ = pcs
}

// TestCheckSeedFieldOnUpstreamSchema: a seed field the target schema lacks
// is what the apiserver rejects under Strict and drops under Warn; check
// says so, naming the field and the annotation that carries it instead.
func TestCheckSeedFieldOnUpstreamSchema(t *testing.T) {
	f := writeFile(t, t.TempDir(), "pcs.yaml", `apiVersion: grove.io/v1alpha1
kind: PodCliqueSet
metadata: {name: p}
spec:
  replicas: 1
  workloadType: Training
  template:
    cliques:
    - {name: a, spec: {roleName: a, replicas: 1, podSpec: {restartPolicy: Never, containers: [{name: c, image: i}]}}}
`)
	code, out, _ := runMain("check", "-f", f)
	if code != 1 || !strings.Contains(out, "spec.workloadType: unknown field") || !strings.Contains(out, "annotation shepherd.dev/workload-type") {
		t.Errorf("Strict: exit %d, want 1 with an unknown-field denial naming the carrier:\n%s", code, out)
	}
	code, out, _ = runMain("check", "-f", f, "--field-validation", "Warn")
	if code != 0 || !strings.Contains(out, "warn  spec.workloadType: unknown field") {
		t.Errorf("Warn: exit %d, want 0 with an unknown-field warning:\n%s", code, out)
	}
	if code, out, _ = runMain("check", "-f", f, "--crd", "../../../test/seedcrds"); code != 0 {
		t.Errorf("against CRDs with the seed field: exit %d:\n%s", code, out)
	}
	if code, _, errOut := runMain("check", "-f", f, "--field-validation", "Lax"); code != 2 || !strings.Contains(errOut, "--field-validation") {
		t.Errorf("bad --field-validation: exit %d, stderr %s", code, errOut)
	}
}

func TestCheckTextOutputIsOneLinePerVerdictWithIndentedViolations(t *testing.T) {
	dir := t.TempDir()
	jobs := writeFile(t, dir, "jobs.yaml", trainJobsYAML)
	rt := writeFile(t, dir, "rt.yaml", runtimeYAML)
	_, out, _ := runMain("check", "-f", jobs, "--context", rt)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || lines[0] != "TrainJob default/good (CREATE): allowed" || lines[1] != "TrainJob default/bad (CREATE): DENIED" ||
		!strings.HasPrefix(lines[2], "    deny  spec.activeDeadlineSeconds: ") || !strings.HasSuffix(lines[2], "[V-TJ-1]") {
		t.Errorf("text output:\n%s", out)
	}
}

func TestCheckMalformedFileIsExit2WithPosition(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, dir, "bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n")
	code, out, errOut := runMain("check", "-f", bad)
	if code != 2 {
		t.Fatalf("exit %d, want 2; out %s", code, out)
	}
	if !strings.Contains(errOut, "bad.yaml:") || !strings.Contains(errOut, "invalid YAML") {
		t.Errorf("stderr %q does not name the file and the YAML error", errOut)
	}
	// The error is in the second document: its line is counted from the
	// start of the file (line 8 or 9 depending on where the parser stops).
	if !strings.Contains(errOut, "bad.yaml:8:") && !strings.Contains(errOut, "bad.yaml:9:") {
		t.Errorf("stderr %q does not give the absolute line", errOut)
	}
}

func TestCheckUsageErrorsAreExit2(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, dir, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
	for name, args := range map[string][]string{
		"no files":           {"check"},
		"bad output":         {"check", "-f", f, "-o", "xml"},
		"bad operation":      {"check", "-f", f, "--operation", "PATCH"},
		"update without old": {"check", "-f", f, "--operation", "UPDATE"},
		"missing file":       {"check", "-f", filepath.Join(dir, "nope.yaml")},
		"unknown flag":       {"check", "--frobnicate"},
	} {
		if code, _, _ := runMain(args...); code != 2 {
			t.Errorf("%s: exit %d, want 2", name, code)
		}
	}
}

func TestCheckUnknownKindsAreAllowedUntouched(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, dir, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n")
	code, out, _ := runMain("check", "-f", f, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var results []CheckResult
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || !results[0].Allowed || len(results[0].Patch) != 0 || len(results[0].Violations) != 0 {
		t.Errorf("results %+v", results)
	}
}

func TestCheckUpdateWithOld(t *testing.T) {
	dir := t.TempDir()
	old := writeFile(t, dir, "old.yaml", "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: tj}\nspec: {runtimeRef: {name: torch}, activeDeadlineSeconds: 60, trainer: {numNodes: 2}}\n")
	cur := writeFile(t, dir, "new.yaml", "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: tj}\nspec: {runtimeRef: {name: torch}, activeDeadlineSeconds: 120, trainer: {numNodes: 4}}\n")
	rt := writeFile(t, dir, "rt.yaml", runtimeYAML)
	code, out, _ := runMain("check", "-f", cur, "--old", old, "--context", rt, "-o", "json")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	var results []CheckResult
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatal(err)
	}
	rules := map[string]bool{}
	for _, v := range results[0].Violations {
		rules[v.Rule] = true
	}
	if results[0].Operation != "UPDATE" || !rules["V-TJ-2"] || !rules["V-TJ-4"] {
		t.Errorf("want an UPDATE denied by V-TJ-2 and V-TJ-4, got %+v", results[0])
	}
}

func TestCheckNoWorkloadAPI(t *testing.T) {
	dir := t.TempDir()
	rt := writeFile(t, dir, "rt.yaml", runtimeYAML)
	if code, _, _ := runMain("check", "-f", rt); code != 0 {
		t.Errorf("with the Workload API assumed served: exit %d, want 0", code)
	}
	code, out, _ := runMain("check", "-f", rt, "--no-workload-api")
	if code != 1 || !strings.Contains(out, "[V-TR-7]") {
		t.Errorf("--no-workload-api: exit %d, out %s; want a V-TR-7 denial", code, out)
	}
}

func TestCheckWithPolicy(t *testing.T) {
	dir := t.TempDir()
	jobs := writeFile(t, dir, "jobs.yaml", trainJobsYAML)
	rt := writeFile(t, dir, "rt.yaml", runtimeYAML)
	pol := writeFile(t, dir, "policy.yaml", `apiVersion: shepherd.dev/v1alpha1
kind: WorkloadPolicy
metadata: {name: short-jobs}
spec:
  action: Warn
  match:
    resources: [{apiGroups: [trainer.kubeflow.org], kinds: [TrainJob]}]
  validations:
  - expression: "object.spec.?activeDeadlineSeconds.orValue(0) <= 1800"
    message: "keep TrainJobs under half an hour"
    fieldPath: spec.activeDeadlineSeconds
`)
	_, out, errOut := runMain("check", "-f", jobs, "--context", rt, "--policy", pol)
	if !strings.Contains(out, "warn  spec.activeDeadlineSeconds: keep TrainJobs under half an hour [short-jobs]") {
		t.Errorf("policy warning missing:\n%s\n%s", out, errOut)
	}
	broken := writeFile(t, dir, "broken.yaml", strings.Replace(mustRead(t, pol), "activeDeadlineSeconds.orValue", "activeDeadline.orValue", 1))
	code, _, errOut := runMain("check", "-f", jobs, "--context", rt, "--policy", broken)
	if code != 2 || !strings.Contains(errOut, "short-jobs") || !strings.Contains(errOut, "spec.validations[0].expression") {
		t.Errorf("a policy that does not compile: exit %d, stderr %s", code, errOut)
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

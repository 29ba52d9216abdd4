package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shepherd-k8s/shepherd/offline"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

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
	jobs := testkit.WriteFile(t, dir, "jobs.yaml", trainJobsYAML)
	rt := testkit.WriteFile(t, dir, "rt.yaml", runtimeYAML)
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
	pcs := testkit.WriteFile(t, dir, "pcs.json", `{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"p","annotations":{"shepherd.dev/workload-type":"Training"}},"spec":{"replicas":1,"template":{"cliques":[{"name":"a","spec":{"roleName":"a","replicas":2,"podSpec":{"containers":[{"name":"c","image":"i"}]}}}]}}}`)
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
	seed := testkit.WriteFile(t, t.TempDir(), "pcs.json", `{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"p"},"spec":{"replicas":1,"workloadType":"Training","template":{"cliques":[{"name":"a","spec":{"replicas":2,"podSpec":{"containers":[{"name":"c","image":"i"}]}}}]}}}`)
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
	f := testkit.WriteFile(t, t.TempDir(), "pcs.yaml", `apiVersion: grove.io/v1alpha1
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
	jobs := testkit.WriteFile(t, dir, "jobs.yaml", trainJobsYAML)
	rt := testkit.WriteFile(t, dir, "rt.yaml", runtimeYAML)
	_, out, _ := runMain("check", "-f", jobs, "--context", rt)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// check judges V-TJ-1 and says that on a cluster serving the pinned
	// Trainer CRD its minimum answers first (issue 31).
	if len(lines) != 4 || lines[0] != "TrainJob default/good (CREATE): allowed" || lines[1] != "TrainJob default/bad (CREATE): DENIED" ||
		!strings.HasPrefix(lines[2], "    deny  spec.activeDeadlineSeconds: ") || !strings.HasSuffix(lines[2], "(shepherd V-TJ-1)") ||
		!strings.HasPrefix(lines[3], "          on the cluster, answered first by the TrainJob CRD (minimum 1 on spec.activeDeadlineSeconds") {
		t.Errorf("text output:\n%s", out)
	}
}

func TestCheckMalformedFileIsExit2WithPosition(t *testing.T) {
	dir := t.TempDir()
	bad := testkit.WriteFile(t, dir, "bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n")
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
	f := testkit.WriteFile(t, dir, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
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
	f := testkit.WriteFile(t, dir, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n")
	code, out, _ := runMain("check", "-f", f, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var results []offline.CheckResult
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || !results[0].Allowed || len(results[0].Patch) != 0 || len(results[0].Violations) != 0 {
		t.Errorf("results %+v", results)
	}
}

func TestCheckUpdateWithOld(t *testing.T) {
	dir := t.TempDir()
	old := testkit.WriteFile(t, dir, "old.yaml", "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: tj}\nspec: {runtimeRef: {name: torch}, activeDeadlineSeconds: 60, trainer: {numNodes: 2}}\n")
	cur := testkit.WriteFile(t, dir, "new.yaml", "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: tj}\nspec: {runtimeRef: {name: torch}, activeDeadlineSeconds: 120, trainer: {numNodes: 4}}\n")
	rt := testkit.WriteFile(t, dir, "rt.yaml", runtimeYAML)
	code, out, _ := runMain("check", "-f", cur, "--old", old, "--context", rt, "-o", "json")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	var results []offline.CheckResult
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
	rt := testkit.WriteFile(t, dir, "rt.yaml", runtimeYAML)
	if code, _, _ := runMain("check", "-f", rt); code != 0 {
		t.Errorf("with the Workload API assumed served: exit %d, want 0", code)
	}
	code, out, _ := runMain("check", "-f", rt, "--no-workload-api")
	if code != 1 || !strings.Contains(out, "(shepherd V-TR-7)") {
		t.Errorf("--no-workload-api: exit %d, out %s; want a V-TR-7 denial", code, out)
	}
}

func TestCheckWithPolicy(t *testing.T) {
	dir := t.TempDir()
	jobs := testkit.WriteFile(t, dir, "jobs.yaml", trainJobsYAML)
	rt := testkit.WriteFile(t, dir, "rt.yaml", runtimeYAML)
	pol := testkit.WriteFile(t, dir, "policy.yaml", `apiVersion: shepherd.dev/v1alpha1
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
	if !strings.Contains(out, "warn  spec.activeDeadlineSeconds: keep TrainJobs under half an hour (shepherd short-jobs)") {
		t.Errorf("policy warning missing:\n%s\n%s", out, errOut)
	}
	broken := testkit.WriteFile(t, dir, "broken.yaml", strings.Replace(mustRead(t, pol), "activeDeadlineSeconds.orValue", "activeDeadline.orValue", 1))
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

// TestCheckDocumentWithoutTypeMetaIsExit2: a document without apiVersion
// or kind is refused (exit 2) at its file and line, saying what to add;
// it used to be judged "allowed" as an object of no kind.
func TestCheckDocumentWithoutTypeMetaIsExit2(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content string
		want          []string
	}{{
		name: "no apiVersion",
		// The second document starts on line 6, after a comment.
		content: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\n# the job\nkind: TrainJob\nmetadata: {name: tj}\nspec: {runtimeRef: {name: torch}}\n",
		want:    []string{"x.yaml:6: document 2 (kind TrainJob) has no apiVersion; add apiVersion: trainer.kubeflow.org/v1alpha1"},
	}, {
		name:    "no kind",
		content: "apiVersion: trainer.kubeflow.org/v1alpha1\nmetadata: {name: tj}\nspec: {runtimeRef: {name: torch}}\n",
		want:    []string{"x.yaml:1: document 1 (apiVersion trainer.kubeflow.org/v1alpha1) has no kind; add kind: one of ClusterTrainingRuntime, TrainJob, TrainingRuntime"},
	}, {
		name:    "neither",
		content: "metadata: {name: tj}\nspec: {}\n",
		want:    []string{"x.yaml:1: document 1 has neither apiVersion nor kind; add both"},
	}, {
		name:    "an item of a List",
		content: "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n- {apiVersion: v1, metadata: {name: b}}\n",
		want:    []string{"x.yaml:1: item 2 of the List in document 1 (apiVersion v1) has no kind; add kind"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := testkit.WriteFile(t, dir, "x.yaml", tc.content)
			code, out, errOut := runMain("check", "-f", f)
			if code != 2 {
				t.Fatalf("exit %d, want 2; out %s; stderr %s", code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
			if out != "" {
				t.Errorf("a verdict was printed for input that cannot be judged:\n%s", out)
			}
		})
	}
}

// TestCheckOldMustBeTheSameObject: --old is the stored version of the
// object it is paired with; another object would be judged as an UPDATE
// that changes everything (false "immutable" errors), so it is refused,
// saying what differs.
func TestCheckOldMustBeTheSameObject(t *testing.T) {
	dir := t.TempDir()
	cur := testkit.WriteFile(t, dir, "new.yaml", "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: tj}\nspec: {runtimeRef: {name: torch}, activeDeadlineSeconds: 60}\n")
	for _, tc := range []struct {
		name, old string
		want      []string
	}{{
		name: "another kind",
		old:  "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: tj}\nspec: {}\n",
		want: []string{"new.yaml:1: --old ", "old.yaml:1 is another object (kind JobSet.jobset.x-k8s.io, not TrainJob.trainer.kubeflow.org)"},
	}, {
		name: "another name",
		old:  "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: other}\nspec: {runtimeRef: {name: torch}, activeDeadlineSeconds: 60}\n",
		want: []string{`(name "other", not "tj")`},
	}, {
		name: "another namespace",
		old:  "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: tj, namespace: team-a}\nspec: {runtimeRef: {name: torch}, activeDeadlineSeconds: 60}\n",
		want: []string{`(namespace "team-a", not "default")`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			old := testkit.WriteFile(t, dir, "old.yaml", tc.old)
			code, out, errOut := runMain("check", "-f", cur, "--old", old)
			if code != 2 {
				t.Fatalf("exit %d, want 2; out %s; stderr %s", code, out, errOut)
			}
			for _, w := range append(tc.want, "--old must hold the stored version of the same object") {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
		})
	}
	// The same object (another version of the same group and kind would do
	// too) is judged as an UPDATE.
	old := testkit.WriteFile(t, dir, "old.yaml", "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: tj, namespace: default}\nspec: {runtimeRef: {name: torch}, activeDeadlineSeconds: 60}\n")
	if code, out, errOut := runMain("check", "-f", cur, "--old", old); code != 0 || !strings.Contains(out, "TrainJob default/tj (UPDATE): allowed") {
		t.Errorf("the same object: exit %d, out %s, stderr %s", code, out, errOut)
	}
	// With several objects, each finds its own; one without is refused.
	two := testkit.WriteFile(t, dir, "two.yaml", mustRead(t, cur)+"---\n"+strings.Replace(mustRead(t, cur), "name: tj", "name: tj2", 1))
	code, _, errOut := runMain("check", "-f", two, "--old", old)
	if code != 2 || !strings.Contains(errOut, "two.yaml:6: no object in --old is the stored version of TrainJob.trainer.kubeflow.org default/tj2") {
		t.Errorf("an object without its stored version: exit %d, stderr %s", code, errOut)
	}
}

// withStdin runs f with os.Stdin reading content, as a shell pipe would.
func withStdin(t *testing.T, content string, f func()) {
	t.Helper()
	p := testkit.WriteFile(t, t.TempDir(), "stdin", content)
	in, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	saved := os.Stdin
	os.Stdin = in
	defer func() { os.Stdin = saved }()
	f()
}

func TestCheckReadsStdin(t *testing.T) {
	dir := t.TempDir()
	rt := testkit.WriteFile(t, dir, "rt.yaml", runtimeYAML)
	withStdin(t, trainJobsYAML, func() {
		code, out, errOut := runMain("check", "-f", "-", "--context", rt)
		if code != 1 || !strings.Contains(out, "TrainJob default/good (CREATE): allowed") || !strings.Contains(out, "TrainJob default/bad (CREATE): DENIED") {
			t.Errorf("-f -: exit %d, out %s, stderr %s", code, out, errOut)
		}
	})
	// A stored object piped in, as from kubectl get -o yaml.
	cur := testkit.WriteFile(t, dir, "new.yaml", "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: tj}\nspec: {runtimeRef: {name: torch}, activeDeadlineSeconds: 120}\n")
	withStdin(t, "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: tj}\nspec: {runtimeRef: {name: torch}, activeDeadlineSeconds: 60}\n", func() {
		code, out, errOut := runMain("check", "-f", cur, "--old", "-", "--context", rt)
		if code != 1 || !strings.Contains(out, "(shepherd V-TJ-2)") {
			t.Errorf("--old -: exit %d, out %s, stderr %s; want V-TJ-2's denial of the changed deadline", code, out, errOut)
		}
	})
	// Errors in it name <stdin> and the line.
	withStdin(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: TrainJob\nmetadata: {name: tj}\n", func() {
		code, _, errOut := runMain("check", "-f", "-")
		if code != 2 || !strings.Contains(errOut, "<stdin>:5: document 2 (kind TrainJob) has no apiVersion") {
			t.Errorf("bad document on stdin: exit %d, stderr %s", code, errOut)
		}
	})
	// It can be read once.
	withStdin(t, trainJobsYAML, func() {
		code, _, errOut := runMain("check", "-f", "-", "--old", "-")
		if code != 2 || !strings.Contains(errOut, "standard input (-) can be read only once") {
			t.Errorf("stdin twice: exit %d, stderr %s", code, errOut)
		}
	})
}

// slowPolicies are WorkloadPolicies whose expressions each run until the
// per-expression cost limit stops them (three comprehensions nested over
// the list): a second or more per policy, much longer than any real rule.
func slowPolicies(n int) string {
	var docs []string
	for p := range n {
		var vals []string
		for v := range 4 {
			vals = append(vals, fmt.Sprintf(`  - expression: "object.spec.trainer.env.all(a, object.spec.trainer.env.all(b, object.spec.trainer.env.all(c, a.name != '%d')))"
    message: slow %d`, v, v))
		}
		docs = append(docs, fmt.Sprintf(`apiVersion: shepherd.dev/v1alpha1
kind: WorkloadPolicy
metadata: {name: slow-%d}
spec:
  match:
    resources: [{apiGroups: [trainer.kubeflow.org], kinds: [TrainJob]}]
  validations:
%s
`, p, strings.Join(vals, "\n")))
	}
	return strings.Join(docs, "---\n")
}

// trainJobWithEnv is a TrainJob with an env list of n items.
func trainJobWithEnv(n int) string {
	var sb strings.Builder
	sb.WriteString("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: big}\nspec:\n  runtimeRef: {name: torch}\n  trainer:\n    env:\n")
	for i := range n {
		fmt.Fprintf(&sb, "    - {name: E%d, value: v}\n", i)
	}
	return sb.String()
}

// TestCheckTimeout: an object whose rules run past --timeout is an error
// naming its file, line and the flag (exit 2), not a hang. The test
// asserts the outcome, never a duration.
func TestCheckTimeout(t *testing.T) {
	dir := t.TempDir()
	// 100 items (Trainer's schema allows 128): the object itself is
	// admitted in milliseconds; the policies' expressions run for seconds
	// (about 20 s here without --timeout).
	job := testkit.WriteFile(t, dir, "job.yaml", trainJobWithEnv(100))
	rt := testkit.WriteFile(t, dir, "rt.yaml", runtimeYAML)
	slow := testkit.WriteFile(t, dir, "slow.yaml", slowPolicies(5))
	if code, out, errOut := runMain("check", "-f", job, "--context", rt, "--timeout", "200ms"); code != 0 {
		t.Fatalf("without the slow policies: exit %d, out %s, stderr %s", code, out, errOut)
	}
	code, out, errOut := runMain("check", "-f", job, "--context", rt, "--policy", slow, "--timeout", "200ms")
	if code != 2 {
		t.Fatalf("exit %d, want 2; out %.500s; stderr %s", code, out, errOut)
	}
	want := "job.yaml:1: TrainJob default/big: admission did not finish within --timeout=200ms: a rule takes too long on this object"
	if !strings.Contains(errOut, want) {
		t.Errorf("stderr %q lacks %q", errOut, want)
	}
	if code, _, errOut := runMain("check", "-f", job, "--timeout", "0s"); code != 2 || !strings.Contains(errOut, "--timeout must be positive") {
		t.Errorf("--timeout 0s: exit %d, stderr %s", code, errOut)
	}
	// The default is in --help.
	if _, out, _ := runMain("check", "--help"); !strings.Contains(out, "--timeout duration") || !strings.Contains(out, "(default 10s)") {
		t.Errorf("--help does not document --timeout and its default:\n%s", out)
	}
}

// TestCheckWrongTypeIsDeniedLikeTheAPIServer: a field of the wrong type is
// denied with the apiserver's own schema error, naming the field and the
// type it must have, and no rule runs on the object (no CEL errors about
// overloads, no lookup).
func TestCheckWrongTypeIsDeniedLikeTheAPIServer(t *testing.T) {
	f := testkit.WriteFile(t, t.TempDir(), "tj.yaml", "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: tj}\nspec:\n  runtimeRef: {name: missing}\n  activeDeadlineSeconds: 0\n  trainer: {numNodes: two}\n")
	code, out, errOut := runMain("check", "-f", f, "-o", "json")
	if code != 1 {
		t.Fatalf("exit %d, want 1 (denied); stderr %s", code, errOut)
	}
	var results []offline.CheckResult
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatal(err)
	}
	// The apiserver's other error on this object comes with it: its answer
	// is complete.
	want := []offline.CheckViolation{{
		Rule:    "schema",
		Field:   "spec.activeDeadlineSeconds",
		Message: "Invalid value: 0: spec.activeDeadlineSeconds in body should be greater than or equal to 1",
		Action:  "Deny",
	}, {
		Rule:    "schema",
		Field:   "spec.trainer.numNodes",
		Message: `Invalid value: "string": spec.trainer.numNodes in body must be of type integer: "string"`,
		Action:  "Deny",
	}}
	if len(results) != 1 || results[0].Allowed {
		t.Fatalf("results %+v", results)
	}
	// Only the schema's answer: V-TJ-1 (the deadline again, in shepherd's
	// words) and V-TJ-3 (no such runtime) would deny a well-typed object,
	// but do not run on this one.
	if diff := cmp.Diff(want, results[0].Violations); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
	_, out, _ = runMain("check", "-f", f)
	if !strings.Contains(out, `deny  spec.trainer.numNodes: Invalid value: "string": spec.trainer.numNodes in body must be of type integer: "string" [schema]`) {
		t.Errorf("text output:\n%s", out)
	}
}

// TestCheckDeepDocumentOutputIsProportional: what check prints grows with
// the input, however deep or long it is. Indenting every level of a
// 5,000-level document printed 50 MB of JSON for 20 kB.
func TestCheckDeepDocumentOutputIsProportional(t *testing.T) {
	// Grove's schema keeps whatever a device config's opaque parameters
	// hold, so the nesting reaches admission and the printed object.
	pcs := func(parameters string) string {
		return `{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"deep"},"spec":{"replicas":1,"template":{` +
			`"cliques":[{"name":"a","spec":{"roleName":"a","replicas":1,"podSpec":{"containers":[{"name":"c","image":"i"}]}}}],` +
			`"resourceClaimTemplates":[{"name":"gpu","templateSpec":{"spec":{"devices":{"config":[{"opaque":{"driver":"gpu.example.com","parameters":` +
			parameters + `}}]}}}}]}}}`
	}
	items := make([]string, 40000)
	for i := range items {
		items[i] = fmt.Sprintf(`{"i":%d}`, i)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		doc     string
		formats []string
	}{
		{"5,000 levels", pcs(strings.Repeat(`{"a":[`, 2500) + `"x"` + strings.Repeat(`]}`, 2500)), []string{"text", "json", "yaml"}},
		// Only the formats that print the object: the list takes a second
		// or two to admit.
		{"40,000-item list", pcs(`{"items":[` + strings.Join(items, ",") + `]}`), []string{"json", "yaml"}},
	} {
		name, doc := tc.name, tc.doc
		f := testkit.WriteFile(t, dir, "doc.json", doc)
		for _, format := range tc.formats {
			code, out, errOut := runMain("check", "-f", f, "-o", format)
			if code != 0 {
				t.Fatalf("%s -o %s: exit %d, stderr %s", name, format, code, errOut)
			}
			// JSON indents each list item at its depth (about 20 levels
			// here): a few times the compact input, never its square.
			if limit := 10*len(doc) + 4096; len(out) > limit {
				t.Errorf("%s -o %s: %d bytes out for %d in (limit %d)", name, format, len(out), len(doc), limit)
			}
		}
	}
}

// TestUnknownRuleIDIsAnError: a mistyped --disable-rule is an error listing
// the valid IDs, in every command that takes the flag, not a rule left on.
func TestUnknownRuleIDIsAnError(t *testing.T) {
	for _, args := range [][]string{
		{"check", "-f", filepath.Join("..", "..", "..", "examples", "valid"), "--disable-rule", "V-TJ-99"},
		{"export", "rules", "--disable-rule", "V-TJ-99"},
		{"test", shippedSuites, "--disable-rule", "V-TJ-99"},
		// serve refuses it before it connects to anything.
		{"serve", "--kubeconfig", filepath.Join(t.TempDir(), "none"), "--disable-rule", "V-TJ-99"},
		{"serve", "--kubeconfig", filepath.Join(t.TempDir(), "none"), "--disable-rules", "V-TJ-99"},
	} {
		code, _, errOut := runMain(args...)
		if code != 2 || !strings.Contains(errOut, "unknown rule ID V-TJ-99") || !strings.Contains(errOut, "V-TJ-1") {
			t.Errorf("shepherd %v: exit %d, stderr %q; want 2 naming V-TJ-99 and listing the valid IDs", args, code, errOut)
		}
	}
}

// TestRuleIDsComplete: the shell completes --disable-rule with built-in
// rule IDs, the last of a comma-separated list too.
func TestRuleIDsComplete(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		not  string
	}{
		{args: []string{"__complete", "check", "--disable-rule", "V-TJ"}, want: "V-TJ-1\n", not: "V-PCS-1"},
		{args: []string{"__complete", "export", "rules", "--disable-rule", "V-TJ-1,D-JS"}, want: "V-TJ-1,D-JS-1\n", not: "V-TJ-2"},
		{args: []string{"__complete", "serve", "--disable-rule", "V-JS-"}, want: "V-JS-5\n"},
	} {
		code, out, errOut := runMain(tc.args...)
		if code != 0 || !strings.Contains(out, tc.want) || (tc.not != "" && strings.Contains(out, tc.not)) {
			t.Errorf("shepherd %v: exit %d, out %q (stderr %q); want %q and not %q", tc.args, code, out, errOut, tc.want, tc.not)
		}
	}
}

package native

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/corpus"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

// TestExamplesAdmittedAndDefaulted applies every example of examples/valid:
// each is admitted, each PodCliqueSet and JobSet stored as `shepherd check`
// defaults it (the MutatingAdmissionPolicies did), and shepherd's webhooks
// are called only for the requests that need a lookup or discovery — the
// two runtimes (V-TR-7: they use the Workload API) and the TrainJob (V-TJ-3)
// — where the webhook mode calls the validating webhook for every one of
// the 10 objects and the mutating one for the JobSets and PodCliqueSets.
func TestExamplesAdmittedAndDefaulted(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	waitForPolicies(t, ns)
	examples := readExamples(t, "valid")
	if len(examples) != 10 {
		t.Fatalf("%d objects in examples/valid, want 10: the examples moved", len(examples))
	}
	chain, err := webhook.NewChain(webhook.ChainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := webhookCalls(t)
	calls := map[string]int{}
	defaulted := 0
	for _, o := range examples {
		o.SetNamespace(ns)
		if o.GetKind() == "ClusterTrainingRuntime" {
			t.Cleanup(func() { _ = env.Client.Delete(ctx, o.DeepCopy()) })
		}
		if o.GetKind() == "TrainJob" {
			// V-TJ-3 looks its runtime up in shepherd's informer cache:
			// wait until the cache has it (dry runs change nothing), and
			// count only the create's own call.
			waitAllowed(t, o)
			before = webhookCalls(t)
		}
		want := chain.Default(ctx, &webhook.Request{Operation: "CREATE", Kind: metav1.GroupVersionKind{
			Group: o.GroupVersionKind().Group, Version: o.GroupVersionKind().Version, Kind: o.GetKind()}, Namespace: ns, ObjectValue: o.DeepCopy().Object})
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		// Every value the chain's defaulting patch sets is stored (the
		// policies defaulted it alike).
		defaulted += len(want.Patch)
		for _, op := range want.Patch {
			got, ok := corpus.Pointer(o.Object, op.Path)
			if op.Operation == "remove" {
				if ok {
					t.Errorf("%s %s: %s is stored as %v; check removes it", o.GetKind(), o.GetName(), op.Path, got)
				}
				continue
			}
			if !ok || fmt.Sprint(got) != fmt.Sprint(op.Value) {
				t.Errorf("%s %s: %s is %v (set %v), check defaults it to %v", o.GetKind(), o.GetName(), op.Path, got, ok, op.Value)
			}
		}
		after := webhookCalls(t)
		for k, n := range after {
			if d := n - before[k]; d > 0 {
				calls[k] += d
			}
		}
		before = after
	}
	want := map[string]int{
		"validating/ClusterTrainingRuntime": 1,
		"validating/TrainingRuntime":        1,
		"validating/TrainJob":               1,
	}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Errorf("webhook calls for the valid examples: %v, want %v (the webhook mode calls the validating webhook for each of the %d objects)", calls, want, len(examples))
	}
	if defaulted < 5 {
		t.Errorf("only %d defaulted paths checked: the examples no longer exercise the MutatingAdmissionPolicies", defaulted)
	}
	t.Logf("webhook calls for the %d valid examples: %v (webhook mode: one validating call each, and a mutating one for each JobSet and PodCliqueSet); %d defaulted paths stored as check defaults them", len(examples), calls, defaulted)
}

// TestVAPDenialAudited: the invalid Training PodCliqueSet is denied by the
// ValidatingAdmissionPolicies alone (shepherd's webhooks are not called),
// and each of its three violations reaches shepherd's audit trail once,
// through the apiserver's audit webhook backend and the audit sink, with
// the rule ID, the user, the operation and the object.
func TestVAPDenialAudited(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	waitForPolicies(t, ns)
	pcs := example(t, "invalid", "podcliqueset-training-autoscaled.yaml")
	pcs.SetNamespace(ns)
	before := webhookCalls(t)
	start := time.Now()
	err := env.Client.Create(ctx, pcs)
	if err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'shepherd-v-pcs-") {
		t.Fatalf("want a denial by a shepherd ValidatingAdmissionPolicy, got %v", err)
	}
	if d := diffCalls(before, webhookCalls(t)); len(d) > 0 {
		t.Errorf("shepherd's webhooks were called for a PodCliqueSet: %v", d)
	}
	want := []string{"V-PCS-4/Deny", "V-PCS-7/Deny", "V-PCS-8/Deny"}
	var recs []audit.Record
	testkit.Eventually(t, timeout, "the audit records of "+strings.Join(want, ", "), func() (bool, string) {
		recs = cluster.AuditRecords(t, serve.Metrics, url.Values{"namespace": {ns}, "since": {start.Add(-time.Second).UTC().Format(time.RFC3339Nano)}})
		return len(ruleActions(recs)) >= len(want), fmt.Sprint(ruleActions(recs))
	})
	// A later batch must not bring the same verdicts again.
	time.Sleep(time.Second)
	recs = cluster.AuditRecords(t, serve.Metrics, url.Values{"namespace": {ns}})
	if got := ruleActions(recs); !slices.Equal(got, want) {
		t.Errorf("audited %v, want %v, once each", got, want)
	}
	for _, r := range recs {
		if r.DryRun {
			continue // waitForPolicies' dry runs
		}
		if r.Kind != "PodCliqueSet" || r.Name != "elastic-training" || r.Operation != "CREATE" || r.User == "" ||
			r.APIVersion != "grove.io/v1alpha1" || r.DryRun || r.Message == "" || r.RequestUID == "" {
			t.Errorf("record %+v: want the PodCliqueSet elastic-training, CREATE, a user, a message and the audit ID", r)
		}
	}
}

// TestNarrowedWebhookAnswersLookups: what needs shepherd still reaches it,
// and nothing else. The TrainJob whose runtime is missing is denied by the
// validating webhook (V-TJ-3) and audited by it; a JobSet controlled by a
// TrainJob goes to the mutating webhook (D-WL-1), a JobSet of nobody's does
// not; an UPDATE changing only a TrainJob's label does not reach it. An
// UPDATE changing numNodes would go to the validating webhook (V-TJ-4), but
// Trainer v2.3.0's CRD makes spec.trainer immutable, and the apiserver
// rejects it with the CRD's validation before any validating admission.
func TestNarrowedWebhookAnswersLookups(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	waitForPolicies(t, ns)

	lost := example(t, "invalid", "trainjob-missing-runtime.yaml")
	lost.SetNamespace(ns)
	before := webhookCalls(t)
	err := env.Client.Create(ctx, lost)
	if err == nil || !strings.Contains(err.Error(), `admission webhook "trainjobs.validate.shepherd.dev" denied`) || !strings.Contains(err.Error(), "no-such-runtime") {
		t.Fatalf("want the TrainJob denied by shepherd's webhook (V-TJ-3), got %v", err)
	}
	if d := diffCalls(before, webhookCalls(t)); fmt.Sprint(d) != "map[validating/TrainJob:1]" {
		t.Errorf("webhook calls %v, want one validating call", d)
	}
	testkit.Eventually(t, timeout, "the V-TJ-3 audit record", func() (bool, string) {
		recs := cluster.AuditRecords(t, serve.Metrics, url.Values{"namespace": {ns}, "rule": {"V-TJ-3"}})
		return len(recs) == 1 && recs[0].Name == "lost-job", fmt.Sprint(ruleActions(recs))
	})

	// A runtime using the Workload API and its TrainJob.
	var rt, tj *unstructured.Unstructured
	for _, o := range readExamples(t, "valid") {
		switch o.GetKind() {
		case "TrainingRuntime":
			rt = o
		case "TrainJob":
			tj = o
		}
	}
	rt.SetNamespace(ns)
	tj.SetNamespace(ns)
	if err := unstructured.SetNestedField(tj.Object, map[string]any{"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": rt.GetName()}, "spec", "runtimeRef"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, rt); err != nil {
		t.Fatal(err)
	}
	waitAllowed(t, tj)
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}

	jobset := func(name string, owned bool) *unstructured.Unstructured {
		js := example(t, "valid", "jobset.yaml")
		js.SetNamespace(ns)
		js.SetName(name)
		if owned {
			js.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob",
				Name: tj.GetName(), UID: tj.GetUID(), Controller: ptr.To(true)}})
		}
		return js
	}
	before = webhookCalls(t)
	if err := env.Client.Create(ctx, jobset("by-hand", false)); err != nil {
		t.Fatal(err)
	}
	if d := diffCalls(before, webhookCalls(t)); len(d) > 0 {
		t.Errorf("a JobSet no TrainJob controls reached shepherd: %v", d)
	}
	before = webhookCalls(t)
	if err := env.Client.Create(ctx, jobset(tj.GetName(), true)); err != nil {
		t.Fatal(err)
	}
	if d := diffCalls(before, webhookCalls(t)); fmt.Sprint(d) != "map[mutating/JobSet:1]" {
		t.Errorf("webhook calls for a TrainJob's JobSet: %v, want one mutating call (D-WL-1)", d)
	}

	// UPDATEs of the TrainJob.
	before = webhookCalls(t)
	labelled := tj.DeepCopy()
	labelled.SetLabels(map[string]string{"team": "a"})
	if err := env.Client.Update(ctx, labelled); err != nil {
		t.Fatalf("a label change: %v", err)
	}
	if d := diffCalls(before, webhookCalls(t)); len(d) > 0 {
		t.Errorf("a TrainJob UPDATE that keeps numNodes reached shepherd: %v", d)
	}
	before = webhookCalls(t)
	resized := labelled.DeepCopy()
	if err := unstructured.SetNestedField(resized.Object, int64(8), "spec", "trainer", "numNodes"); err != nil {
		t.Fatal(err)
	}
	err = env.Client.Update(ctx, resized)
	if err == nil || !strings.Contains(err.Error(), "spec.trainer: Invalid value: field is immutable") {
		t.Errorf("want the numNodes change rejected by Trainer's CRD (spec.trainer is immutable), got %v", err)
	}
	if d := diffCalls(before, webhookCalls(t)); len(d) > 0 {
		t.Errorf("webhook calls for a numNodes change the CRD rejects: %v, want none", d)
	}
}

// TestWorkloadPolicyExported: serve applies a WorkloadPolicy as a
// ValidatingAdmissionPolicy and binding (auditing), the apiserver enforces
// it, the sink records its verdict under the policy's name, and deleting
// the policy deletes both.
func TestWorkloadPolicyExported(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	p := &shepherdv1alpha1.WorkloadPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "team-label"},
		Spec: shepherdv1alpha1.WorkloadPolicySpec{
			Action: shepherdv1alpha1.ActionDeny,
			Match: shepherdv1alpha1.Match{Resources: []shepherdv1alpha1.ResourceRule{{
				APIGroups: []string{"jobset.x-k8s.io"}, Kinds: []string{"JobSet"}, Operations: []string{"CREATE"},
			}}},
			Validations: []shepherdv1alpha1.Validation{{
				Expression: "has(object.metadata.labels) && 'team' in object.metadata.labels",
				Message:    "metadata.labels must have a team label: add metadata.labels.team",
			}},
		},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	testkit.Eventually(t, timeout, "the exported policy and binding", func() (bool, string) {
		err := errors.Join(env.Client.Get(ctx, client.ObjectKey{Name: "shepherd-policy-team-label"}, vap),
			env.Client.Get(ctx, client.ObjectKey{Name: "shepherd-policy-team-label"}, binding))
		return err == nil, fmt.Sprint(err)
	})
	if got := binding.Spec.ValidationActions; !slices.Equal(got, []admissionregistrationv1.ValidationAction{"Deny", "Audit"}) {
		t.Errorf("binding validationActions %v, want [Deny Audit]", got)
	}
	if refs := vap.OwnerReferences; len(refs) != 1 || refs[0].Kind != "WorkloadPolicy" || refs[0].Name != p.Name {
		t.Errorf("policy owner references %v, want the WorkloadPolicy", refs)
	}

	js := example(t, "valid", "jobset.yaml")
	js.SetNamespace(ns)
	start := time.Now()
	var err error
	testkit.Eventually(t, timeout, "the apiserver enforcing the exported policy", func() (bool, string) {
		err = env.Client.Create(ctx, js.DeepCopy(), client.DryRunAll)
		return err != nil, fmt.Sprint(err)
	})
	if !strings.Contains(err.Error(), "shepherd-policy-team-label") || !strings.Contains(err.Error(), "add metadata.labels.team (shepherd team-label)") {
		t.Errorf("denial %v: want the exported policy's message, naming the policy", err)
	}
	testkit.Eventually(t, timeout, "the policy's audit record", func() (bool, string) {
		recs := cluster.AuditRecords(t, serve.Metrics, url.Values{"namespace": {ns}, "rule": {"team-label"}, "since": {start.Add(-time.Second).UTC().Format(time.RFC3339Nano)}})
		return len(recs) > 0 && recs[0].Action == "Deny" && recs[0].DryRun, fmt.Sprint(recs)
	})

	if err := env.Client.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, timeout, "the exported policy and binding deleted", func() (bool, string) {
		e1 := env.Client.Get(ctx, client.ObjectKey{Name: "shepherd-policy-team-label"}, &admissionregistrationv1.ValidatingAdmissionPolicy{})
		e2 := env.Client.Get(ctx, client.ObjectKey{Name: "shepherd-policy-team-label"}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{})
		return apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2), fmt.Sprint(e1, e2)
	})
}

// TestSinkAuthenticates: the sink on serve's webhook port refuses a caller
// without the token, or with another, and a body that is no EventList.
func TestSinkAuthenticates(t *testing.T) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // envtest's certificate; the token is under test
	}}
	post := func(auth, body string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, sinkURL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	list := `{"apiVersion":"audit.k8s.io/v1","kind":"EventList","items":[]}`
	for _, tc := range []struct {
		name, auth, body string
		code             int
	}{
		{"no token", "", list, http.StatusUnauthorized},
		{"another token", "Bearer not-the-token", list, http.StatusUnauthorized},
		{"not an EventList", "Bearer " + sinkToken, `{"apiVersion":"v1","kind":"Pod"}`, http.StatusBadRequest},
		{"the token", "Bearer " + sinkToken, list, http.StatusOK},
	} {
		if code, body := post(tc.auth, tc.body); code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.code)
		}
	}
}

// waitForPolicies waits until the apiserver enforces the exported
// policies (its policy plugin loads them from an informer): a dry run of
// the invalid Training PodCliqueSet is denied by them.
func waitForPolicies(t *testing.T, ns string) {
	t.Helper()
	pcs := example(t, "invalid", "podcliqueset-training-autoscaled.yaml")
	pcs.SetNamespace(ns)
	testkit.Eventually(t, timeout, "the exported policies in force", func() (bool, string) {
		err := env.Client.Create(context.Background(), pcs.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'shepherd-"), fmt.Sprint(err)
	})
}

// waitAllowed waits until a dry-run create of o is allowed: shepherd's
// lookups have the objects it refers to.
func waitAllowed(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	testkit.Eventually(t, timeout, "a dry run of "+o.GetKind()+" "+o.GetName()+" allowed", func() (bool, string) {
		err := env.Client.Create(context.Background(), o.DeepCopy(), client.DryRunAll)
		return err == nil, fmt.Sprint(err)
	})
}

// readExamples decodes every object of examples/<dir>, runtimes first (the
// TrainJob refers to one).
func readExamples(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cluster.RepoRoot(), "examples", dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		out = append(out, decodeFile(t, f)...)
	}
	order := map[string]int{"ClusterTrainingRuntime": 0, "TrainingRuntime": 1, "TrainJob": 2}
	sort.SliceStable(out, func(i, j int) bool {
		oi, ok := order[out[i].GetKind()]
		if !ok {
			oi = 3
		}
		oj, ok := order[out[j].GetKind()]
		if !ok {
			oj = 3
		}
		return oi < oj
	})
	return out
}

func example(t *testing.T, dir, file string) *unstructured.Unstructured {
	t.Helper()
	objs := decodeFile(t, filepath.Join(cluster.RepoRoot(), "examples", dir, file))
	if len(objs) != 1 {
		t.Fatalf("%s holds %d objects, want 1", file, len(objs))
	}
	return objs[0]
}

func decodeFile(t *testing.T, f string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("%s: %v", f, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

var requestsLine = regexp.MustCompile(`^shepherd_admission_requests_total\{(.*)\} (\S+)$`)

// webhookCalls reads shepherd_admission_requests_total from serve's
// metrics, summed by webhook and kind ("validating/TrainJob").
func webhookCalls(t *testing.T) map[string]int {
	t.Helper()
	resp, err := http.Get("http://" + serve.Metrics + "/metrics") //nolint:gosec // local test URL
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := requestsLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, kv := range strings.Split(m[1], ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = strings.Trim(v, `"`)
		}
		n, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		out[labels["webhook"]+"/"+labels["kind"]] += int(n)
	}
	return out
}

func diffCalls(before, after map[string]int) map[string]int {
	d := map[string]int{}
	for k, n := range after {
		if n > before[k] {
			d[k] = n - before[k]
		}
	}
	return d
}

// ruleActions are the records' rule/action, sorted, dry runs left out.
func ruleActions(recs []audit.Record) []string {
	var out []string
	for _, r := range recs {
		if !r.DryRun {
			out = append(out, r.Rule+"/"+r.Action)
		}
	}
	sort.Strings(out)
	return out
}

package interop

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/corpus"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// example is one manifest of examples/ with the verdict its comment states
// ("# shepherd: rejected V-PCS-2, V-PCS-3; warns V-TR-2").
type example struct {
	file     string
	obj      *unstructured.Unstructured
	admitted bool
	denies   []string
	warns    []string
}

var verdictLine = regexp.MustCompile(`(?m)^# shepherd: (admitted|rejected ([A-Z0-9, -]+?))(; warns ([A-Z0-9, -]+))?$`)

func loadExamples(t *testing.T) []example {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cluster.RepoRoot(), "examples", "*", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	var out []example
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m := verdictLine.FindStringSubmatch(string(b))
		if m == nil {
			t.Fatalf("%s: no `# shepherd: admitted|rejected RULES[; warns RULES]` line", f)
		}
		rel, _ := filepath.Rel(cluster.RepoRoot(), f)
		ex := example{file: rel, admitted: m[1] == "admitted", denies: ids(m[2]), warns: ids(m[4])}
		if ex.admitted != strings.HasPrefix(rel, "examples/valid/") {
			t.Errorf("%s: verdict %q does not fit its directory", rel, m[1])
		}
		dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(string(b)), 4096)
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("%s: %v", rel, err)
		}
		ex.obj = &unstructured.Unstructured{}
		if err := ex.obj.UnmarshalJSON(raw.Raw); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		out = append(out, ex)
	}
	// Runtimes first: TrainJobs name one.
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Contains(out[i].obj.GetKind(), "Runtime") && !strings.Contains(out[j].obj.GetKind(), "Runtime")
	})
	return out
}

func ids(s string) []string {
	var out []string
	for _, id := range strings.Split(s, ",") {
		if id = strings.TrimSpace(id); id != "" {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// TestExamplesUnderStrictAndWarn applies every example through the real
// apiserver with shepherd's webhooks, under Strict field validation
// (kubectl's default) and under Warn (what controllers and SDKs send):
//   - each is admitted or rejected as its comment says, with exactly the
//     fields of the rules it names (checked against the admission chain);
//   - the apiserver warns of no unknown field: every example is a valid
//     upstream object, its seed knobs in carriers;
//   - read back, the object holds everything it was sent with and every
//     default shepherd's patch set: nothing shepherd wrote was pruned.
func TestExamplesUnderStrictAndWarn(t *testing.T) {
	examples := loadExamples(t)
	var contextObjs []runtime.Object
	for _, ex := range examples {
		if ex.admitted && strings.Contains(ex.obj.GetKind(), "Runtime") {
			contextObjs = append(contextObjs, ex.obj.DeepCopy())
		}
	}
	upstreamSchemas, err := celrules.PinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	chain, err := webhook.NewChain(webhook.ChainOptions{Lookups: webhook.NewObjectLookups(contextObjs, true), Rules: celrules.Config{Schemas: upstreamSchemas}})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{metav1.FieldValidationStrict, metav1.FieldValidationWarn} {
		t.Run(mode, func(t *testing.T) {
			w := &cluster.Warnings{}
			cfg := rest.CopyConfig(env.Config)
			cfg.WarningHandler = w
			k, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
			if err != nil {
				t.Fatal(err)
			}
			ns := env.Namespace(t)
			for _, ex := range examples {
				t.Run(filepath.Base(ex.file), func(t *testing.T) {
					obj := ex.obj.DeepCopy()
					if obj.GetKind() == "ClusterTrainingRuntime" && mode == metav1.FieldValidationWarn {
						obj.SetName(obj.GetName() + "-warn") // cluster-scoped: one per mode
					} else if obj.GetKind() != "ClusterTrainingRuntime" {
						obj.SetNamespace(ns)
					}
					want := chainVerdict(t, chain, obj)
					if got := rulesOf(want.Violations, webhook.ActionDeny); !cmp.Equal(got, ex.denies) {
						t.Errorf("the example says it is denied by %v; the admission chain denies it by %v", ex.denies, got)
					}
					if len(want.Warnings) != len(ex.warns) {
						t.Errorf("the example says it warns %v; the admission chain warns %q", ex.warns, want.Warnings)
					}
					w.Take()
					err := k.Create(context.Background(), obj.DeepCopy(), client.FieldValidation(mode))
					msgs := w.Take()
					if p := pruned(msgs); len(p) > 0 {
						t.Errorf("the apiserver dropped fields: %q", p)
					}
					if !ex.admitted {
						checkRejected(t, err, want)
						return
					}
					if err != nil {
						t.Fatalf("create: %v", err)
					}
					if got := len(msgs); got != len(ex.warns) {
						t.Errorf("warnings %q, want %d (%v)", msgs, len(ex.warns), ex.warns)
					}
					checkStored(t, k, obj, want)
				})
			}
		})
	}
}

// chainVerdict is what the admission chain answers for obj (CREATE): the
// same code the webhook runs, on the same upstream schemas.
func chainVerdict(t *testing.T, chain *webhook.Chain, obj *unstructured.Unstructured) *webhook.Verdict {
	t.Helper()
	raw, err := json.Marshal(obj.Object)
	if err != nil {
		t.Fatal(err)
	}
	gvk := obj.GroupVersionKind()
	return chain.Admit(context.Background(), &webhook.Request{
		UID: "interop", Operation: admissionv1.Create,
		Kind:      metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Namespace: obj.GetNamespace(), Name: obj.GetName(), Object: raw,
	})
}

func rulesOf(vs []webhook.Violation, action shepherdv1alpha1.Action) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range vs {
		if v.Action == action && !seen[v.Rule] {
			seen[v.Rule] = true
			out = append(out, v.Rule)
		}
	}
	sort.Strings(out)
	return out
}

// checkRejected: a 422 Invalid; when shepherd's webhook is the one that
// rejects (the upstream CRD's own validation runs after the mutating and
// before the validating webhooks, and JobSet's CEL rejects some specs
// first), one cause per field the chain denies.
func checkRejected(t *testing.T, err error, want *webhook.Verdict) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want 422 Invalid, got %v", err)
	}
	if !strings.Contains(err.Error(), "admission webhook") {
		t.Logf("rejected by the upstream CRD's own validation before shepherd's webhook: %v", err)
		return
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil {
		t.Fatalf("no details in %v", err)
	}
	var got, fields []string
	for _, c := range st.Status().Details.Causes {
		got = append(got, c.Field)
	}
	for _, v := range want.Violations {
		if v.Action == webhook.ActionDeny {
			fields = append(fields, v.Field)
		}
	}
	sort.Strings(got)
	sort.Strings(fields)
	if diff := cmp.Diff(fields, got); diff != "" {
		t.Errorf("causes (-chain +apiserver):\n%s", diff)
	}
}

// checkStored reads obj back: the sent annotations and labels and every
// value of shepherd's patch are there.
func checkStored(t *testing.T, k client.Client, sent *unstructured.Unstructured, want *webhook.Verdict) {
	t.Helper()
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(sent.GroupVersionKind())
	if err := k.Get(context.Background(), client.ObjectKeyFromObject(sent), got); err != nil {
		t.Fatal(err)
	}
	for key, v := range sent.GetAnnotations() {
		if got.GetAnnotations()[key] != v {
			t.Errorf("annotation %s = %q sent, %q stored", key, v, got.GetAnnotations()[key])
		}
	}
	for _, op := range want.Patch {
		v, found := corpus.Pointer(got.Object, op.Path)
		switch op.Operation {
		case "remove":
			if found {
				t.Errorf("%s: shepherd removed it, but it is stored", op.Path)
			}
		default:
			if !found {
				t.Errorf("%s: shepherd set it, but it was pruned", op.Path)
				continue
			}
			if !corpus.Subset(v, op.Value) {
				t.Errorf("%s: shepherd set %v, stored %v", op.Path, op.Value, v)
			}
		}
	}
}

package webhook

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// numNodesViolation is the apiserver's answer to a TrainJob whose
// numNodes is a string.
var numNodesViolation = Violation{
	Rule:    RuleSchema,
	Field:   "spec.trainer.numNodes",
	Message: `Invalid value: "string": spec.trainer.numNodes in body must be of type integer: "string"`,
	Action:  ActionDeny,
	Reason:  string(field.ErrorTypeTypeInvalid),
}

// wrongTrainJob would also be denied by V-TJ-1 (deadline 0) and by the
// policy of the test, were it well typed.
var wrongTrainJob = []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"tj","namespace":"ns"},"spec":{"runtimeRef":{"name":"torch"},"activeDeadlineSeconds":3600,"trainer":{"numNodes":"two"}}}`)

// schemaChain is the chain as `shepherd check` builds it: with CheckSchemas.
func schemaChain(t testing.TB) *Chain {
	t.Helper()
	c, err := NewChain(ChainOptions{Rules: celrulesConfig("V-TJ-3"), CheckSchemas: true})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The webhook's chain does not check schemas: the apiserver validates the
// object before the validating webhook is called.
func TestWebhookChainLeavesSchemaValidationToTheAPIServer(t *testing.T) {
	c := newChain(t)
	req := &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Object: wrongTrainJob}
	for _, viol := range c.Admit(context.Background(), req).Violations {
		if viol.Rule == RuleSchema {
			t.Errorf("the webhook's chain reported a schema violation: %+v", viol)
		}
	}
}

func TestWrongTypeIsDeniedBySchemaAlone(t *testing.T) {
	c := schemaChain(t)
	// A rule on the wrongly typed field: CEL would fail on it ("no such
	// overload"), and that must not reach users.
	if errs := c.SetPolicy(policy("nodes", "1", "object.spec.?trainer.?numNodes.orValue(1) <= 8")); len(errs) > 0 {
		t.Fatal(errs)
	}
	req := &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Object: wrongTrainJob}
	for name, admit := range map[string]func(context.Context, *Request) *Verdict{"Default": c.Default, "Validate": c.Validate, "Admit": c.Admit} {
		v := admit(context.Background(), req)
		if v.Allowed {
			t.Errorf("%s: allowed", name)
		}
		if diff := cmp.Diff([]Violation{numNodesViolation}, v.Violations); diff != "" {
			t.Errorf("%s: violations (-want +got):\n%s", name, diff)
		}
		if len(v.Patch) != 0 {
			t.Errorf("%s: defaulted a wrongly typed object: %v", name, v.Patch)
		}
	}
}

func TestSchemaCheckLetsOtherObjectsThrough(t *testing.T) {
	c := schemaChain(t)
	pcsKind := metav1.GroupVersionKind{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"}
	for _, tc := range []struct {
		name string
		req  *Request
	}{{
		name: "well typed",
		req:  &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Object: trainJob(3600)},
	}, {
		// Trainer's schema wants a deadline of at least 1; V-TJ-1 says so
		// in shepherd's words, and the apiserver rejects it anyway.
		name: "schema errors other than a type are left to the rules",
		req:  &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Object: trainJob(0)},
	}, {
		name: "DELETE has no object to check",
		req:  &Request{Operation: admissionv1.Delete, Kind: trainJobKind, Namespace: "ns", OldObject: wrongTrainJob},
	}, {
		name: "a kind without a schema",
		req: &Request{Operation: admissionv1.Create, Kind: metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Namespace: "ns",
			Object: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":7}`)},
	}, {
		// As the apiserver ratchets: a value the UPDATE does not change is
		// not judged again (the object was stored under another schema).
		name: "UPDATE that keeps a wrongly typed value",
		req: &Request{Operation: admissionv1.Update, Kind: trainJobKind, Namespace: "ns", Object: wrongTrainJob,
			OldObject: []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"tj","namespace":"ns"},"spec":{"runtimeRef":{"name":"torch"},"activeDeadlineSeconds":3600,"trainer":{"numNodes":"two"}}}`)},
	}, {
		name: "PodCliqueSet with an int-or-string",
		req: &Request{Operation: admissionv1.Create, Kind: pcsKind, Namespace: "ns",
			Object: []byte(`{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"p","namespace":"ns"},"spec":{"replicas":1,"template":{"cliques":[{"name":"a","spec":{"roleName":"a","replicas":1,"podSpec":{"containers":[{"name":"c","image":"i","resources":{"limits":{"cpu":2,"memory":"1Gi"}}}]}}}]}}}`)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			v := c.Admit(context.Background(), tc.req)
			if got := ruleViolations(v, RuleSchema); len(got) != 0 {
				t.Errorf("schema violations %+v", got)
			}
		})
	}
	// The same UPDATE that changes the value is judged.
	v := c.Admit(context.Background(), &Request{Operation: admissionv1.Update, Kind: trainJobKind, Namespace: "ns", Object: wrongTrainJob, OldObject: trainJob(3600)})
	if diff := cmp.Diff([]Violation{numNodesViolation}, v.Violations); diff != "" {
		t.Errorf("UPDATE to a wrongly typed value (-want +got):\n%s", diff)
	}
}

func TestSchemaViolationOfTheWholeObjectHasNoField(t *testing.T) {
	c := schemaChain(t)
	// A fraction where Grove's schema has an int-or-string quantity: the
	// apiserver answers twice, once without a field path ("<nil>").
	raw := []byte(`{"apiVersion":"grove.io/v1alpha1","kind":"PodCliqueSet","metadata":{"name":"p","namespace":"ns"},"spec":{"replicas":1.5,"template":{"cliques":[{"name":"a","spec":{"roleName":"a","replicas":1,"podSpec":{"containers":[{"name":"c","image":"i"}]}}}]}}}`)
	v := c.Admit(context.Background(), &Request{Operation: admissionv1.Create, Kind: metav1.GroupVersionKind{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSet"}, Namespace: "ns", Object: raw})
	var fields []string
	for _, viol := range v.Violations {
		fields = append(fields, viol.Field)
	}
	if v.Allowed || !cmp.Equal(fields, []string{"", "spec.replicas"}) {
		t.Errorf("fields %q of %+v, want the whole object's (\"\") and spec.replicas", fields, v.Violations)
	}
}

// TestNullsAreDroppedAsTheAPIServerDrops: a null where the schema allows
// none never reaches a webhook through the apiserver, which drops it when
// it decodes the object; the chain does the same for objects handed to it
// directly (Go clients send null for every nil slice), instead of taking
// it for a value of the wrong type.
func TestNullsAreDroppedAsTheAPIServerDrops(t *testing.T) {
	c := schemaChain(t)
	raw := []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"tj","namespace":"ns"},"spec":{"runtimeRef":{"name":"torch"},"activeDeadlineSeconds":3600,"trainer":{"numNodes":null}}}`)
	v := c.Admit(context.Background(), &Request{Operation: admissionv1.Create, Kind: trainJobKind, Namespace: "ns", Object: raw})
	if !v.Allowed || len(v.Violations) != 0 {
		t.Fatalf("verdict %+v", v)
	}
	if diff := cmp.Diff(map[string]any{}, v.Object["spec"].(map[string]any)["trainer"]); diff != "" {
		t.Errorf("spec.trainer (-want +got):\n%s", diff)
	}
}

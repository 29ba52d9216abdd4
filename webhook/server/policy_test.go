package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/policies"
)

// A WorkloadPolicy that would not compile is denied at admission with one
// cause per compile error, each the field path and message its status would
// carry; one that compiles is allowed.
func TestWorkloadPolicyIsValidatedAtApply(t *testing.T) {
	chain, err := webhook.NewChain(webhook.ChainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := &Handler{Mode: Policies, Policies: chain, PolicySlots: make(chan struct{}, 1)}
	valid := func() *shepherdv1alpha1.WorkloadPolicy {
		return &shepherdv1alpha1.WorkloadPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: "shepherd.dev/v1alpha1", Kind: "WorkloadPolicy"},
			ObjectMeta: metav1.ObjectMeta{Name: "max-nodes"},
			Spec: shepherdv1alpha1.WorkloadPolicySpec{
				Action: shepherdv1alpha1.ActionDeny,
				Match: shepherdv1alpha1.Match{Resources: []shepherdv1alpha1.ResourceRule{{
					APIGroups: []string{"trainer.kubeflow.org"}, Kinds: []string{"TrainJob"},
				}}},
				Validations: []shepherdv1alpha1.Validation{{Expression: "object.spec.?trainer.?numNodes.orValue(1) <= 8", Message: "at most 8 nodes"}},
			},
		}
	}
	for _, tt := range []struct {
		name   string
		mutate func(*shepherdv1alpha1.WorkloadPolicy)
		fields []string // of the causes; none: allowed
	}{
		{"compiles", func(*shepherdv1alpha1.WorkloadPolicy) {}, nil},
		{"misspelled field", func(p *shepherdv1alpha1.WorkloadPolicy) {
			p.Spec.Validations[0].Expression = "object.spec.trainer.numNode <= 8"
		}, []string{"spec.validations[0].expression"}},
		{"CEL that does not parse", func(p *shepherdv1alpha1.WorkloadPolicy) {
			p.Spec.Validations[0].Expression = "object.spec.trainer.numNodes <="
			p.Spec.Validations[0].MessageExpression = "'at most ' + 8"
		}, []string{"spec.validations[0].expression", "spec.validations[0].messageExpression"}},
		{"a kind no CRD serves", func(p *shepherdv1alpha1.WorkloadPolicy) {
			p.Spec.Match.Resources[0].Kinds = []string{"Trainjob"}
		}, []string{"spec.match.resources[0].kinds[0]"}},
		{"reserved matchCondition name", func(p *shepherdv1alpha1.WorkloadPolicy) {
			p.Spec.MatchConditions = []shepherdv1alpha1.MatchCondition{{Name: celrules.UpdateConditionName, Expression: "true"}}
		}, []string{"spec.matchConditions[0].name"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := valid()
			tt.mutate(p)
			obj, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			body := policyReview(t, p.Name, obj)
			resp := decodeResponse(t, serve(t, h, http.MethodPost, "application/json", body))
			if tt.fields == nil {
				if !resp.Allowed {
					t.Fatalf("denied: %+v", resp.Result)
				}
				return
			}
			if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusUnprocessableEntity || resp.Result.Reason != metav1.StatusReasonInvalid || resp.Result.Details == nil {
				t.Fatalf("want a 422 Invalid, got allowed=%v %+v", resp.Allowed, resp.Result)
			}
			// The causes are the status's compileErrors, in order.
			st := policies.DesiredStatus(p, chain.CheckPolicy(p), metav1.Now())
			var want, got []string
			for _, e := range st.CompileErrors {
				want = append(want, e.FieldPath+": "+e.Message)
			}
			for _, c := range resp.Result.Details.Causes {
				got = append(got, c.Field+": "+c.Message)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("causes differ from the status's compileErrors (-status +admission):\n%s", diff)
			}
			for _, f := range tt.fields {
				found := false
				for _, c := range resp.Result.Details.Causes {
					found = found || c.Field == f
				}
				if !found {
					t.Errorf("no cause on %s: %v", f, got)
				}
			}
		})
	}
}

// Policy checks wait for a slot; one that waits past its budget is
// answered busy (429 with Retry-After), which the apiserver retries,
// instead of taking the cores the workloads' admissions need.
func TestPolicyChecksWaitForASlot(t *testing.T) {
	chain, err := webhook.NewChain(webhook.ChainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slots := make(chan struct{}, 1)
	slots <- struct{}{} // every slot taken
	h := &Handler{Mode: Policies, Policies: chain, PolicySlots: slots}
	body := policyReview(t, "p", []byte(`{"apiVersion":"shepherd.dev/v1alpha1","kind":"WorkloadPolicy","metadata":{"name":"p"}}`))
	r := httptest.NewRequest(http.MethodPost, PolicyPath+"?timeout=300ms", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Errorf("with every slot taken: HTTP %d (Retry-After %q), want 429 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	if d := time.Since(start); d > 300*time.Millisecond {
		t.Errorf("answered busy after %v, want within the caller's 300ms", d)
	}

	<-slots // a slot frees up: the check runs
	resp := decodeResponse(t, serve(t, h, http.MethodPost, "application/json", body))
	// The policy has no resources nor validations: the check denies it.
	if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusUnprocessableEntity {
		t.Errorf("with a free slot: want the check's 422, got allowed=%v %+v", resp.Allowed, resp.Result)
	}
}

// policyReview is the AdmissionReview of a CREATE of WorkloadPolicy name.
func policyReview(t *testing.T, name string, obj []byte) []byte {
	t.Helper()
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "uid-1",
			Kind:      metav1.GroupVersionKind{Group: "shepherd.dev", Version: "v1alpha1", Kind: "WorkloadPolicy"},
			Resource:  metav1.GroupVersionResource{Group: "shepherd.dev", Version: "v1alpha1", Resource: "workloadpolicies"},
			Name:      name,
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: obj},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

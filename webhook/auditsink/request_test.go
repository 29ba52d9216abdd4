package auditsink

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	clocktesting "k8s.io/utils/clock/testing"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

// An audit verb is the admission operation the webhook would have seen.
func TestOperation(t *testing.T) {
	for verb, want := range map[string]admissionv1.Operation{
		"create": admissionv1.Create, "update": admissionv1.Update, "patch": admissionv1.Update, "apply": admissionv1.Update,
		"delete": admissionv1.Delete, "deletecollection": admissionv1.Delete, "connect": "CONNECT", "watch": "WATCH",
	} {
		if got := operation(verb); got != want {
			t.Errorf("operation(%q) = %q, want %q", verb, got, want)
		}
	}
}

// A binding's actions give the verdict: Deny over Warn over Audit.
func TestAction(t *testing.T) {
	a := func(as ...admissionregistrationv1.ValidationAction) []admissionregistrationv1.ValidationAction {
		return as
	}
	for _, tc := range []struct {
		actions []admissionregistrationv1.ValidationAction
		want    webhook.Action
	}{
		{a(admissionregistrationv1.Audit, admissionregistrationv1.Deny), webhook.ActionDeny},
		{a(admissionregistrationv1.Warn, admissionregistrationv1.Deny, admissionregistrationv1.Audit), webhook.ActionDeny},
		{a(admissionregistrationv1.Audit, admissionregistrationv1.Warn), webhook.ActionWarn},
		{a(admissionregistrationv1.Audit), webhook.ActionAudit},
		{nil, webhook.ActionAudit},
	} {
		if got := action(tc.actions); got != tc.want {
			t.Errorf("action(%v) = %s, want %s", tc.actions, got, tc.want)
		}
	}
}

// The request of an audit event: the resource's kind when shepherd admits
// it (the resource otherwise), the core group's empty API group, the
// impersonated user over the real one, dryRun from the URI.
func TestRequest(t *testing.T) {
	ev := &auditv1.Event{
		AuditID: "a-1", Verb: "delete", RequestURI: "/api/v1/namespaces/ns/configmaps/c",
		User:      authenticationv1.UserInfo{Username: "alice"},
		ObjectRef: &auditv1.ObjectReference{Resource: "configmaps", Namespace: "ns", Name: "c", APIVersion: "v1"},
	}
	want := &webhook.Request{
		UID: "a-1", Operation: admissionv1.Delete,
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "configmaps"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		Namespace: "ns", Name: "c", UserInfo: authenticationv1.UserInfo{Username: "alice"},
	}
	if diff := cmp.Diff(want, Request(ev)); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	ev.ObjectRef = &auditv1.ObjectReference{Resource: "podcliques", Namespace: "ns", Name: "p", APIGroup: "grove.io", APIVersion: "v1alpha1"}
	ev.RequestURI = "/apis/grove.io/v1alpha1/namespaces/ns/podcliques/p?dryRun=All&fieldManager=x"
	ev.ImpersonatedUser = &authenticationv1.UserInfo{Username: "bob"}
	got := Request(ev)
	if got.Kind.Kind != "PodClique" || got.UserInfo.Username != "bob" || !got.DryRun {
		t.Errorf("request %+v: want kind PodClique, user bob, dry run", got)
	}
	ev.RequestURI = "%zz" // not a URL: no dry run read
	if Request(ev).DryRun {
		t.Error("a request URI that does not parse read as a dry run")
	}
}

// ChainRules maps an exported policy's name back to its rule, built-in or
// WorkloadPolicy, and a policy of a WorkloadPolicy deleted since to its
// name; anything else is not shepherd's.
func TestChainRules(t *testing.T) {
	rules := []celrules.RuleInfo{{ID: "V-TJ-1", Source: celrules.SourceBuiltin}, {ID: "max-day", Source: celrules.SourcePolicy}}
	resolve := ChainRules(func() []celrules.RuleInfo { return rules })
	for policy, want := range map[string]string{
		"shepherd-v-tj-1":          "V-TJ-1",
		"shepherd-policy-max-day":  "max-day",
		"shepherd-policy-gone-now": "gone-now",
		"shepherd-policy-":         "",
		"shepherd-v-tj-9":          "",
		"someone-else":             "",
	} {
		got, ok := resolve(policy)
		if got != want || ok != (want != "") {
			t.Errorf("resolve(%q) = %q, %v; want %q", policy, got, ok, want)
		}
	}
}

// Events that are not the final stage, have no object, carry only an
// unreadable annotation, or name only other owners' policies record
// nothing (TestUnreadableFailuresKeepExemptions: exemptions beside an
// unreadable annotation are recorded); exemptions are recorded in rule order.
func TestRecordSkips(t *testing.T) {
	rec := audit.NewRecorder(16, nil, clocktesting.NewFakePassiveClock(time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)))
	h := &Handler{Recorder: rec, Log: logr.Discard(), Rules: func(p string) (string, bool) {
		id, ok := strings.CutPrefix(p, "shepherd-")
		return strings.ToUpper(id), ok
	}}
	ref := &auditv1.ObjectReference{Resource: "trainjobs", Namespace: "ns", Name: "tj", APIGroup: "trainer.kubeflow.org", APIVersion: "v1alpha1"}
	failure := `[{"message":"m","policy":"shepherd-a","binding":"shepherd-a","expressionIndex":0,"validationActions":["Audit"]}]`
	ctx := logf.IntoContext(context.Background(), logr.Discard())
	for _, tc := range []struct {
		name string
		ev   auditv1.Event
	}{
		{"not ResponseComplete", auditv1.Event{Stage: auditv1.StageResponseStarted, ObjectRef: ref, Annotations: map[string]string{AnnotationValidationFailure: failure}}},
		{"no object", auditv1.Event{Stage: auditv1.StageResponseComplete, Annotations: map[string]string{AnnotationValidationFailure: failure}}},
		{"unreadable annotation", auditv1.Event{Stage: auditv1.StageResponseComplete, ObjectRef: ref, Annotations: map[string]string{
			AnnotationValidationFailure: "[{"}}},
		{"another owner's policy", auditv1.Event{Stage: auditv1.StageResponseComplete, ObjectRef: ref, Annotations: map[string]string{
			AnnotationValidationFailure: `[{"message":"m","policy":"theirs","validationActions":["Deny"]}]`, "theirs/exempt": "x\n\ny"}}},
	} {
		if got := h.record(ctx, &tc.ev); len(got) != 0 {
			t.Errorf("%s: recorded %+v", tc.name, got)
		}
	}
	if rec.Ring.Len() != 0 {
		t.Fatalf("%d records", rec.Ring.Len())
	}

	annotations := map[string]string{AnnotationValidationFailure: failure}
	for _, id := range []string{"e", "b", "d", "a", "f", "c"} {
		annotations["shepherd-"+id+"/exempt"] = "ex-" + id + "\n\nmessage " + id
	}
	got := h.record(ctx, &auditv1.Event{Stage: auditv1.StageResponseComplete, ObjectRef: ref, Verb: "create", Annotations: annotations})
	var summary []string
	for _, r := range got {
		summary = append(summary, r.Rule+"/"+r.Action+"/"+r.Exception)
	}
	want := []string{"A/Audit/", "A/Exempt/ex-a", "B/Exempt/ex-b", "C/Exempt/ex-c", "D/Exempt/ex-d", "E/Exempt/ex-e", "F/Exempt/ex-f"}
	if diff := cmp.Diff(want, summary); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	for _, r := range got {
		if !r.CallerAuthenticated {
			t.Errorf("record %s: the sink's caller is authenticated by its token", r.Rule)
		}
	}
}

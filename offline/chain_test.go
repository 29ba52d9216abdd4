package offline

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/webhook"
)

// object is an object of apiVersion and kind named namespace/name.
func object(apiVersion, kind, namespace, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind}}
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// TestCheckFilesValidate: check's settings are refused, naming the flag,
// when they do not go together; the operation is CREATE, or UPDATE with
// --old, unless given (in any case), and field validation is Strict
// unless given.
func TestCheckFilesValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		in      CheckFilesInput
		wantOp  string
		wantFV  string
		wantErr string
	}{
		{name: "the defaults", in: CheckFilesInput{Files: []string{"a"}, Timeout: time.Second}, wantOp: "CREATE", wantFV: "Strict"},
		{name: "--old makes an UPDATE", in: CheckFilesInput{Files: []string{"a"}, Old: "o", FieldValidation: "Warn", Timeout: time.Second}, wantOp: "UPDATE", wantFV: "Warn"},
		{name: "an operation in lower case", in: CheckFilesInput{Files: []string{"a"}, Old: "o", Operation: "delete", Timeout: time.Second}, wantOp: "DELETE", wantFV: "Strict"},
		{name: "a DELETE of the given object", in: CheckFilesInput{Files: []string{"a"}, Operation: "DELETE", Timeout: time.Second}, wantOp: "DELETE", wantFV: "Strict"},
		{name: "standard input once", in: CheckFilesInput{Files: []string{"a"}, Context: []string{"-"}, Timeout: time.Second}, wantOp: "CREATE", wantFV: "Strict"},
		{name: "no file", in: CheckFilesInput{Timeout: time.Second}, wantErr: "check needs at least one -f FILE|DIR"},
		{name: "another field validation", in: CheckFilesInput{Files: []string{"a"}, FieldValidation: "Ignore", Timeout: time.Second}, wantErr: `--field-validation must be Strict or Warn, got "Ignore"`},
		{name: "another operation", in: CheckFilesInput{Files: []string{"a"}, Operation: "patch", Timeout: time.Second}, wantErr: `--operation must be CREATE, UPDATE or DELETE, got "patch"`},
		{name: "a CREATE with --old", in: CheckFilesInput{Files: []string{"a"}, Old: "o", Operation: "create", Timeout: time.Second}, wantErr: "--old goes with --operation UPDATE or DELETE"},
		{name: "an UPDATE without --old", in: CheckFilesInput{Files: []string{"a"}, Operation: "UPDATE", Timeout: time.Second}, wantErr: "--operation UPDATE needs --old FILE with the stored object"},
		{name: "no timeout", in: CheckFilesInput{Files: []string{"a"}}, wantErr: "--timeout must be positive, got 0s"},
		{name: "a negative timeout", in: CheckFilesInput{Files: []string{"a"}, Timeout: -time.Second}, wantErr: "--timeout must be positive, got -1s"},
		{name: "standard input twice", in: CheckFilesInput{Files: []string{"a", "-"}, Policies: []string{"-"}, Timeout: time.Second}, wantErr: "standard input (-) can be read only once: give it to one of -f, --old, --context, --policy"},
		{name: "standard input as -f and --old", in: CheckFilesInput{Files: []string{"-"}, Old: "-", Timeout: time.Second}, wantErr: "standard input (-) can be read only once: give it to one of -f, --old, --context, --policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := tc.in
			op, err := in.validate()
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("operation %s, want error %q", op, tc.wantErr)
				}
				if diff := cmp.Diff(tc.wantErr, err.Error()); diff != "" {
					t.Errorf("error (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if op != tc.wantOp || in.FieldValidation != tc.wantFV {
				t.Errorf("operation %s, field validation %s; want %s, %s", op, in.FieldValidation, tc.wantOp, tc.wantFV)
			}
		})
	}
}

// TestRequest: the request is the apiserver's for the operation, by the
// user shepherd-check: a CREATE has no old object, an UPDATE both, and a
// DELETE none but the old one, of the stored object when given (its
// identity too), else of the object itself.
func TestRequest(t *testing.T) {
	t.Parallel()
	obj := object("trainer.kubeflow.org/v1alpha1", "TrainJob", "ml", "tj")
	old := object("trainer.kubeflow.org/v1alpha1", "TrainJob", "ml", "stored")
	old.SetLabels(map[string]string{"v": "old"})
	js := func(u *unstructured.Unstructured) []byte {
		b, err := json.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	req := func(op admissionv1.Operation, name string, object, oldObject []byte) *webhook.Request {
		return &webhook.Request{
			UID: "shepherd-check", Operation: op,
			Kind:      metav1.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"},
			Namespace: "ml", Name: name, Object: object, OldObject: oldObject,
			UserInfo: authenticationv1.UserInfo{Username: "shepherd-check"},
		}
	}
	for _, tc := range []struct {
		name     string
		op       string
		obj, old *unstructured.Unstructured
		want     *webhook.Request
	}{
		{"CREATE", "CREATE", obj, nil, req(admissionv1.Create, "tj", js(obj), nil)},
		{"UPDATE", "UPDATE", obj, old, req(admissionv1.Update, "tj", js(obj), js(old))},
		{"DELETE of the stored object", "DELETE", obj, old, req(admissionv1.Delete, "stored", nil, js(old))},
		{"DELETE of the object given", "DELETE", obj, nil, req(admissionv1.Delete, "tj", nil, js(obj))},
	} {
		got, err := Request(tc.op, tc.obj, tc.old)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestMatchOld: with one object and one stored object, the stored one
// must be the same object (any version of its group and kind), or the
// error says every way it differs; with more, each object takes the one
// of its identity, and one without is an error naming it.
func TestMatchOld(t *testing.T) {
	t.Parallel()
	m := func(file string, line int, u *unstructured.Unstructured) Manifest {
		return Manifest{Obj: u, File: file, Line: line}
	}
	tj := func(version, ns, name string) *unstructured.Unstructured {
		return object("trainer.kubeflow.org/"+version, "TrainJob", ns, name)
	}
	a, b := tj("v1alpha1", "ml", "a"), tj("v1alpha1", "ml", "b")
	for _, tc := range []struct {
		name     string
		obj      Manifest
		olds     []Manifest
		nObjects int
		want     *unstructured.Unstructured
		wantErr  string
	}{{
		name: "the same object", obj: m("new.yaml", 1, tj("v1alpha1", "ml", "a")), olds: []Manifest{m("old.yaml", 1, a)}, nObjects: 1, want: a,
	}, {
		name: "the same object at another version", obj: m("new.yaml", 1, tj("v1beta1", "ml", "a")), olds: []Manifest{m("old.yaml", 1, a)}, nObjects: 1, want: a,
	}, {
		name: "another namespace and name", obj: m("new.yaml", 1, tj("v1alpha1", "ml", "a")), olds: []Manifest{m("old.yaml", 3, tj("v1alpha1", "dev", "x"))}, nObjects: 1,
		wantErr: `new.yaml:1: --old old.yaml:3 is another object (namespace "dev", not "ml"; name "x", not "a"): --old must hold the stored version of the same object (same group, kind, namespace and name)`,
	}, {
		name: "another kind of the core group", obj: m("new.yaml", 2, object("v1", "ConfigMap", "", "c")), olds: []Manifest{m("old.yaml", 1, object("v1", "Secret", "", "c"))}, nObjects: 1,
		wantErr: "new.yaml:2: --old old.yaml:1 is another object (kind Secret, not ConfigMap): --old must hold the stored version of the same object (same group, kind, namespace and name)",
	}, {
		name: "one of several", obj: m("new.yaml", 5, tj("v1alpha1", "ml", "b")), olds: []Manifest{m("old.yaml", 1, a), m("old.yaml", 5, b)}, nObjects: 2, want: b,
	}, {
		name: "one stored object, several objects", obj: m("new.yaml", 5, tj("v1alpha1", "ml", "a")), olds: []Manifest{m("old.yaml", 1, a)}, nObjects: 2, want: a,
	}, {
		name: "none of several", obj: m("new.yaml", 5, tj("v1alpha1", "dev", "z")), olds: []Manifest{m("old.yaml", 1, a), m("old.yaml", 5, b)}, nObjects: 2,
		wantErr: "new.yaml:5: no object in --old is the stored version of TrainJob.trainer.kubeflow.org dev/z; add it (same group, kind, namespace and name) or check this object alone",
	}, {
		name: "none of one, for several objects", obj: m("new.yaml", 5, object("v1", "ConfigMap", "", "c")), olds: []Manifest{m("old.yaml", 1, a)}, nObjects: 2,
		wantErr: "new.yaml:5: no object in --old is the stored version of ConfigMap c; add it (same group, kind, namespace and name) or check this object alone",
	}} {
		got, err := MatchOld(tc.obj, tc.olds, tc.nObjects)
		if tc.wantErr != "" {
			if err == nil {
				t.Errorf("%s: matched %s, want error", tc.name, NamespacedName(got))
			} else if diff := cmp.Diff(tc.wantErr, err.Error()); diff != "" {
				t.Errorf("%s: error (-want +got):\n%s", tc.name, diff)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
		} else if got != tc.want {
			t.Errorf("%s: matched %s, want %s", tc.name, NamespacedName(got), NamespacedName(tc.want))
		}
	}
}

// TestRunWithin: a verdict within the deadline is returned; past it, the
// error wraps ErrTimeout and names the timeout and the flag, whether the
// function stops at the deadline or not at all; the caller's own
// cancellation is not a timeout.
func TestRunWithin(t *testing.T) {
	t.Parallel()
	const timeoutMsg = "admission did not finish within --timeout=20ms: a rule takes too long on this object (or the object is very large); simplify the rule, or raise --timeout"
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	verdict := &webhook.Verdict{Allowed: true}
	for _, tc := range []struct {
		name    string
		ctx     func() context.Context
		f       func(context.Context, *webhook.Request) *webhook.Verdict
		wantErr string
		is      error
		// timeout is 20ms unless set.
		timeout time.Duration
	}{{
		// Generous: a loaded machine may start f late.
		name:    "in time",
		f:       func(context.Context, *webhook.Request) *webhook.Verdict { return verdict },
		timeout: time.Minute,
	}, {
		name:    "stops at the deadline",
		f:       func(ctx context.Context, _ *webhook.Request) *webhook.Verdict { <-ctx.Done(); return verdict },
		wantErr: timeoutMsg, is: ErrTimeout,
	}, {
		name:    "never stops",
		f:       func(context.Context, *webhook.Request) *webhook.Verdict { <-release; return verdict },
		wantErr: timeoutMsg, is: ErrTimeout,
	}, {
		name: "cancelled by the caller",
		ctx: func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		},
		f:       func(ctx context.Context, _ *webhook.Request) *webhook.Verdict { <-ctx.Done(); return verdict },
		wantErr: context.Canceled.Error(), is: context.Canceled,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			if tc.ctx != nil {
				ctx = tc.ctx()
			}
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 20 * time.Millisecond
			}
			v, err := RunWithin(ctx, timeout, tc.f, &webhook.Request{})
			if tc.wantErr == "" {
				if err != nil || v != verdict {
					t.Errorf("verdict %v, error %v; want the verdict", v, err)
				}
				return
			}
			if v != nil || err == nil {
				t.Fatalf("verdict %v, error %v; want an error", v, err)
			}
			if diff := cmp.Diff(tc.wantErr, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			if tc.is != ErrTimeout && errors.Is(err, ErrTimeout) {
				t.Errorf("error %v is a timeout", err)
			}
		})
	}
}

// TestDefaultNamespace: a namespaced kind of the schemas without a
// namespace goes into "default", as kubectl puts it; cluster-scoped kinds,
// kinds the schemas do not know and objects with a namespace keep theirs.
func TestDefaultNamespace(t *testing.T) {
	t.Parallel()
	s, err := celrules.PinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		want string
	}{
		{"a TrainJob", object("trainer.kubeflow.org/v1alpha1", "TrainJob", "", "x"), "default"},
		{"a PodCliqueSet", object("grove.io/v1alpha1", "PodCliqueSet", "", "x"), "default"},
		{"a JobSet of another version", object("jobset.x-k8s.io/v1", "JobSet", "", "x"), "default"},
		{"a TrainJob in its namespace", object("trainer.kubeflow.org/v1alpha1", "TrainJob", "ml", "x"), "ml"},
		{"a ClusterTrainingRuntime", object("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", "", "x"), ""},
		{"a Namespace", object("v1", "Namespace", "", "x"), ""},
		{"a kind the schemas lack", object("v1", "ConfigMap", "", "x"), ""},
	} {
		DefaultNamespace(s, tc.obj)
		if got := tc.obj.GetNamespace(); got != tc.want {
			t.Errorf("%s: namespace %q, want %q", tc.name, got, tc.want)
		}
	}
	DefaultNamespace(s, nil) // nothing to do, no panic
}

// TestUnknownFields: a field the schema lacks is pruned from the object
// and reported at its path, naming the kind and the schemas: denied under
// Strict, a warning under Warn; a kind without a schema is left alone.
func TestUnknownFields(t *testing.T) {
	t.Parallel()
	s, err := celrules.PinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		validation string
		action     webhook.Action
	}{{metav1.FieldValidationStrict, webhook.ActionDeny}, {metav1.FieldValidationWarn, webhook.ActionWarn}} {
		obj := object("trainer.kubeflow.org/v1alpha1", "TrainJob", "ml", "tj")
		obj.Object["spec"] = map[string]any{"runtimeRef": map[string]any{"name": "torch"}, "bogus": int64(1)}
		got := UnknownFields(s, obj, tc.validation)
		want := []webhook.Violation{{
			Rule: webhook.RuleSchema, Field: "spec.bogus", Action: tc.action,
			Message: "unknown field: the schema of TrainJob in " + s.Source + " has no such field (rejected under Strict field validation, dropped under Warn)",
		}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.validation, diff)
		}
		if _, found, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "bogus"); found {
			t.Errorf("%s: spec.bogus is still in the object", tc.validation)
		}
		if name, _, _ := unstructured.NestedString(obj.Object, "spec", "runtimeRef", "name"); name != "torch" {
			t.Errorf("%s: a known field was pruned: %v", tc.validation, obj.Object["spec"])
		}
	}
	cm := object("v1", "ConfigMap", "ml", "c")
	cm.Object["bogus"] = "x"
	if got := UnknownFields(s, cm, metav1.FieldValidationStrict); got != nil || cm.Object["bogus"] != "x" {
		t.Errorf("a ConfigMap: %v, object %v; want it left alone", got, cm.Object)
	}
}

// TestExceptionSet: an exception may name a built-in rule or a policy
// given with it; another rule is an error naming the exception and saying
// where rules come from.
func TestExceptionSet(t *testing.T) {
	t.Parallel()
	exc := func(rules ...string) *shepherdv1alpha1.PolicyException {
		return &shepherdv1alpha1.PolicyException{ObjectMeta: metav1.ObjectMeta{Name: "legacy", Namespace: "ml"},
			Spec: shepherdv1alpha1.PolicyExceptionSpec{Rules: rules, Reason: "old jobs"}}
	}
	policies := []*shepherdv1alpha1.WorkloadPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "team-label"}}}
	for _, tc := range []struct {
		name    string
		exc     *shepherdv1alpha1.PolicyException
		wantErr []string
	}{
		{"a built-in rule", exc("V-TJ-1"), nil},
		{"a policy given", exc("team-label", "V-TJ-1"), nil},
		{"an unknown rule", exc("V-TJ-1", "V-NOPE-9"), []string{`PolicyException "legacy": `, "V-NOPE-9", "; a rule is a built-in rule ID (shepherd export rules lists them) or the name of a WorkloadPolicy given with --policy"}},
	} {
		set, err := ExceptionSet([]*shepherdv1alpha1.PolicyException{tc.exc}, policies)
		if tc.wantErr == nil {
			if err != nil || set == nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.wantErr {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, w)
			}
		}
	}
}

package serve

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/api/install"
	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook"
	"github.com/shepherd-k8s/shepherd/webhook/updatefilter"
)

// TestTokenFromFile: the audit sink's token is read on every request,
// trimmed; unset, missing or empty, it is "" (the sink refuses).
func TestTokenFromFile(t *testing.T) {
	if got := tokenFromFile("")(); got != "" {
		t.Errorf("unset: %q", got)
	}
	dir := t.TempDir()
	token := tokenFromFile(filepath.Join(dir, "token"))
	if got := token(); got != "" {
		t.Errorf("missing file: %q", got)
	}
	testkit.WriteFile(t, dir, "token", "  first\n")
	if got := token(); got != "first" {
		t.Errorf("token = %q, want first", got)
	}
	testkit.WriteFile(t, dir, "token", "second\n")
	if got := token(); got != "second" {
		t.Errorf("after the Secret rotated: %q, want second", got)
	}
	testkit.WriteFile(t, dir, "token", "\n")
	if got := token(); got != "" {
		t.Errorf("empty file: %q", got)
	}
	if err := os.Remove(filepath.Join(dir, "token")); err != nil {
		t.Fatal(err)
	}
	if got := token(); got != "" {
		t.Errorf("removed file: %q", got)
	}
}

// newExporter is a policyExporter over a fake apiserver holding objs and
// a chain of the built-in rules.
func newExporter(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) (*policyExporter, client.Client) {
	t.Helper()
	chain, err := webhook.NewChain(webhook.ChainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(install.NewScheme()).WithObjects(objs...).Build(), funcs)
	return &policyExporter{client: c, chain: chain}, c
}

// exported are the ValidatingAdmissionPolicy and binding of WorkloadPolicy
// name as stored, nil when absent.
func exported(t *testing.T, c client.Client, name string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	ctx := context.Background()
	key := client.ObjectKey{Name: celrules.PolicyName(name, celrules.SourcePolicy)}
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := c.Get(ctx, key, vap); apierrors.IsNotFound(err) {
		vap = nil
	} else if err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	if err := c.Get(ctx, key, binding); apierrors.IsNotFound(err) {
		binding = nil
	} else if err != nil {
		t.Fatal(err)
	}
	return vap, binding
}

func staleExport(name string) []client.Object {
	n := celrules.PolicyName(name, celrules.SourcePolicy)
	return []client.Object{
		&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: n}},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: n}},
	}
}

// TestPolicyExporterApplies: a WorkloadPolicy that compiles is applied as
// its ValidatingAdmissionPolicy and binding, both owned by the policy
// (the garbage collector deletes them with it), the binding auditing as
// well so the audit sink sees its verdicts; it is exported again at the
// resync period.
func TestPolicyExporterApplies(t *testing.T) {
	p := testkit.TrainJobPolicy("gpus").Validation("has(object.spec)", "needs a spec").Obj()
	p.UID = types.UID("policy-uid")
	e, c := newExporter(t, interceptor.Funcs{}, p)
	res, err := e.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != exportResync {
		t.Errorf("requeue after %v, want the resync period %v", res.RequeueAfter, exportResync)
	}
	vap, binding := exported(t, c, "gpus")
	if vap == nil || binding == nil {
		t.Fatalf("exported policy %v, binding %v; want both", vap != nil, binding != nil)
	}
	owner := []metav1.OwnerReference{{APIVersion: shepherdv1alpha1.GroupVersion.String(), Kind: "WorkloadPolicy", Name: "gpus", UID: "policy-uid"}}
	if diff := cmp.Diff(owner, vap.OwnerReferences); diff != "" {
		t.Errorf("policy owner (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(owner, binding.OwnerReferences); diff != "" {
		t.Errorf("binding owner (-want +got):\n%s", diff)
	}
	if !slices.Contains(binding.Spec.ValidationActions, admissionregistrationv1.Audit) || !slices.Contains(binding.Spec.ValidationActions, admissionregistrationv1.Deny) {
		t.Errorf("binding actions %v, want Deny and Audit", binding.Spec.ValidationActions)
	}
	if len(vap.Spec.Validations) != 1 || vap.Spec.Validations[0].Expression != "has(object.spec)" || !strings.HasPrefix(vap.Spec.Validations[0].Message, "needs a spec") {
		t.Errorf("exported validations %+v, want the policy's", vap.Spec.Validations)
	}
}

// TestPolicyExporterDeletes: the export is deleted when its policy is
// deleted, being deleted, or does not compile (a policy that does not
// compile is enforced in neither mode); one already gone is no error.
func TestPolicyExporterDeletes(t *testing.T) {
	deleting := testkit.TrainJobPolicy("deleting").Validation("true", "m").Obj()
	deleting.Finalizers = []string{"example.com/hold"}
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	broken := testkit.TrainJobPolicy("broken").Validation("object.spec.", "m").Obj()
	for _, tc := range []struct {
		name        string
		policy      *shepherdv1alpha1.WorkloadPolicy
		stale       bool
		wantRequeue time.Duration
	}{
		{name: "gone", stale: true},
		{name: "gone, export already deleted"},
		{name: "deleting", policy: deleting, stale: true},
		{name: "broken", policy: broken, stale: true, wantRequeue: exportResync},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policyName := "gone"
			var objs []client.Object
			if tc.policy != nil {
				policyName = tc.policy.Name
				objs = append(objs, tc.policy)
			}
			if tc.stale {
				objs = append(objs, staleExport(policyName)...)
			}
			e, c := newExporter(t, interceptor.Funcs{}, objs...)
			res, err := e.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: policyName}})
			if err != nil || res.RequeueAfter != tc.wantRequeue {
				t.Errorf("Reconcile = %+v, %v; want requeue after %v", res, err, tc.wantRequeue)
			}
			if vap, binding := exported(t, c, policyName); vap != nil || binding != nil {
				t.Errorf("export left: policy %v, binding %v", vap != nil, binding != nil)
			}
		})
	}
}

// TestPolicyExporterErrors: a policy that cannot be read, and an export
// that cannot be deleted, are errors naming what failed; a failed delete
// of the binding does not keep the policy's delete from being tried.
func TestPolicyExporterErrors(t *testing.T) {
	forbidden := func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
		if _, ok := obj.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding); ok {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "validatingadmissionpolicybindings"}, obj.GetName(), errors.New("RBAC"))
		}
		return c.Delete(ctx, obj, opts...)
	}
	e, c := newExporter(t, interceptor.Funcs{Delete: forbidden}, staleExport("gone")...)
	_, err := e.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "gone"}})
	if err == nil || !strings.Contains(err.Error(), "shepherd-policy-gone") || !apierrors.IsForbidden(err) {
		t.Errorf("Reconcile = %v, want the binding's Forbidden", err)
	}
	if vap, binding := exported(t, c, "gone"); vap != nil || binding == nil {
		t.Errorf("after the binding's delete failed: policy left %v, binding left %v; want the policy deleted anyway", vap != nil, binding != nil)
	}

	e, _ = newExporter(t, interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return apierrors.NewServiceUnavailable("apiserver down")
	}})
	if _, err := e.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "p"}}); err == nil || !strings.Contains(err.Error(), "reading WorkloadPolicy p") {
		t.Errorf("unreadable policy: %v", err)
	}
}

// TestKeptRules: each matchCondition follows its flag: switched off, the
// UPDATE condition reads everything (updatefilter.Disabled) and every
// request has work; switched on, both are the chain's.
func TestKeptRules(t *testing.T) {
	chain, err := webhook.NewChain(webhook.ChainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No defaulter works on a DELETE: the mutating webhook has nothing to
	// do for it.
	trainJobs := schema.GroupResource{Group: api.TrainerGroup, Resource: "trainjobs"}
	on := keptRules{chain: chain, reads: true, work: true}
	off := keptRules{chain: chain}
	if on.Version() != chain.Version() || off.Version() != chain.Version() {
		t.Error("the version is not the chain's")
	}
	if chain.HasWork(true, trainJobs, "DELETE") {
		t.Fatal("the chain has mutating work on a TrainJob DELETE; pick a request it has none for")
	}
	if on.HasWork(true, trainJobs, "DELETE") {
		t.Error("with the work condition on, a request the chain has no work for has work")
	}
	if !on.HasWork(false, trainJobs, "CREATE") {
		t.Error("with the work condition on, a TrainJob CREATE has no validating work")
	}
	if !off.HasWork(true, trainJobs, "DELETE") {
		t.Error("with the work condition off, a request has no work")
	}
	if diff := cmp.Diff(chain.UpdateReads(), on.UpdateReads()); diff != "" {
		t.Errorf("UPDATE reads with the condition on (-chain +kept):\n%s", diff)
	}
	if diff := cmp.Diff(updatefilter.Disabled.UpdateReads(), off.UpdateReads()); diff != "" {
		t.Errorf("UPDATE reads with the condition off (-disabled +kept):\n%s", diff)
	}

	if err := setupUpdateFilter(parsed(t), &fakeChain{}, nil); err == nil || !strings.Contains(err.Error(), "cannot derive the UPDATE matchCondition") {
		t.Errorf("a chain that cannot derive the condition: %v", err)
	}
}

package webhook

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

// TestExceptionExemptsOneObjectAndStopsAtItsExpiry: through the apiserver
// and serve with the shipped RBAC, a PolicyException selecting TrainJobs
// labelled legacy=true lets such a TrainJob past the policy that denies
// every other one, with a warning naming the exception and an Exempt audit
// record (who, what rule, which exception, until when); from its expiry
// on, without anything restarted or changed, the same TrainJob is denied.
func TestExceptionExemptsOneObjectAndStopsAtItsExpiry(t *testing.T) {
	ctx := context.Background()
	f := newPolicyFixture(t)
	name := "max-day-" + f.id
	p := f.policy(t, name, "Deny", "Fail", maxDayExpr, maxDayMsg)
	if err := k.Create(ctx, p); err != nil {
		t.Fatalf("creating policy: %v", err)
	}
	waitPolicy(t, name, metav1.ConditionTrue)

	// Long enough for the admissions below, short enough to wait out.
	expires := metav1.NewTime(time.Now().Add(20 * time.Second).Truncate(time.Second))
	ex := &shepherdv1alpha1.PolicyException{
		ObjectMeta: metav1.ObjectMeta{Name: "legacy-" + f.id},
		Spec: shepherdv1alpha1.PolicyExceptionSpec{
			Rules:             []string{name},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"policy-test": f.id}},
			ObjectSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"legacy": "true"}},
			Expires:           &expires,
			Reason:            "migrating",
		},
	}
	if err := k.Create(ctx, ex); err != nil {
		t.Fatalf("creating the exception: %v", err)
	}
	t.Cleanup(func() { _ = k.Delete(context.Background(), ex) })

	legacy := func(i int) error {
		obj := f.trainJob(100000)
		obj.SetGenerateName("")
		obj.SetName(fmt.Sprintf("legacy-%d", i))
		obj.SetLabels(map[string]string{"legacy": "true"})
		return k.Create(ctx, obj)
	}
	// The exception reaches every replica's chain through its informer: poll
	// with dry runs until it does, then create for real.
	warns.Take()
	testkit.Eventually(t, timeout, "the exempt TrainJob admitted", func() error { return legacy(0) })
	want := fmt.Sprintf("exempt by PolicyException %s (until %s): spec.activeDeadlineSeconds: %s (shepherd %s)",
		ex.Name, expires.UTC().Format(time.RFC3339), maxDayMsg, name)
	if got := warns.Take(); !containsPart(got, want) {
		t.Errorf("warnings %q; want one containing %q", got, want)
	}
	if err := f.createTrainJob(t, 100000); !apierrors.IsInvalid(err) {
		t.Errorf("a TrainJob the exception does not select: %v; want denied by %s", err, name)
	}
	recs := auditRecords(t, "rule="+name+"&namespace="+f.ns, func(rs []audit.Record) bool {
		for _, r := range rs {
			if r.Action == "Exempt" {
				return true
			}
		}
		return false
	})
	for _, r := range recs {
		if r.Action != "Exempt" {
			continue
		}
		if r.Name != "legacy-0" || r.Exception != ex.Name || r.ExceptionExpires == nil || !r.ExceptionExpires.Equal(expires.Time) || r.User == "" || r.Field != "spec.activeDeadlineSeconds" {
			t.Errorf("Exempt record %+v; want legacy-0, the exception, its expiry, the user and the field", r)
		}
	}

	time.Sleep(time.Until(expires.Time))
	err := legacy(1)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "(shepherd "+name+")") {
		t.Errorf("after the expiry the legacy TrainJob: %v; want denied by %s", err, name)
	}
}

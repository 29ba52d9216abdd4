package native

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
	"github.com/shepherd-k8s/shepherd/webhook/exceptions"
)

// TestExceptionOfBuiltinRulesInNativeMode: in the native mode the
// apiserver runs the built-in rules as the installed (deploy/native)
// ValidatingAdmissionPolicies, so serve rewrites the ones an exception
// names: the invalid Training PodCliqueSet is admitted in the exempt
// namespace while the exception lasts, and at its expiry — the apiserver
// has no clock — serve restores the installed policies as they were and
// the PodCliqueSet is denied again, nothing restarted.
func TestExceptionOfBuiltinRulesInNativeMode(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	waitForPolicies(t, ns)
	rules := []string{"V-PCS-4", "V-PCS-7", "V-PCS-8", "D-PCS-1"}
	installed := func() (map[string]admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicy) {
		vaps := map[string]admissionregistrationv1.ValidatingAdmissionPolicy{}
		for _, r := range rules[:3] {
			v := admissionregistrationv1.ValidatingAdmissionPolicy{}
			if err := env.Client.Get(ctx, client.ObjectKey{Name: "shepherd-" + strings.ToLower(r)}, &v); err != nil {
				t.Fatal(err)
			}
			vaps[r] = v
		}
		m := &admissionregistrationv1.MutatingAdmissionPolicy{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "shepherd-d-pcs-1"}, m); err != nil {
			t.Fatal(err)
		}
		return vaps, m
	}
	beforeVAPs, beforeMAP := installed()

	expires := metav1.NewTime(time.Now().Add(30 * time.Second).Truncate(time.Second))
	ex := &shepherdv1alpha1.PolicyException{
		ObjectMeta: metav1.ObjectMeta{Name: "native-" + ns},
		Spec: shepherdv1alpha1.PolicyExceptionSpec{
			Rules:             rules,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			Expires:           &expires,
		},
	}
	if err := env.Client.Create(ctx, ex); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ex) })

	pcs := example(t, "invalid", "podcliqueset-training-autoscaled.yaml")
	pcs.SetNamespace(ns)
	waitAllowed(t, pcs)
	if time.Now().After(expires.Time) {
		t.Fatal("the exception expired before it was in force: the machine is too slow for this test's timing")
	}
	during, duringMAP := installed()
	for r, v := range during {
		if v.Annotations[exceptions.AnnotationExceptions] != ex.Name || v.Annotations[exceptions.AnnotationExpires] != expires.UTC().Format(time.RFC3339) {
			t.Errorf("%s's annotations %v; want the exception and its expiry", r, v.Annotations)
		}
	}
	if duringMAP.Annotations[exceptions.AnnotationExceptions] != ex.Name {
		t.Errorf("D-PCS-1's MutatingAdmissionPolicy annotations %v; want the exception", duringMAP.Annotations)
	}
	// Created for real: the apiserver publishes the policies' exempt audit
	// annotation, and the audit sink records each exempt violation.
	created := pcs.DeepCopy()
	created.SetName("exempt-" + pcs.GetName())
	start := time.Now()
	if err := env.Client.Create(ctx, created); err != nil {
		t.Fatalf("creating the exempt PodCliqueSet: %v", err)
	}
	var exempt []string
	testkit.Eventually(t, timeout, "the Exempt audit records of the PodCliqueSet", func() (bool, string) {
		exempt = nil
		for _, r := range cluster.AuditRecords(t, serve.Metrics, url.Values{"namespace": {ns}, "since": {start.Add(-time.Second).UTC().Format(time.RFC3339Nano)}}) {
			if r.Action != "Exempt" || r.Name != created.GetName() || r.DryRun {
				continue
			}
			if r.Exception != ex.Name || r.ExceptionExpires == nil || !r.ExceptionExpires.Equal(expires.Time) || r.User == "" || !strings.Contains(r.Message, "(shepherd "+r.Rule+")") {
				return false, fmt.Sprintf("record %+v: want the exception, its expiry, the user and the rule's message", r)
			}
			exempt = append(exempt, r.Rule)
		}
		slices.Sort(exempt)
		return slices.Equal(exempt, rules[:3]), fmt.Sprint(exempt)
	})
	other := pcs.DeepCopy()
	other.SetNamespace(env.Namespace(t))
	if err := env.Client.Create(ctx, other, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'shepherd-v-pcs-") {
		t.Errorf("in another namespace: %v; want denied by the installed policies", err)
	}

	time.Sleep(time.Until(expires.Time))
	testkit.Eventually(t, timeout, "the PodCliqueSet denied again after the expiry", func() (bool, string) {
		err := env.Client.Create(ctx, pcs.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'shepherd-v-pcs-"), fmt.Sprint(err)
	})
	afterVAPs, afterMAP := installed()
	for r := range beforeVAPs {
		b, a := beforeVAPs[r], afterVAPs[r]
		if diff := cmp.Diff(b.Spec, a.Spec); diff != "" || !cmp.Equal(b.Annotations, a.Annotations) {
			t.Errorf("%s not restored as installed (-installed +after):\n%s\nannotations %v -> %v", r, diff, b.Annotations, a.Annotations)
		}
	}
	testkit.Eventually(t, timeout, "D-PCS-1's MutatingAdmissionPolicy restored", func() (bool, string) {
		_, afterMAP = installed()
		return cmp.Equal(beforeMAP.Spec, afterMAP.Spec) && cmp.Equal(beforeMAP.Annotations, afterMAP.Annotations), cmp.Diff(beforeMAP.Spec, afterMAP.Spec)
	})
}

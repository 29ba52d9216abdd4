package offline

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	shepherdv1alpha1 "github.com/shepherd-k8s/shepherd/api/shepherd/v1alpha1"
	"github.com/shepherd-k8s/shepherd/celrules"
)

// ExportMAPs writes a policy and binding per default a policy can express
// on the schemas, rewrites the one an exception names, and says in its notes
// why the others are not exported.
func TestExportMAPs(t *testing.T) {
	s, err := celrules.PinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 7, 0, 0, 0, time.UTC)
	exc := &shepherdv1alpha1.PolicyException{ObjectMeta: metav1.ObjectMeta{Name: "legacy"},
		Spec: shepherdv1alpha1.PolicyExceptionSpec{Rules: []string{"D-PCS-6"}, Reason: "legacy sets"}}
	policies, bindings, notes, err := ExportMAPs(celrules.Config{Schemas: s}, nil, []*shepherdv1alpha1.PolicyException{exc}, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(policies) == 0 || len(policies) != len(bindings) {
		t.Fatalf("%d policies and %d bindings", len(policies), len(bindings))
	}
	exempted := false
	for _, p := range policies {
		if p.Labels[celrules.LabelRule] == "D-PCS-6" {
			exempted = p.Annotations["shepherd.dev/exceptions"] == "legacy"
		}
	}
	if !exempted {
		t.Error("D-PCS-6's policy does not name the exception")
	}
	all := strings.Join(notes, "")
	for _, want := range []string{
		"not exported: D-WL-1 (JobSet): needs lookups",
		"not exported: D-PCS-5 (PodCliqueSet): no default terminationDelay",
		"not exported: D-PCS-2 (PodCliqueSet)",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("notes %q do not say %q", all, want)
		}
	}
}

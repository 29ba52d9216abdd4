package offline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/celrules"
)

func checkManifests(t *testing.T, doc string) []Manifest {
	t.Helper()
	ms, err := Parse("in.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

const checkedPCS = `apiVersion: grove.io/v1alpha1
kind: PodCliqueSet
metadata: {name: p, namespace: ml}
spec:
  replicas: 1
  template:
    cliques:
    - name: w
      spec: {roleName: w, replicas: 2, podSpec: {containers: [{name: c, image: i}]}}
`

// Check admits each object as the apiserver would, with the chain's
// defaults as a patch and the violations of every rule; an UPDATE pairs
// each object with its stored version, and an old object of another
// identity is an error naming the file and line.
func TestCheck(t *testing.T) {
	s, err := celrules.PinnedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	chain, err := NewChain(celrules.Config{Schemas: s}, nil, nil, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	in := CheckInput{Chain: chain, Schemas: s, Operation: "CREATE", FieldValidation: metav1.FieldValidationStrict, Timeout: 10 * time.Second}

	in.Objects = checkManifests(t, checkedPCS+"---\n"+strings.Replace(checkedPCS, "name: p,", "name: bad,", 1)+"    - name: w\n      spec: {roleName: w2, replicas: 1, podSpec: {containers: [{name: c, image: i}]}}\n")
	got, err := Check(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d results, want 2", len(got))
	}
	if !got[0].Allowed || len(got[0].Violations) != 0 {
		t.Errorf("the valid PodCliqueSet: allowed %v, violations %+v", got[0].Allowed, got[0].Violations)
	}
	var paths []string
	for _, op := range got[0].Patch {
		paths = append(paths, op.Operation+" "+op.Path)
	}
	// D-PCS-1 (the carrier, on Grove's schema) and D-PCS-6.
	if diff := cmp.Diff([]string{"add /metadata/annotations", "add /spec/template/cliques/0/spec/minAvailable"}, paths); diff != "" {
		t.Errorf("the valid PodCliqueSet's patch (-want +got):\n%s", diff)
	}
	if got[0].Object != nil {
		t.Error("the object is kept without KeepObjects")
	}
	if got[1].Allowed || len(got[1].Violations) == 0 || got[1].Name != "bad" || got[1].Operation != "CREATE" {
		t.Errorf("the PodCliqueSet with two cliques of one name: %+v, want it denied", got[1])
	}

	in.Operation, in.KeepObjects = "UPDATE", true
	in.Objects = checkManifests(t, checkedPCS)
	in.Olds = checkManifests(t, checkedPCS)
	got, err = Check(context.Background(), in)
	if err != nil || len(got) != 1 || !got[0].Allowed || got[0].Object == nil {
		t.Errorf("an UPDATE of the stored object: %+v, %v; want it allowed, with the object", got, err)
	}

	in.Objects = checkManifests(t, checkedPCS)
	in.Olds = checkManifests(t, strings.Replace(checkedPCS, "name: p,", "name: other,", 1))
	if _, err := Check(context.Background(), in); err == nil || !strings.Contains(err.Error(), "in.yaml:1") {
		t.Errorf("an old object of another identity: err %v, want one naming in.yaml:1", err)
	}
}

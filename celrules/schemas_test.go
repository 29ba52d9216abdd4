package celrules

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-k8s/shepherd/integrations/pinned"
)

var (
	seedOnce sync.Once
	seedVal  *Schemas
	seedErr  error
)

// seedSchemas are the seed-shaped CRDs' schemas (test/seedcrds): every
// built-in rule type-checks against them, which makes them the schemas the
// rules' own tests run with.
func seedSchemas(t testing.TB) *Schemas {
	t.Helper()
	seedOnce.Do(func() {
		crds, err := pinned.Read("../test/seedcrds", "../deploy/crds")
		if err != nil {
			seedErr = err
			return
		}
		seedVal, seedErr = NewSchemas(crds, "the seed-shaped CRDs")
	})
	if seedErr != nil {
		t.Fatal(seedErr)
	}
	return seedVal
}

// TestSchemasOf: schemas read from a set of CRDs are "of" the same CRDs in
// any order, and of no other set: another generation of one (its spec
// changed), another object of the same name (deleted and recreated), one
// more or one fewer.
func TestSchemasOf(t *testing.T) {
	crds, err := pinned.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range crds {
		c.UID = types.UID(fmt.Sprintf("uid-%d", i))
		c.Generation = 1
	}
	s, err := NewSchemas(crds, "test")
	if err != nil {
		t.Fatal(err)
	}
	reversed := slices.Clone(crds)
	slices.Reverse(reversed)
	if !s.Of(reversed) {
		t.Error("Of(the same CRDs, reversed) = false, want true")
	}
	changed := func(f func(*apiextensionsv1.CustomResourceDefinition)) []*apiextensionsv1.CustomResourceDefinition {
		out := make([]*apiextensionsv1.CustomResourceDefinition, len(crds))
		for i, c := range crds {
			out[i] = c.DeepCopy()
		}
		f(out[0])
		return out
	}
	for name, other := range map[string][]*apiextensionsv1.CustomResourceDefinition{
		"a new generation": changed(func(c *apiextensionsv1.CustomResourceDefinition) { c.Generation = 2 }),
		"recreated":        changed(func(c *apiextensionsv1.CustomResourceDefinition) { c.UID = "another" }),
		"one fewer":        crds[1:],
		"one more":         append(slices.Clone(crds), &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "x.example.com", UID: "x"}}),
	} {
		if s.Of(other) {
			t.Errorf("Of(%s) = true, want false", name)
		}
	}
	var none *Schemas
	if none.Of(crds) {
		t.Error("a nil Schemas is of no CRDs")
	}
}

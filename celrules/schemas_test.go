package celrules

import (
	"sync"
	"testing"

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

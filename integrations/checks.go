package integrations

import (
	"slices"

	"github.com/shepherd-k8s/shepherd/integrations/gocheck"
	"github.com/shepherd-k8s/shepherd/integrations/grove"
	"github.com/shepherd-k8s/shepherd/integrations/trainer"
)

// Checks are the rules the integrations write in Go (gocheck), registered
// here, one line per framework that has any; the admission chain runs them
// without naming a framework.
func Checks() []gocheck.Check {
	return slices.Concat(trainer.Checks, grove.Checks)
}

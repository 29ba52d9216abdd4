// Package seedcrds gives tests the seed-shaped CRDs of this directory
// (see README.md): their path for control planes that install them, and
// their schemas for engines that type-check against them.
package seedcrds

import (
	"path/filepath"
	"runtime"
	"sync"

	"github.com/shepherd-k8s/shepherd/celrules"
	"github.com/shepherd-k8s/shepherd/integrations/pinned"
)

// Dir is the directory holding the seed-shaped CRDs.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

var (
	once    sync.Once
	schemas *celrules.Schemas
	err     error
)

// Schemas returns the schemas of the seed-shaped CRDs, parsed once: every
// built-in rule type-checks against them.
func Schemas() (*celrules.Schemas, error) {
	once.Do(func() {
		crds, rerr := pinned.Read(Dir())
		if rerr != nil {
			err = rerr
			return
		}
		schemas, err = celrules.NewSchemas(crds, "the seed-shaped CRDs (test/seedcrds)")
	})
	return schemas, err
}

// Config returns cfg with the seed-shaped schemas, failing like a test
// helper should when they cannot be read.
func Config(cfg celrules.Config) celrules.Config {
	s, err := Schemas()
	if err != nil {
		panic("reading the seed-shaped CRDs: " + err.Error())
	}
	cfg.Schemas = s
	return cfg
}

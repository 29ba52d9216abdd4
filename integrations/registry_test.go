package integrations_test

import (
	"testing"

	"github.com/shepherd-k8s/shepherd/api"

	. "github.com/shepherd-k8s/shepherd/integrations"
	_ "github.com/shepherd-k8s/shepherd/integrations/all"
)

// Every registered check is well formed: a unique ID, a group and kinds it
// judges, operations, a reason no policy can express it, and exactly one
// of Validate and Default.
func TestChecksAreWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Checks() {
		if c.ID == "" || seen[c.ID] {
			t.Errorf("check %q: empty or registered twice", c.ID)
		}
		seen[c.ID] = true
		if c.Group == "" || len(c.Kinds) == 0 || len(c.Operations) == 0 || c.Reason == "" || c.Description == "" {
			t.Errorf("check %s: group %q, kinds %v, operations %v, reason %q, description %q: want all set", c.ID, c.Group, c.Kinds, c.Operations, c.Reason, c.Description)
		}
		if (c.Validate == nil) == (c.Default == nil) {
			t.Errorf("check %s: want exactly one of Validate and Default", c.ID)
		}
	}
	for _, id := range []string{"V-TJ-3", "V-TJ-4", "V-TR-7", "V-PCLQ-1", "D-WL-1"} {
		if !seen[id] {
			t.Errorf("check %s is not registered", id)
		}
	}
}

func TestCheckJudgesItsGroupKindsAndOperations(t *testing.T) {
	var v3 = Checks()[0]
	for _, c := range Checks() {
		if c.ID == "V-TJ-3" {
			v3 = c
		}
	}
	for _, tc := range []struct {
		group, kind, op string
		want            bool
	}{
		{api.TrainerGroup, api.KindTrainJob, "CREATE", true},
		{api.TrainerGroup, api.KindTrainJob, "UPDATE", false},
		{api.TrainerGroup, api.KindTrainingRuntime, "CREATE", false},
		{api.GroveGroup, api.KindTrainJob, "CREATE", false},
	} {
		if got := v3.Judges(tc.group, tc.kind, tc.op); got != tc.want {
			t.Errorf("V-TJ-3 judges %s %s.%s = %v, want %v", tc.op, tc.kind, tc.group, got, tc.want)
		}
	}
}

package interop

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/shepherd-k8s/shepherd/cmd/shepherd/app"
	"github.com/shepherd-k8s/shepherd/integrations"
)

// TestStatusSaysWhoEnforcesWhat: beside Trainer v2.3.0 (whose TrainJob CRD
// has activeDeadlineSeconds) shepherd leaves the deadline to Trainer, keeps
// gang termination (no Grove controller writes MinAvailableBreached here),
// has every framework active and no built-in rule inactive.
func TestStatusSaysWhoEnforcesWhat(t *testing.T) {
	var st app.Status
	poll(t, "/status", func() (bool, string) {
		resp, err := http.Get("http://" + serve.Metrics + app.StatusPath)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, resp.Status
		}
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			return false, err.Error()
		}
		return strings.HasPrefix(st.Features[integrations.FeatureDeadline], "upstream"), st.Features[integrations.FeatureDeadline]
	})
	for _, f := range integrations.Frameworks {
		if !st.Frameworks[f.Name] {
			t.Errorf("framework %s inactive: %+v", f.Name, st.Frameworks)
		}
	}
	if got := st.Features[integrations.FeatureGangTermination]; got != "shepherd" {
		t.Errorf("gang termination: %q, want shepherd", got)
	}
	if len(st.InactiveRules) > 0 {
		t.Errorf("inactive built-in rules against the upstream CRDs: %v", st.InactiveRules)
	}
	if !strings.Contains(st.Schemas, "cluster") {
		t.Errorf("rules checked against %q, want the cluster's CRDs", st.Schemas)
	}
}

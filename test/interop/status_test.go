package interop

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/shepherd-k8s/shepherd/integrations"
	srv "github.com/shepherd-k8s/shepherd/serve"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// TestStatusSaysWhoEnforcesWhat: beside Trainer v2.3.0 (whose TrainJob CRD
// has activeDeadlineSeconds) shepherd leaves the deadline to Trainer, keeps
// gang termination (no Grove controller writes MinAvailableBreached here),
// has every framework active and no built-in rule inactive.
func TestStatusSaysWhoEnforcesWhat(t *testing.T) {
	var st srv.Status
	testkit.Eventually(t, timeout, "/status", func() (bool, string) {
		resp, err := http.Get("http://" + serve.Metrics + srv.StatusPath)
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
	// Against the upstream CRDs every built-in rule type-checks; the ones
	// their CRDs enforce whole are left to them (--defer-to-upstream), and
	// no other (no Trainer webhook is registered here: V-TJ-3 is shepherd's).
	var upstream []string
	for id, why := range st.InactiveRules {
		if !strings.HasPrefix(why, "enforced by the ") || !strings.Contains(why, " CRD (") {
			t.Errorf("built-in rule %s inactive against the upstream CRDs: %s", id, why)
		}
		upstream = append(upstream, id)
	}
	slices.Sort(upstream)
	if want := []string{"V-JS-1", "V-JS-3", "V-TJ-1"}; !slices.Equal(upstream, want) {
		t.Errorf("rules left to the upstream CRDs: %v, want %v", upstream, want)
	}
	if !strings.Contains(st.Schemas, "cluster") {
		t.Errorf("rules checked against %q, want the cluster's CRDs", st.Schemas)
	}
}

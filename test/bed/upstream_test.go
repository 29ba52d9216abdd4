package bed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/serve"
	"github.com/shepherd-k8s/shepherd/test/bed"
	"github.com/shepherd-k8s/shepherd/webhook/updatefilter"
)

// status reads serve's /status (serve run with --metrics-secure=false).
func status(t testing.TB) serve.Status {
	t.Helper()
	resp, err := http.Get("http://" + kit.Serve.Metrics + serve.StatusPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st serve.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// workCondition is the has-work matchCondition of shepherd's validating
// webhook, "" when it has none.
func workCondition(t testing.TB) string {
	t.Helper()
	for _, w := range kit.Webhooks {
		if w.GetKind() != "ValidatingWebhookConfiguration" {
			continue
		}
		var cfg admissionregistrationv1.ValidatingWebhookConfiguration
		if err := kit.Cluster.Client.Get(context.Background(), client.ObjectKey{Name: w.GetName()}, &cfg); err != nil {
			t.Fatal(err)
		}
		for _, c := range cfg.Webhooks[0].MatchConditions {
			if c.Name == updatefilter.WorkConditionName {
				return c.Expression
			}
		}
	}
	return ""
}

// TestTrainJobCreateLeftToTrainer (issue 31, items 1 and 2): beside Trainer
// v2.3.0, with its CRD and its validating webhook registered, every rule
// on a TrainJob create is enforced before or beside shepherd — V-TJ-1 by
// the CRD's minimum, V-TJ-3 by Trainer's validator — so serve lists them
// inactive with the reason, keeps the apiserver from calling it for
// TrainJob creates, and a create costs shepherd no webhook call. The user
// still gets a denial for a TrainJob on a missing runtime: Trainer's.
func TestTrainJobCreateLeftToTrainer(t *testing.T) {
	ctx := context.Background()
	ns := kit.Cluster.Namespace(t)
	kit.ServeWith(t, "--metrics-secure=false") // to read /status without a token
	kit.Eventually(t, time.Minute, "V-TJ-1 and V-TJ-3 inactive, enforced upstream", func() (bool, string) {
		st := status(t)
		return strings.Contains(st.InactiveRules["V-TJ-1"], "TrainJob CRD") &&
			strings.Contains(st.InactiveRules["V-TJ-3"], "validator.trainjob.trainer.kubeflow.org"), fmt.Sprintf("%v", st.InactiveRules)
	})
	kit.Eventually(t, time.Minute, "the has-work condition keeps TrainJob creates away", func() (bool, string) {
		c := workCondition(t)
		return strings.Contains(c, "'trainjobs' && request.operation == 'CREATE'"), c
	})
	for _, id := range []string{"V-TJ-2", "V-JS-2", "V-JS-4"} {
		if why, inactive := status(t).InactiveRules[id]; inactive {
			t.Errorf("%s inactive (%s): the CRD enforces it only in part", id, why)
		}
	}

	before := admissionRequests(t, map[string]string{"kind": "TrainJob"})
	good := bed.TrainJobObject(ns, "fine", 1, map[string]any{"activeDeadlineSeconds": int64(600)})
	if err := kit.Cluster.Client.Create(ctx, good, client.DryRunAll); err != nil {
		t.Fatalf("dry-run create of a valid TrainJob: %v", err)
	}
	bad := bed.TrainJobObject(ns, "orphan", 1, nil)
	bad.Object["spec"].(map[string]any)["runtimeRef"].(map[string]any)["name"] = "no-such-runtime"
	err := kit.Cluster.Client.Create(ctx, bad, client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), "must be created before the TrainJob is created") {
		t.Errorf("a TrainJob on a missing runtime: %v, want Trainer's denial", err)
	}
	if calls := admissionRequests(t, map[string]string{"kind": "TrainJob"}) - before; calls != 0 {
		t.Errorf("shepherd answered %v TrainJob admission requests for 2 creates, want 0", calls)
	}
}

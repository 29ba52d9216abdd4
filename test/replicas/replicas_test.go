// Package replicas runs `shepherd serve` as two replicas with leader
// election on, against one control plane, each in a child process of the
// test binary (controller names are unique per process; see
// cluster.StartReplica). Every other suite that checks Events runs one
// serve with --leader-elect=false, which hides what only a standby does.
//
// The failover tests SIGKILL the leader in the middle of a burst of
// enforcements — TrainJob deadlines and TTLs (trainjob_failover_test.go,
// events_kill_test.go), Training restarts and gang terminations
// (grove_failover_test.go), Workload creation (workload_failover_test.go)
// — and check from the apiserver's audit log that the survivor finishes
// the burst, nothing is done twice, and every enforcement has exactly one
// Event. The TrainJob bursts run on the test bed beside the real Trainer
// and JobSet controllers (plane_test.go: onBed); the Grove and Workload bursts
// on a control plane serving the seed-shaped CRDs, where the tests play
// Grove and the kubelets (seed).
package replicas

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/test/bed"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// timeout bounds every wait: generous, the machine is small and shared.
const timeout = 60 * time.Second

// leaseName is `shepherd serve`'s default --leader-election-id.
const leaseName = "shepherd.shepherd.dev"

var env *cluster.Cluster

func TestMain(m *testing.M) {
	var kit *bed.Suite
	cluster.RunMain(m, cluster.Options{
		CRDs: cluster.SeedCRDs,
		// The Workload failover test needs scheduling.k8s.io served; the
		// other tests use no runtime with podGroupPolicy.workload.
		WorkloadAPI: cluster.WorkloadAPIV1beta1,
		// The failover tests count writes in the apiserver's audit log.
		AuditPolicy: auditPolicy,
		// Registers shepherd's webhooks and issues the serving certificate
		// both replicas serve (each on a port of its own).
		Webhooks: envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(cluster.RepoRoot(), "deploy", "webhook")},
			LocalServingHost: "127.0.0.1",
		},
	}, &env, func(c *cluster.Cluster) (cluster.Teardown, error) {
		seed = seedPlane(c)
		return nil, nil
	}, bed.Setup(bed.SuiteOptions{NoServe: true}, &kit), func(*cluster.Cluster) (cluster.Teardown, error) {
		onBed = bedPlane(kit)
		return nil, nil
	})
}

// A PodCliqueSet that V-PCS rules deny: minAvailable above replicas,
// autoscaling on a Training set, restartPolicy Always.
const deniedPCS = `{
  "apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueSet",
  "metadata": {"name": %q, "namespace": %q},
  "spec": {"replicas": 1, "workloadType": "Training", "template": {"cliques": [{
    "name": "worker",
    "spec": {"roleName": "worker", "replicas": 4, "minAvailable": 5,
      "autoScalingConfig": {"minReplicas": 2, "maxReplicas": 8},
      "podSpec": {"restartPolicy": "Always", "containers": [{"name": "worker", "image": "busybox"}]}}
  }]}}
}`

// validate POSTs an AdmissionReview for obj (CREATE) to one replica's
// /validate, trusting envtest's CA, and returns the response.
func validate(t *testing.T, r *cluster.Replica, ns, name string, obj []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	hc := env.WebhookClient(t, nil)
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("standby-" + name),
			Kind:      metav1.GroupVersionKind{Group: api.GroveGroup, Version: "v1alpha1", Kind: api.KindPodCliqueSet},
			Resource:  metav1.GroupVersionResource{Group: api.GroveGroup, Version: "v1alpha1", Resource: "podcliquesets"},
			Namespace: ns, Name: name, Operation: admissionv1.Create,
			UserInfo: authenticationv1.UserInfo{Username: "standby-test"},
		},
	}
	review.Request.Object.Raw = obj
	body, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Post("https://"+r.Webhook+"/validate", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST /validate to %s: %v", r.Webhook, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /validate to %s: HTTP %d %s", r.Webhook, resp.StatusCode, out)
	}
	var got admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &got); err != nil || got.Response == nil {
		t.Fatalf("answer of %s is no AdmissionReview (%v): %s", r.Webhook, err, out)
	}
	return got.Response
}

// TestStandbyWritesPolicyViolationEvents: the replica that is not the
// leader answers admission, and the PolicyViolation Events of its verdicts
// reach the apiserver (the Events broadcaster runs on every replica, not
// only on the leader).
func TestStandbyWritesPolicyViolationEvents(t *testing.T) {
	ctx := context.Background()
	leNS := env.Namespace(t)
	flags := []string{"--leader-elect=true", "--leader-election-namespace=" + leNS, "--graceful-shutdown-timeout=10s"}

	// The first replica started is the leader: wait for it to hold the
	// Lease before the second starts, which then stays standby.
	env.StartReplica(t, flags...)
	leaderID, _ := cluster.AwaitHolder(t, seed.Client, leNS, leaseName, timeout)
	standby := env.StartReplica(t, flags...)

	ns := env.Namespace(t)
	const name = "denied-by-standby"
	resp := validate(t, standby, ns, name, []byte(fmt.Sprintf(deniedPCS, name, ns)))
	if resp.Allowed {
		t.Fatalf("the standby allowed a PodCliqueSet the V-PCS rules deny: %+v", resp)
	}

	var evs eventsv1.EventList
	if err := testkit.Poll(200*time.Millisecond, timeout, func(ctx context.Context) (bool, error) {
		if err := env.Client.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == api.EventPolicyViolation && e.Regarding.Name == name && e.Regarding.Kind == api.KindPodCliqueSet {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no PolicyViolation Event for the standby's verdict on %s/%s (Events: %d): %v", ns, name, len(evs.Items), err)
	}
	// The standby really was the standby all along: the leader kept the
	// Lease, so no failover made the second replica the writer.
	if got, _, err := cluster.LeaseHolder(ctx, seed.Client, leNS, leaseName); err != nil || got != leaderID {
		t.Errorf("Lease holder = %q (err %v), want the first replica %q throughout", got, err, leaderID)
	}
}

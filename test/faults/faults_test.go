package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// loadRate is the dry-run creates per second of the rolling restart.
const loadRate = 100

// stopBound is how long a replica may take to exit after SIGTERM: the
// drain period, then --graceful-shutdown-timeout (15 s, replicaFlags) at
// most, and slack.
const stopBound = drainPeriod + 15*time.Second + 10*time.Second

// A rolling restart of both replicas — each SIGTERMed, its replacement
// started and ready, then the next — while a client creates TrainJobs
// (dryRun) at loadRate through shepherd's webhooks: not one admission
// fails, and every old replica exits 0.
func TestRollingRestartFailsNoAdmission(t *testing.T) {
	leaseNS := env.Namespace(t)
	p := startProxy(t)
	flags := replicaFlags(leaseNS)
	a := env.StartReplica(t, flags...)
	first, _ := cluster.AwaitHolder(t, env.Client, leaseNS, leaseName, timeout)
	b := env.StartReplica(t, flags...)
	p.waitReady(t, p.add(a))
	p.waitReady(t, p.add(b))

	ns := env.Namespace(t)
	rt := createRuntime(t, a, b)
	l := startLoad(t, ns, rt, loadRate)
	start := time.Now()
	time.Sleep(2 * time.Second)
	for i, old := range []*cluster.Replica{a, b} {
		before, _, _ := cluster.LeaseHolder(context.Background(), env.Client, leaseNS, leaseName)
		termAt := time.Now()
		if err := old.Terminate(); err != nil {
			t.Fatalf("SIGTERM to replica %d: %v", i, err)
		}
		// a, started first, is the leader: it stops its reconcilers and
		// releases the Lease at SIGTERM, and another replica takes it
		// without waiting for it to expire.
		if old == a && before == first {
			_, at := cluster.AwaitHolder(t, env.Client, leaseNS, leaseName, timeout, first)
			t.Logf("the leader SIGTERMed: Lease held by another replica %v later", at.Sub(termAt).Round(10*time.Millisecond))
		}
		repl := env.StartReplica(t, flags...)
		rb := p.add(repl)
		p.waitReady(t, rb)
		code, err := old.Wait(stopBound)
		if err != nil {
			t.Fatal(err)
		}
		if code != 0 {
			t.Errorf("replica %d exited %d after SIGTERM, want 0:\n%s", i, code, old.Log())
		}
		t.Logf("replica %d replaced: replacement ready %v after the SIGTERM", i, time.Since(termAt).Round(10*time.Millisecond))
	}
	time.Sleep(2 * time.Second)
	l.end()
	elapsed := time.Since(start)

	total, failed := l.total.Load(), l.failed.Load()
	rate := float64(total) / elapsed.Seconds()
	t.Logf("rolling restart of 2 replicas: %d dry-run creates in %v (%.0f/s), %d failed; proxy: %d connections with no ready replica, %d refused by the replica",
		total, elapsed.Round(100*time.Millisecond), rate, failed, p.noBackend.Load(), p.dialFailed.Load())
	if failed > 0 {
		t.Errorf("%d of %d admissions failed during the rolling restart:%s", failed, total, l.errors())
	}
	if rate < loadRate/2 {
		t.Errorf("the load ran at %.0f creates/s, not the %d/s the test is about", rate, loadRate)
	}
}

// SIGTERM of a replica right after it answered a burst of denials, with
// the PolicyViolation Events they make rate-limited so that most are still
// queued in the broadcaster: every one of them reaches the apiserver
// before the replica exits (0). (The reconcilers' lifecycle Events are
// written before their action, not queued: test/replicas.)
func TestSIGTERMWritesTheQueuedEvents(t *testing.T) {
	leaseNS := env.Namespace(t)
	p := startProxy(t)
	// 5 Events a second: 30 take 6 s to write, longer than the drain; no
	// per-namespace bound below them.
	a := env.StartReplica(t, replicaFlags(leaseNS, "--event-qps=5", "--event-burst=1", "--event-namespace-burst=100")...)
	cluster.AwaitHolder(t, env.Client, leaseNS, leaseName, timeout)
	b := env.StartReplica(t, replicaFlags(leaseNS)...)
	p.waitReady(t, p.add(a))
	p.waitReady(t, p.add(b))

	ns := env.Namespace(t)
	hc := env.WebhookClient(t, nil)
	const n = 30
	jobs := make([]string, n)
	for i := range jobs {
		jobs[i] = fmt.Sprintf("job-%02d", i)
		// A TrainJob naming a runtime that does not exist: denied by
		// V-TJ-3, one PolicyViolation Event.
		code, resp, err := postReview(hc, a.Webhook, namedTrainJobReview(t, ns, jobs[i], "no-such-runtime"))
		if err != nil || code != http.StatusOK || resp == nil || resp.Allowed {
			t.Fatalf("review %d: HTTP %d, %+v, %v; want a denial", i, code, resp, err)
		}
	}
	written, err := cluster.EventCounts(context.Background(), env.Client, ns, api.KindTrainJob, api.EventPolicyViolation)
	if err != nil {
		t.Fatal(err)
	}
	termAt := time.Now()
	if err := a.Terminate(); err != nil {
		t.Fatal(err)
	}
	if len(written) == n {
		t.Fatalf("all %d Events were written before the SIGTERM: nothing was queued, the test proves nothing", n)
	}
	code, err := a.Wait(stopBound)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Errorf("the replica exited %d after SIGTERM, want 0:\n%s", code, a.Log())
	}
	t.Logf("SIGTERM with %d of %d PolicyViolation Events still queued; exited after %v", n-len(written), n, time.Since(termAt).Round(10*time.Millisecond))
	cluster.CheckEvents(t, env.Client, ns, api.KindTrainJob, api.EventPolicyViolation, jobs, 10*time.Second)
	alive(t, "the standby", b)
}

// SIGKILL of the leader (a lost node: the Lease is not released): the
// standby takes the Lease within the lease duration and a little more, and
// enforces a deadline that passed meanwhile. Then, with no replica left
// and the Lease expired, a replica started afresh takes it at once — not
// after its own lease duration (60 s here), which is what client-go's
// elector alone waits from the moment it first sees a Lease. test/replicas
// covers enforcement exactly once, with its Events, through such a kill.
func TestLeaderSIGKILL(t *testing.T) {
	leaseNS := env.Namespace(t)
	p := startProxy(t)
	flags := replicaFlags(leaseNS)
	a := env.StartReplica(t, flags...)
	first, _ := cluster.AwaitHolder(t, env.Client, leaseNS, leaseName, timeout)
	b := env.StartReplica(t, flags...)
	p.waitReady(t, p.add(a))
	p.waitReady(t, p.add(b))

	ns := env.Namespace(t)
	rt := createRuntime(t, a, b)
	// Expires 2 s after creation, once the leader is dead.
	tj := createDeadlineJob(t, ns, "expires-after-kill", rt, 2)
	a.Kill()
	killedAt := time.Now()
	second, tookAt := cluster.AwaitHolder(t, env.Client, leaseNS, leaseName, timeout, first)
	takeover := tookAt.Sub(killedAt)
	enforcedAt := waitEnforced(t, ns, tj.GetName(), timeout)
	cluster.CheckEvents(t, env.Client, ns, api.KindTrainJob, api.EventDeadlineExceeded, []string{tj.GetName()}, 10*time.Second)
	t.Logf("SIGKILL of the leader → standby holds the Lease after %v (lease duration %v), deadline enforced %v after the kill",
		takeover.Round(10*time.Millisecond), leaseDuration, enforcedAt.Sub(killedAt).Round(10*time.Millisecond))
	// The bound is the behaviour: a lease duration after the last renewal,
	// plus the standby's retry period; 3 s of slack for a loaded machine.
	if bound := leaseDuration + 2*retryPeriod + 3*time.Second; takeover > bound {
		t.Errorf("the standby took the Lease %v after the kill, over %v (lease duration %v)", takeover, bound, leaseDuration)
	}

	// No replica left; wait for the survivor's Lease to expire.
	b.Kill()
	testkit.Eventually(t, timeout, fmt.Sprintf("the Lease held by %q to expire", second), func(ctx context.Context) (bool, error) {
		_, l, err := cluster.LeaseHolder(ctx, env.Client, leaseNS, leaseName)
		if err != nil || l == nil || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
			return false, err
		}
		return time.Now().After(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second + time.Second)), nil
	})
	const longLease = 60 * time.Second
	startedAt := time.Now()
	c := env.StartReplica(t, replicaFlags(leaseNS, "--leader-election-lease-duration="+longLease.String(), "--leader-election-renew-deadline=40s")...)
	readyAt := time.Now()
	third, tookAt := cluster.AwaitHolder(t, env.Client, leaseNS, leaseName, timeout, second)
	t.Logf("a replica started with the Lease expired holds it %v after its start (ready after %v; its own lease duration %v)",
		tookAt.Sub(startedAt).Round(10*time.Millisecond), readyAt.Sub(startedAt).Round(10*time.Millisecond), longLease)
	if took := tookAt.Sub(startedAt); took > longLease/2 {
		t.Errorf("the new replica took the expired Lease %v after its start: it waited as for a live holder", took)
	}
	p.waitReady(t, p.add(c))
	tj2 := createDeadlineJob(t, ns, "enforced-by-the-new-leader", rt, 1)
	waitEnforced(t, ns, tj2.GetName(), timeout)
	if got, _, err := cluster.LeaseHolder(context.Background(), env.Client, leaseNS, leaseName); err != nil || got != third {
		t.Errorf("Lease holder %q (err %v), want the new replica %q", got, err, third)
	}
}

// A client sends 1,000 AdmissionReviews of made-up kinds and operations:
// the replica's /metrics neither names them nor grows (the kinds and
// operations of its labels are a closed set). webhook/server's
// TestMetricLabelsAreAClosedSet asserts this of the handler; here it is
// the served /metrics of a running replica.
func TestMetricsIgnoreMadeUpKinds(t *testing.T) {
	r := env.StartReplica(t, replicaFlags(env.Namespace(t), "--disable-reconcilers")...)
	hc := env.WebhookClient(t, nil)
	// Even: a made-up kind, admitted (200); odd: a made-up operation,
	// refused as malformed (400). Neither may name itself in /metrics.
	send := func(i int) {
		t.Helper()
		op, want := "CREATE", http.StatusOK
		if i%2 == 1 {
			op, want = fmt.Sprintf("MADEUPOP%d", i), http.StatusBadRequest
		}
		body := fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u%d",`+
			`"kind":{"group":"made.up","version":"v1","kind":"MadeUpKind%d"},"resource":{"group":"made.up","version":"v1","resource":"madeups"},`+
			`"operation":%q,"namespace":"default","name":"x","object":{"metadata":{"name":"x"}}}}`, i, i, op)
		code, _, err := postReview(hc, r.Webhook, []byte(body))
		if code != want || (want == http.StatusOK && err != nil) { // a 400 is plain text
			t.Fatalf("made-up review %d (operation %s): HTTP %d, %v; want %d", i, op, code, err, want)
		}
	}
	// The code paths of a made-up request, once, so their series exist.
	for i := range 10 {
		send(i)
	}
	before := scrape(t, r)
	const kinds = 1000
	for i := 10; i < 10+kinds; i++ {
		send(i)
	}
	after := scrape(t, r)
	t.Logf("/metrics: %d bytes, %d shepherd series before %d made-up kinds; %d bytes, %d shepherd series after",
		len(before), shepherdSeries(before), kinds, len(after), shepherdSeries(after))
	if strings.Contains(after, "MadeUp") || strings.Contains(after, "MADEUPOP") {
		t.Errorf("/metrics names a made-up kind or operation")
	}
	if b, a := shepherdSeries(before), shepherdSeries(after); a != b {
		t.Errorf("shepherd's metrics have %d series after %d made-up kinds, %d before", a, kinds, b)
	}
	// Counts and sums change by a few digits; a label set per kind would
	// add hundreds of bytes each.
	if grown := len(after) - len(before); grown > 4096 {
		t.Errorf("/metrics grew by %d bytes over %d made-up kinds", grown, kinds)
	}
}

// The apiserver stops for a minute with a TrainJob's deadline passing
// meanwhile: no replica exits, each keeps answering admission requests
// sent to it, and once the apiserver is back the deadline is enforced
// within seconds (its Failed condition and its Event).
func TestAPIServerOutage(t *testing.T) {
	leaseNS := env.Namespace(t)
	p := startProxy(t)
	flags := replicaFlags(leaseNS)
	a := env.StartReplica(t, flags...)
	cluster.AwaitHolder(t, env.Client, leaseNS, leaseName, timeout)
	b := env.StartReplica(t, flags...)
	p.waitReady(t, p.add(a))
	p.waitReady(t, p.add(b))
	ns := env.Namespace(t)
	rt := createRuntime(t, a, b)

	const outage = 60 * time.Second
	// The deadline passes 15 s into the outage.
	tj := createDeadlineJob(t, ns, "expires-in-outage", rt, 15)
	review := trainJobReview(t, ns, rt)
	hc := env.WebhookClient(t, nil)
	if done, err := deadlineEnforced(context.Background(), ns, tj.GetName()); err != nil || done {
		t.Fatalf("before the outage: enforced %v (err %v), want not yet", done, err)
	}

	if err := env.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	up := false
	t.Cleanup(func() {
		if !up { // leave a control plane for the tests after this one
			_ = env.StartAPIServer()
		}
	})
	answered := 0
	for time.Since(stoppedAt) < outage {
		alive(t, "replica a", a)
		alive(t, "replica b", b)
		for _, r := range []*cluster.Replica{a, b} {
			code, resp, err := postReview(hc, r.Webhook, review)
			if err != nil || code != http.StatusOK || resp == nil {
				t.Errorf("%v into the outage, replica on %s did not answer an admission request: HTTP %d, %v",
					time.Since(stoppedAt).Round(time.Second), r.Webhook, code, err)
			} else {
				answered++
			}
		}
		time.Sleep(2 * time.Second)
	}
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	up = true
	readyAt := time.Now()
	// Leadership resumes: a replica renews (or takes) the Lease.
	// Asked every 100 ms: leaderAt times the renewal.
	if err := testkit.Poll(100*time.Millisecond, timeout, func(ctx context.Context) (bool, error) {
		id, l, err := cluster.LeaseHolder(ctx, env.Client, leaseNS, leaseName)
		return err == nil && id != "" && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(readyAt.Add(-time.Second)), err
	}); err != nil {
		t.Fatalf("no replica renewed the Lease after the outage: %v", err)
	}
	leaderAt := time.Now()
	enforcedAt := waitEnforced(t, ns, tj.GetName(), timeout)
	cluster.CheckEvents(t, env.Client, ns, api.KindTrainJob, api.EventDeadlineExceeded, []string{tj.GetName()}, 30*time.Second)
	alive(t, "replica a", a)
	alive(t, "replica b", b)
	took := enforcedAt.Sub(readyAt)
	t.Logf("apiserver down %v (deadline passed 15 s in); both replicas up throughout and answered %d admission requests sent to them; "+
		"after the apiserver was ready: Lease renewed %v later, deadline enforced %v later",
		readyAt.Sub(stoppedAt).Round(100*time.Millisecond), answered, leaderAt.Sub(readyAt).Round(10*time.Millisecond), took.Round(10*time.Millisecond))
	// The bound is the behaviour (the target is 5 s): a retry
	// period to take the Lease again, then a reconcile from the cache.
	// 10 s of slack for a loaded machine.
	if bound := 5*time.Second + 10*time.Second; took > bound {
		t.Errorf("the deadline was enforced %v after the apiserver was ready, over %v", took, bound)
	}
	// Both replicas are routed to again.
	for _, r := range []*cluster.Replica{a, b} {
		if err := testkit.Poll(testkit.Interval, timeout, func() (bool, error) {
			resp, err := http.Get(r.Health + "/readyz") //nolint:gosec // local test URL
			if err != nil {
				return false, err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false, fmt.Errorf("/readyz: HTTP %d", resp.StatusCode)
			}
			return true, nil
		}); err != nil {
			t.Errorf("replica on %s not ready after the outage: %v", r.Webhook, err)
		}
	}
}

// postReview POSTs an AdmissionReview to a replica's /validate.
func postReview(hc *http.Client, addr string, body []byte) (int, *admissionv1.AdmissionResponse, error) {
	resp, err := hc.Post("https://"+addr+"/validate", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, err
	}
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &rv); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("not an AdmissionReview: %w: %s", err, out)
	}
	return resp.StatusCode, rv.Response, nil
}

// trainJobReview is an AdmissionReview creating a TrainJob of runtime.
func trainJobReview(t *testing.T, ns, runtime string) []byte {
	t.Helper()
	return namedTrainJobReview(t, ns, "in-outage", runtime)
}

// namedTrainJobReview is an AdmissionReview creating TrainJob name of
// runtime.
func namedTrainJobReview(t *testing.T, ns, name, runtime string) []byte {
	t.Helper()
	obj, err := json.Marshal(testkit.TrainJob(ns, name, runtime, 1).Obj())
	if err != nil {
		t.Fatal(err)
	}
	return []byte(fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"outage",`+
		`"kind":{"group":%q,"version":"v1alpha1","kind":%q},"resource":{"group":%q,"version":"v1alpha1","resource":"trainjobs"},`+
		`"operation":"CREATE","namespace":%q,"name":%q,"userInfo":{"username":"faults"},"object":%s}}`,
		api.TrainerGroup, api.KindTrainJob, api.TrainerGroup, ns, name, obj))
}

// scrape is a replica's /metrics (served without authentication here:
// --metrics-secure=false).
func scrape(t *testing.T, r *cluster.Replica) string {
	t.Helper()
	resp, err := http.Get("http://" + r.Metrics + "/metrics") //nolint:gosec // local test URL
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: HTTP %d, %v", resp.StatusCode, err)
	}
	return string(b)
}

// shepherdSeries counts the series of shepherd's own metrics.
func shepherdSeries(metrics string) int {
	n := 0
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "shepherd_") {
			n++
		}
	}
	return n
}

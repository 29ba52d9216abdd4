package replicas

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shepherd-k8s/shepherd/api"
	"github.com/shepherd-k8s/shepherd/api/install"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// burstJobs is how many TrainJobs a failover test enforces; one expires
// every second, so the burst spans the kill and the takeover (a Lease of
// leaseDuration, see leaseFlags).
const burstJobs = 30

// leaseFlags are the replicas' leader-election timings: a 6 s Lease,
// shorter than the 15 s default, so a takeover fits the burst.
var leaseFlags = []string{"--leader-election-lease-duration=6s", "--leader-election-renew-deadline=4s", "--leader-election-retry-period=1s"}

// enforcedBeforeKill is how many enforcements the leader makes before it
// is killed.
const enforcedBeforeKill = 8

// longTimeout bounds the waits that span a takeover (up to a lease
// duration plus a retry period, then a cache sync) on a shared machine.
const longTimeout = 90 * time.Second

// pair is two `shepherd serve` replicas with leader election on, each
// running as a user of its own (the audit log tells their writes apart),
// admission answered by the standby through a proxy on the port the
// apiserver calls.
type pair struct {
	pl                      *plane
	leader, standby         *cluster.Replica
	leaderUser, standbyUser string
	leaderID                string // the leader's holderIdentity
	leaseNS                 string
}

// startPair starts the leader, waits for it to hold the Lease, then starts
// the standby and points the apiserver's webhook calls at the standby (the
// replica that survives).
func startPair(t *testing.T, pl *plane, extra ...string) *pair {
	t.Helper()
	p := &pair{pl: pl, leaseNS: pl.Namespace(t), leaderUser: "replica-a-" + t.Name(), standbyUser: "replica-b-" + t.Name()}
	flags := append(append(append([]string{"--leader-elect=true", "--leader-election-namespace=" + p.leaseNS, "--graceful-shutdown-timeout=10s"}, leaseFlags...), pl.replicaArgs...), extra...)

	p.leader = pl.StartReplica(t, append(flags, "--kubeconfig="+pl.kubeconfigAs(t, p.leaderUser, p.leaseNS))...)
	p.leaderID, _ = cluster.AwaitHolder(t, pl.Client, p.leaseNS, leaseName, timeout)
	p.standby = pl.StartReplica(t, append(flags, "--kubeconfig="+pl.kubeconfigAs(t, p.standbyUser, p.leaseNS))...)
	pl.proxyWebhooks(t, p.standby.Webhook)
	return p
}

// proxyWebhooks forwards the connections the apiserver makes to the
// webhook address shepherd's configurations name on pl to target (TLS
// passes through: every replica serves the plane's certificate), until the
// test ends.
func (pl *plane) proxyWebhooks(t *testing.T, target string) {
	t.Helper()
	ln, err := net.Listen("tcp", pl.webhook)
	if err != nil {
		t.Fatalf("listening for the apiserver's webhook calls: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = struct{}{}
		} else {
			delete(conns, c)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer in.Close()
				out, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer out.Close()
				track(in, true)
				track(out, true)
				defer track(in, false)
				defer track(out, false)
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// observer watches the TrainJobs of a namespace and counts, per job, the
// transitions of Failed to True (and their reasons) and the deletions, with
// the time each was first seen.
type observer struct {
	mu          sync.Mutex
	failedNow   map[string]bool
	failedTrans map[string]int
	failedAt    map[string]time.Time
	reasons     map[string]string
	deleted     map[string]int
	deletedAt   map[string]time.Time
	errs        []string
	closed      bool
}

func (pl *plane) observe(t *testing.T, ns string) *observer {
	t.Helper()
	wc, err := client.NewWithWatch(pl.Config, client.Options{Scheme: install.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &trainerv1alpha1.TrainJobList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatalf("watching TrainJobs: %v", err)
	}
	o := &observer{
		failedNow: map[string]bool{}, failedTrans: map[string]int{}, failedAt: map[string]time.Time{},
		reasons: map[string]string{}, deleted: map[string]int{}, deletedAt: map[string]time.Time{},
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			now := time.Now()
			o.mu.Lock()
			switch ev.Type {
			case watch.Error:
				o.errs = append(o.errs, fmt.Sprintf("%v", ev.Object))
			case watch.Added, watch.Modified, watch.Deleted:
				tj, ok := ev.Object.(*trainerv1alpha1.TrainJob)
				if !ok {
					break
				}
				c := meta.FindStatusCondition(tj.Status.Conditions, api.TrainJobFailed)
				failed := c != nil && c.Status == metav1.ConditionTrue
				if failed && !o.failedNow[tj.Name] {
					o.failedTrans[tj.Name]++
					o.reasons[tj.Name] = c.Reason
					if _, seen := o.failedAt[tj.Name]; !seen {
						o.failedAt[tj.Name] = now
					}
				}
				o.failedNow[tj.Name] = failed
				if ev.Type == watch.Deleted {
					o.deleted[tj.Name]++
					if _, seen := o.deletedAt[tj.Name]; !seen {
						o.deletedAt[tj.Name] = now
					}
				}
			}
			o.mu.Unlock()
		}
		o.mu.Lock()
		o.closed = true
		o.mu.Unlock()
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return o
}

// count returns how many jobs have been seen Failed (deleted when
// deletions is true).
func (o *observer) count(deletions bool) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if deletions {
		return len(o.deletedAt)
	}
	return len(o.failedAt)
}

// waitCount waits until count(deletions) reaches n.
func (o *observer) waitCount(t *testing.T, what string, deletions bool, n int, within time.Duration) {
	t.Helper()
	if err := testkit.Poll(100*time.Millisecond, within, func(context.Context) (bool, error) {
		o.mu.Lock()
		closed := o.closed
		o.mu.Unlock()
		if closed {
			return false, errors.New("the watch of TrainJobs closed")
		}
		return o.count(deletions) >= n, nil
	}); err != nil {
		t.Fatalf("%s: %d of %d seen within %v: %v", what, o.count(deletions), n, within, err)
	}
}

// firstAfter is the earliest time in at not before since.
func firstAfter(at map[string]time.Time, since time.Time) (time.Time, bool) {
	var first time.Time
	for _, ts := range at {
		if !ts.Before(since) && (first.IsZero() || ts.Before(first)) {
			first = ts
		}
	}
	return first, !first.IsZero()
}

// waitTakeover waits until a replica other than the killed leader holds
// the Lease and returns its identity.
func (p *pair) waitTakeover(t *testing.T) string {
	t.Helper()
	id, _ := cluster.AwaitHolder(t, p.pl.Client, p.leaseNS, leaseName, longTimeout, p.leaderID)
	return id
}

// kill SIGKILLs the leader once the observer has seen enforcedBeforeKill
// enforcements and returns the kill time; at least one must still be
// pending, or the failover happens after the burst.
func (p *pair) kill(t *testing.T, o *observer, deletions bool) time.Time {
	t.Helper()
	o.waitCount(t, "enforcements by the leader before the kill", deletions, enforcedBeforeKill, timeout)
	if got, _, err := cluster.LeaseHolder(context.Background(), p.pl.Client, p.leaseNS, leaseName); err != nil || got != p.leaderID {
		t.Fatalf("before the kill the Lease holder is %q (err %v), want the first replica %q", got, err, p.leaderID)
	}
	p.leader.Kill()
	at := time.Now()
	if n := o.count(deletions); n >= burstJobs {
		t.Fatalf("all %d enforcements were done before the kill: the machine is too slow for this burst", n)
	}
	return at
}

// eventsWithin bounds the wait for every enforcement's Event.
const eventsWithin = 20 * time.Second

// writesBy checks that each job has exactly one successful write of the
// audited kind and returns how many each user made; failed attempts (a
// conflict, a 404) are returned per job.
func writesBy(t *testing.T, what string, evs []auditEvent, jobs []string) (byUser map[string]int, failed map[string][]int) {
	t.Helper()
	return writesByAllowing(t, what, evs, jobs, nil)
}

// writesByAllowing is writesBy where up to unaudited(byUser) jobs may show
// no successful write: a SIGKILLed replica's write that the apiserver
// stored while its client was gone leaves no ResponseComplete event in the
// audit log, though the job shows its effect. No job may show two.
func writesByAllowing(t *testing.T, what string, evs []auditEvent, jobs []string, unaudited func(byUser map[string]int) int) (byUser map[string]int, failed map[string][]int) {
	t.Helper()
	ok := map[string][]string{}
	failed = map[string][]int{}
	byUser = map[string]int{}
	for _, e := range evs {
		if e.OK() {
			ok[e.ObjectRef.Name] = append(ok[e.ObjectRef.Name], e.User.Username)
			byUser[e.User.Username]++
		} else if e.ResponseStatus != nil {
			failed[e.ObjectRef.Name] = append(failed[e.ObjectRef.Name], e.ResponseStatus.Code)
		}
	}
	allowed := 0
	if unaudited != nil {
		allowed = unaudited(byUser)
	}
	var missing []string
	for _, j := range jobs {
		n := len(ok[j])
		if n == 0 && len(missing) < allowed {
			missing = append(missing, j)
			continue
		}
		if n != 1 {
			t.Errorf("%s of %s done %d times (by %v), want exactly once", what, j, n, ok[j])
		}
	}
	if len(missing) > 0 {
		t.Logf("%s of %v: in flight from the killed leader, stored without an audit record (at most %d could be)", what, missing, allowed)
	}
	return byUser, failed
}

func jobName(i int) string { return fmt.Sprintf("job-%02d", i) }

// report logs, per replica, how many enforcements it did and requires
// both to have done some: the leader before the kill, the survivor after.
func (p *pair) report(t *testing.T, what string, byUser map[string]int, takeover time.Duration) {
	t.Helper()
	t.Logf("%s: kill → survivor's first enforcement %v; leader %d, survivor %d, other %v",
		what, takeover.Round(10*time.Millisecond), byUser[p.leaderUser], byUser[p.standbyUser], others(byUser, p.leaderUser, p.standbyUser))
	if byUser[p.leaderUser] == 0 || byUser[p.standbyUser] == 0 {
		t.Errorf("%s: leader %d, survivor %d: the kill did not fall in the middle of the burst", what, byUser[p.leaderUser], byUser[p.standbyUser])
	}
	if o := others(byUser, p.leaderUser, p.standbyUser); len(o) > 0 {
		t.Errorf("%s done by users other than the replicas: %v", what, o)
	}
}

func others(byUser map[string]int, a, b string) map[string]int {
	o := map[string]int{}
	for u, n := range byUser {
		if u != a && u != b {
			o[u] = n
		}
	}
	return o
}

// checkHolder: the survivor still holds the Lease at the end.
func (p *pair) checkHolder(t *testing.T, survivor string) {
	t.Helper()
	if got, _, err := cluster.LeaseHolder(context.Background(), p.pl.Client, p.leaseNS, leaseName); err != nil || got != survivor {
		t.Errorf("at the end the Lease holder is %q (err %v), want the survivor %q", got, err, survivor)
	}
}

// repeats describes each refused write: by which replica, how long after
// the successful one.
func repeats(evs []auditEvent, p *pair) string {
	okAt := map[string]time.Time{}
	for _, e := range evs {
		if e.OK() {
			okAt[e.ObjectRef.Name] = e.StageTimestamp
		}
	}
	who := map[string]string{p.leaderUser: "leader", p.standbyUser: "survivor"}
	var b []byte
	for _, e := range evs {
		if !e.OK() && e.ResponseStatus != nil {
			b = fmt.Appendf(b, "  %s: HTTP %d by the %s, %v after the successful one\n",
				e.ObjectRef.Name, e.ResponseStatus.Code, who[e.User.Username], e.StageTimestamp.Sub(okAt[e.ObjectRef.Name]))
		}
	}
	return string(b)
}

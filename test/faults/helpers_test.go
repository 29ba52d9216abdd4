package faults

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/shepherd-k8s/shepherd/api"
	trainerv1alpha1 "github.com/shepherd-k8s/shepherd/api/trainer/v1alpha1"
	"github.com/shepherd-k8s/shepherd/test/cluster"
	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// replicaFlags are the flags of every replica of a test whose Lease lives
// in namespace leaseNS.
func replicaFlags(leaseNS string, extra ...string) []string {
	return append([]string{
		"--leader-elect=true",
		"--leader-election-namespace=" + leaseNS,
		"--leader-election-lease-duration=" + leaseDuration.String(),
		"--leader-election-renew-deadline=" + renewDeadline.String(),
		"--leader-election-retry-period=" + retryPeriod.String(),
		"--shutdown-drain-period=" + drainPeriod.String(),
		"--graceful-shutdown-timeout=15s",
		// The seed-shaped CRDs may leave the deadline to Trainer in auto
		// mode; shepherd enforces it here.
		"--feature=trainjob-deadline=on",
		"--metrics-secure=false",
	}, extra...)
}

// createRuntime creates a ClusterTrainingRuntime the test's TrainJobs
// refer to, deleted when the test ends, and waits until each of replicas
// admits a TrainJob of it: admission looks the runtime up in its cache,
// which learns of it a moment later.
func createRuntime(t *testing.T, replicas ...*cluster.Replica) string {
	t.Helper()
	rt := testkit.ClusterTrainingRuntime("", "").GenerateName("faults-").Set(int64(1), "spec", "mlPolicy", "numNodes").
		RuntimeJobs(jobsetv1alpha2.ReplicatedJob{Name: "node", Template: testkit.JobTemplate()}).Obj()
	if err := env.Client.Create(context.Background(), rt); err != nil {
		t.Fatalf("creating a ClusterTrainingRuntime: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), rt) })
	hc := env.WebhookClient(t, nil)
	review := trainJobReview(t, "default", rt.GetName())
	for _, r := range replicas {
		testkit.Eventually(t, timeout, fmt.Sprintf("the replica on %s to admit a TrainJob of runtime %s", r.Webhook, rt.GetName()), func() (bool, string) {
			code, resp, err := postReview(hc, r.Webhook, review)
			switch {
			case err != nil:
				return false, err.Error()
			case code != 200 || resp == nil:
				return false, fmt.Sprintf("HTTP %d", code)
			case resp.Result != nil:
				return resp.Allowed, resp.Result.Message
			}
			return resp.Allowed, ""
		})
	}
	return rt.GetName()
}

// createDeadlineJob creates TrainJob name with a deadline of seconds. No
// Trainer runs beside this suite, and nothing plays it: the job has no
// JobSet (a cluster whose Trainer is down), and shepherd, enforcing the
// deadline (--feature=trainjob-deadline=on), fails it all the same. The
// deadline beside the real Trainer is test/trainjob's and test/replicas'.
func createDeadlineJob(t *testing.T, ns, name, runtime string, seconds int64) *unstructured.Unstructured {
	t.Helper()
	tj := testkit.TrainJob(ns, name, runtime, 1).Set(seconds, "spec", "activeDeadlineSeconds").Obj()
	if err := env.Client.Create(context.Background(), tj); err != nil {
		t.Fatalf("creating TrainJob %s: %v", name, err)
	}
	return tj
}

// deadlineEnforced reports whether TrainJob name is Failed with reason
// DeadlineExceeded.
func deadlineEnforced(ctx context.Context, ns, name string) (bool, error) {
	var tj trainerv1alpha1.TrainJob
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &tj); err != nil {
		return false, err
	}
	c := meta.FindStatusCondition(tj.Status.Conditions, api.TrainJobFailed)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == api.ReasonDeadlineExceeded, nil
}

// waitEnforced polls until TrainJob name is Failed by its deadline and
// returns when that was first seen, to 100 ms.
func waitEnforced(t *testing.T, ns, name string, within time.Duration) time.Time {
	t.Helper()
	if err := testkit.Poll(100*time.Millisecond, within, func(ctx context.Context) (bool, error) {
		return deadlineEnforced(ctx, ns, name)
	}); err != nil {
		t.Fatalf("TrainJob %s/%s not Failed by its deadline: %v", ns, name, err)
	}
	return time.Now()
}

// load creates TrainJobs with dryRun=All at a steady rate, through the
// apiserver and so through shepherd's two webhooks and the proxy, and
// counts what fails.
type load struct {
	total, failed atomic.Int64
	mu            sync.Mutex
	errs          map[string]int
	stop          chan struct{}
	wg            sync.WaitGroup
}

func startLoad(t *testing.T, ns, runtime string, perSecond int) *load {
	t.Helper()
	l := &load{errs: map[string]int{}, stop: make(chan struct{})}
	ticks := make(chan struct{}, perSecond)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer close(ticks)
		tk := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tk.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-tk.C:
				// Every worker busy: the create waits, it is not dropped.
				select {
				case ticks <- struct{}{}:
				case <-l.stop:
					return
				}
			}
		}
	}()
	// Enough workers that a slow admission (a webhook call retried within
	// its 5 s timeout) does not lower the rate.
	for w := 0; w < 32; w++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for range ticks {
				tj := testkit.TrainJob(ns, "", runtime, 1).Set(int64(3600), "spec", "activeDeadlineSeconds").GenerateName("load-").Obj()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := env.Client.Create(ctx, tj, client.DryRunAll)
				cancel()
				l.total.Add(1)
				if err != nil {
					l.failed.Add(1)
					l.mu.Lock()
					l.errs[err.Error()]++
					l.mu.Unlock()
				}
			}
		}()
	}
	t.Cleanup(l.end)
	return l
}

// end stops the load and waits for the creates in flight.
func (l *load) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// errors describes the failures, most frequent first.
func (l *load) errors() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	type kv struct {
		msg string
		n   int
	}
	var all []kv
	for m, n := range l.errs {
		all = append(all, kv{m, n})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n })
	var b strings.Builder
	for i, e := range all {
		if i == 5 {
			break
		}
		fmt.Fprintf(&b, "\n  %d× %s", e.n, e.msg)
	}
	return b.String()
}

// alive fails the test if replica r has exited.
func alive(t *testing.T, what string, r *cluster.Replica) {
	t.Helper()
	if exited, how := r.Exited(); exited {
		t.Fatalf("%s exited (%s):\n%s", what, how, r.Log())
	}
}

package events

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// fakeManager records what is added to it; everything else is unused.
type fakeManager struct {
	ctrl.Manager
	added []manager.Runnable
}

func (m *fakeManager) GetConfig() *rest.Config { return &rest.Config{Host: "https://127.0.0.1:1"} }
func (m *fakeManager) GetScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = corev1.AddToScheme(s)
	return s
}
func (m *fakeManager) Add(r manager.Runnable) error { m.added = append(m.added, r); return nil }

// The broadcaster runs on every replica, leader or not: a standby answers
// admission, and its webhook's PolicyViolation Events must go out. A
// runnable needing leader election would start only on the leader, and the
// standby's Events would be queued and dropped (issue 19, defect 6).
func TestBroadcasterRunsOnEveryReplica(t *testing.T) {
	fm := &fakeManager{}
	mgr, err := Manager(fm, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(fm.added) != 1 {
		t.Fatalf("Manager added %d runnables, want the broadcaster only", len(fm.added))
	}
	le, ok := fm.added[0].(manager.LeaderElectionRunnable)
	if !ok {
		t.Fatalf("the broadcaster runnable %T does not say whether it needs leader election; the manager's default is yes", fm.added[0])
	}
	if le.NeedLeaderElection() {
		t.Errorf("the broadcaster needs leader election: a standby replica's Events would be dropped")
	}
	// client-go's recorder satisfies controller-runtime's interface.
	if mgr.GetEventRecorder("test") == nil {
		t.Errorf("no recorder")
	}
}

package events

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

func lifecycleFixture(t *testing.T) (*Lifecycle, *fake.Clientset) {
	t.Helper()
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	return NewLifecycle(cs.EventsV1(), s, "trainjob-lifecycle", "replica-a", clocktesting.NewFakePassiveClock(time.Unix(1e9, 0))), cs
}

// A transition recorded twice — the leader that acted and then was
// killed, and its successor redoing the action — is one Event; another
// transition of the same object, or the same one of another incarnation
// (another UID), is another Event.
func TestLifecycleEventsAreWrittenOncePerTransition(t *testing.T) {
	l, cs := lifecycleFixture(t)
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "job-1", Namespace: "team-a", UID: "uid-1"}}
	again := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "job-1", Namespace: "team-a", UID: "uid-2"}}
	for _, rec := range []struct {
		obj      *corev1.Pod
		reason   string
		key      string
		instance string
	}{
		{pod, "DeadlineExceeded", "", "replica-a"},
		{pod, "DeadlineExceeded", "", "replica-b"}, // the successor: AlreadyExists, no error
		{pod, "TTLExpired", "", "replica-b"},
		{pod, "GangTerminated", "replica-0", "replica-b"},
		{pod, "GangTerminated", "replica-1", "replica-b"},
		{pod, "GangTerminated", "replica-1", "replica-a"},
		{again, "DeadlineExceeded", "", "replica-a"},
	} {
		l.instance = rec.instance
		if err := l.Record(ctx, rec.obj, corev1.EventTypeWarning, rec.reason, "Act", rec.key, "note"); err != nil {
			t.Fatalf("%s %s/%s: %v", rec.obj.UID, rec.reason, rec.key, err)
		}
	}
	list, err := cs.EventsV1().Events("team-a").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range list.Items {
		if !strings.HasPrefix(e.Name, "job-1.") {
			t.Errorf("Event name %q does not start with the object's name", e.Name)
		}
		if e.Regarding.Kind != "Pod" || e.Regarding.UID == "" || e.ReportingController != "trainjob-lifecycle" || e.EventTime.IsZero() {
			t.Errorf("Event %s lacks what the Events API requires: %+v", e.Name, e)
		}
		got = append(got, string(e.Regarding.UID)+" "+e.Reason+" "+e.ReportingInstance)
	}
	want := []string{
		"uid-1 DeadlineExceeded replica-a",
		"uid-1 TTLExpired replica-b",
		"uid-1 GangTerminated replica-b",
		"uid-1 GangTerminated replica-b",
		"uid-2 DeadlineExceeded replica-a",
	}
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("Events (-want +got):\n%s", diff)
	}
}

// Names stay within a DNS subdomain's 253 characters however long the
// object's name, and differ per transition.
func TestEventNamesAreBoundedAndDistinct(t *testing.T) {
	long := strings.Repeat("a", 253)
	n1, n2 := EventName(long, "u", "DeadlineExceeded"), EventName(long, "u", "TTLExpired")
	if len(n1) > 253 || len(n2) > 253 {
		t.Errorf("names of %d and %d characters, want at most 253", len(n1), len(n2))
	}
	if n1 == n2 {
		t.Errorf("two transitions share the Event name %s", n1)
	}
	if EventName("x", "u", "R") != EventName("x", "u", "R") {
		t.Error("the same transition has two names")
	}
}

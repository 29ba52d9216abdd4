package events

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// An Event says what the Events API needs and what the reader needs: the
// transition's reason, action and type, the note, the time of the clock,
// the controller and replica, and the object it is about.
func TestLifecycleEventFields(t *testing.T) {
	l, cs := lifecycleFixture(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "job-1", Namespace: "team-a", UID: "uid-1"}}
	if err := l.Record(context.Background(), pod, corev1.EventTypeWarning, "DeadlineExceeded", "Delete", "", "ran 2h, limit 1h"); err != nil {
		t.Fatal(err)
	}
	list, err := cs.EventsV1().Events("team-a").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("%d Events, %v; want 1", len(list.Items), err)
	}
	got := list.Items[0]
	got.TypeMeta, got.ManagedFields = metav1.TypeMeta{}, nil // the fake clientset's own
	want := eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: EventName("job-1", "uid-1", "DeadlineExceeded", ""), Namespace: "team-a"},
		EventTime:           metav1.NewMicroTime(time.Unix(1e9, 0)),
		ReportingController: "trainjob-lifecycle",
		ReportingInstance:   "replica-a",
		Action:              "Delete",
		Reason:              "DeadlineExceeded",
		Regarding:           corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: "team-a", Name: "job-1", UID: "uid-1"},
		Note:                "ran 2h, limit 1h",
		Type:                corev1.EventTypeWarning,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Event (-want +got):\n%s", diff)
	}
}

// An Event about a cluster-scoped object goes to the default namespace, as
// client-go's recorder puts it.
func TestLifecycleEventOfAClusterScopedObject(t *testing.T) {
	l, cs := lifecycleFixture(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "uid-n"}}
	if err := l.Record(context.Background(), node, corev1.EventTypeNormal, "Cordoned", "Cordon", "", "n"); err != nil {
		t.Fatal(err)
	}
	list, err := cs.EventsV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Regarding.Name != "node-1" {
		t.Errorf("Events in default: %+v, %v; want the node's", list.Items, err)
	}
}

// A note over the Events API's 1 KiB is cut to it, ending in "..."; one
// within it is kept whole.
func TestLifecycleNoteIsTruncated(t *testing.T) {
	for _, tc := range []struct {
		note string
		want string
	}{
		{strings.Repeat("x", 1024), strings.Repeat("x", 1024)},
		{strings.Repeat("x", 1025), strings.Repeat("x", 1021) + "..."},
		{strings.Repeat("y", 5000), strings.Repeat("y", 1021) + "..."},
	} {
		if got := Truncate(tc.note, MaxNoteBytes); got != tc.want {
			t.Errorf("note of %d bytes: got %d bytes ending %q, want %d", len(tc.note), len(got), got[len(got)-5:], len(tc.want))
		}
	}
}

// A write that fails other than with AlreadyExists is an error naming the
// transition and the object (the action waits for a retry); an object
// whose kind the scheme does not know cannot be referenced.
func TestLifecycleRecordErrors(t *testing.T) {
	l, cs := lifecycleFixture(t)
	boom := errors.New("apiserver unavailable")
	cs.PrependReactor("create", "events", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, boom })
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "job-1", Namespace: "team-a", UID: "uid-1"}}
	err := l.Record(context.Background(), pod, corev1.EventTypeWarning, "TTLExpired", "Delete", "", "n")
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "recording the TTLExpired Event of Pod job-1") {
		t.Errorf("a failed write: %v", err)
	}

	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "team-a"}}
	err = l.Record(context.Background(), role, corev1.EventTypeNormal, "Seen", "Look", "", "n")
	if err == nil || !strings.Contains(err.Error(), "referencing *v1.Role r for its Seen Event") {
		t.Errorf("a kind the scheme lacks: %v", err)
	}
}

// A name cut to fit ends at a character a DNS subdomain may end a label
// with: the cut drops trailing dots and dashes before the digest.
func TestEventNameCutDoesNotEndInASeparator(t *testing.T) {
	// The digest suffix is "." and 16 hex digits: 236 characters of the
	// object's name are kept.
	name := strings.Repeat("a", 234) + "-.b-c"
	got := EventName(name, "u", "R")
	prefix, _, _ := strings.Cut(got, ".")
	if prefix != strings.Repeat("a", 234) {
		t.Errorf("kept %q of the name, want the 234 a's without the separators after them", prefix)
	}
	if len(got) > 253 {
		t.Errorf("%d characters", len(got))
	}
}

// LifecycleRecorder gives the rate-limited manager's own recorder, and
// for any other manager one on a client of its configuration, each
// reporting as the named controller.
func TestLifecycleRecorder(t *testing.T) {
	fm := &fakeManager{}
	mgr, err := Manager(fm, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := LifecycleRecorder(mgr, "ttl")
	if err != nil {
		t.Fatal(err)
	}
	if l.controller != "ttl" || l.client != mgr.(*limited).client {
		t.Errorf("from the limited manager: controller %q, its own client %v", l.controller, l.client == mgr.(*limited).client)
	}
	plain, err := LifecycleRecorder(fm, "deadline")
	if err != nil {
		t.Fatal(err)
	}
	if plain.controller != "deadline" || plain.client == nil || plain.client == mgr.(*limited).client || plain.clock == nil {
		t.Errorf("from a plain manager: %+v", plain)
	}
}

// TestTruncateCutsBetweenCharacters: a message over the limit is cut to at
// most the limit, "..." marking the cut, never inside a character.
func TestTruncateCutsBetweenCharacters(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{in: "short", n: 10, want: "short"},
		{in: "exactly10!", n: 10, want: "exactly10!"},
		{in: "abcdefghijk", n: 10, want: "abcdefg..."},
		// "é" is bytes 6 and 7: a cut at byte 7 would split it.
		{in: "abcdefé-tail", n: 10, want: "abcdef..."},
		// "€" is three bytes.
		{in: "€€€€", n: 8, want: "€..."},
	} {
		got := Truncate(tc.in, tc.n)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("Truncate(%q, %d) (-want +got):\n%s", tc.in, tc.n, diff)
		}
		if !utf8.ValidString(got) || len(got) > tc.n {
			t.Errorf("Truncate(%q, %d) = %q: %d bytes, valid UTF-8 %v", tc.in, tc.n, got, len(got), utf8.ValidString(got))
		}
	}
}

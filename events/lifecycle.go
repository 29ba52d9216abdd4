package events

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/reference"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Lifecycle writes the Events of lifecycle transitions — a deadline
// enforced, a TTL deletion, a gang terminated — so that a transition has
// its Event exactly once whatever replica acts and whenever a replica is
// killed. The broadcaster behind GetEventRecorder queues Events and writes
// them later; a leader SIGKILLed between its status write and the queue's
// flush lost those Events, and the next leader, finding the transition
// done, had nothing to record (issue 32: 8 of 60 DeadlineExceeded Events
// lost). A lifecycle Event is instead written synchronously, before the
// action it announces, under a name fixed by the object's UID and the
// transition: whichever leader acts — the first, or the one redoing an
// action the first was killed in the middle of — writes the same Event,
// and a second write is AlreadyExists, so there is never a duplicate.
type Lifecycle struct {
	client     eventsv1client.EventsGetter
	scheme     *runtime.Scheme
	controller string
	instance   string
	clock      clock.PassiveClock
}

// lifecycleRecorders is what a manager returned by Manager offers.
type lifecycleRecorders interface {
	GetLifecycleRecorder(name string) *Lifecycle
}

// LifecycleRecorder returns mgr's lifecycle recorder for the named
// controller: on the Events' rate-limited client when mgr came from
// Manager, on a client of mgr's configuration otherwise.
func LifecycleRecorder(mgr ctrl.Manager, name string) (*Lifecycle, error) {
	if m, ok := mgr.(lifecycleRecorders); ok {
		return m.GetLifecycleRecorder(name), nil
	}
	cl, err := eventsv1client.NewForConfig(rest.CopyConfig(mgr.GetConfig()))
	if err != nil {
		return nil, fmt.Errorf("building the Events client: %w", err)
	}
	host, _ := os.Hostname()
	return NewLifecycle(cl, mgr.GetScheme(), name, host, nil), nil
}

// NewLifecycle returns a recorder writing through cl as controller name
// (the reportingController, as for the broadcaster's recorders) on
// instance; clk stamps the Events (the real clock if nil).
func NewLifecycle(cl eventsv1client.EventsGetter, scheme *runtime.Scheme, name, instance string, clk clock.PassiveClock) *Lifecycle {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Lifecycle{client: cl, scheme: scheme, controller: name, instance: instance, clock: clk}
}

// EventName is the name of the Event of transition (its reason and what
// distinguishes it, such as a replica index) on the object with uid:
// the object's name, then a digest of UID and transition. Names are kept
// within the 253 characters of a DNS subdomain.
func EventName(objName string, uid string, transition ...string) string {
	sum := sha256.Sum256([]byte(uid + "/" + strings.Join(transition, "/")))
	suffix := "." + hex.EncodeToString(sum[:8])
	if max := 253 - len(suffix); len(objName) > max {
		objName = strings.TrimRight(objName[:max], ".-")
	}
	return objName + suffix
}

// Record writes the Event of a transition of regarding, identified by
// reason and key (empty for a transition an object makes at most once),
// and returns only when it is stored: nil also when it already was.
// Call it before the action it announces; an error means the action
// should wait for a retry.
func (l *Lifecycle) Record(ctx context.Context, regarding client.Object, eventtype, reason, action, key, note string) error {
	ref, err := reference.GetReference(l.scheme, regarding)
	if err != nil {
		return fmt.Errorf("referencing %T %s for its %s Event: %w", regarding, regarding.GetName(), reason, err)
	}
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      EventName(regarding.GetName(), string(regarding.GetUID()), reason, key),
			Namespace: eventNamespace(regarding),
		},
		EventTime:           metav1.NewMicroTime(l.clock.Now()),
		ReportingController: l.controller,
		ReportingInstance:   l.instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *ref,
		Note:                Truncate(note, MaxNoteBytes),
		Type:                eventtype,
	}
	_, err = l.client.Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("recording the %s Event of %s %s: %w", reason, ref.Kind, regarding.GetName(), err)
	}
	return nil
}

// eventNamespace is where an Event about obj lives: its namespace, or
// "default" for a cluster-scoped object, as client-go's recorder does.
func eventNamespace(obj client.Object) string {
	if ns := obj.GetNamespace(); ns != "" {
		return ns
	}
	return metav1.NamespaceDefault
}

// MaxNoteBytes is the Events API's limit on a note (1 KiB).
const MaxNoteBytes = 1024

// Truncate cuts s to at most n bytes, "..." marking the cut, for an Event's
// note or a condition's message. The cut falls between characters: half a
// character is invalid UTF-8, which JSON encoding turns into U+FFFD (three
// bytes) per byte, so a note cut to the limit could exceed it again and the
// Event be refused; and a policy author's message need not be ASCII.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

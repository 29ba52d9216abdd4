package audit

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

type fakeEvent struct {
	ref                       corev1.ObjectReference
	typ, reason, action, note string
}

// fakeEvents records Eventf calls (a unit-test stand-in for the apiserver's
// event sink).
type fakeEvents struct{ got []fakeEvent }

func (f *fakeEvents) Eventf(regarding runtime.Object, _ runtime.Object, typ, reason, action, note string, args ...any) {
	f.got = append(f.got, fakeEvent{ref: *regarding.(*corev1.ObjectReference), typ: typ, reason: reason, action: action, note: fmt.Sprintf(note, args...)})
}

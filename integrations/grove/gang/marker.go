package gang

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/shepherd-k8s/shepherd/api"
)

// RestartMarker is the value of api.AnnotationRestart on a PodClique whose
// Training replica shepherd is restarting (written by package training, read
// here). It names the restart and the pods it replaces, so the restart can be
// finished after a crash and so those pods never count as ready again.
type RestartMarker struct {
	// Restart is the restartCount this restart brings the PodCliqueSet to.
	Restart int32 `json:"restart"`
	// Pods are the UIDs of the pods the restart deletes.
	Pods []types.UID `json:"pods,omitempty"`
	// Failed is set on the PodCliques whose breach caused the restart, so
	// the PodCliqueFailed event is emitted with the count, once per restart.
	Failed bool `json:"failed,omitempty"`
	// Done is set once the restart is over for this PodClique. The marker
	// stays, so that a replica whose other PodCliques are still restarting
	// can tell "finished restart N" from "not yet marked for restart N".
	Done bool `json:"done,omitempty"`
}

// Marker returns the restart marker of a PodClique, or nil when there is none.
// A marker that does not parse is an error naming the annotation.
func Marker(annotations map[string]string) (*RestartMarker, error) {
	v, ok := annotations[api.AnnotationRestart]
	if !ok {
		return nil, nil
	}
	var m RestartMarker
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return nil, fmt.Errorf("annotation %s=%q is not a restart marker ({\"restart\":N,\"pods\":[uid...]}); remove it to clear the restart: %w", api.AnnotationRestart, v, err)
	}
	return &m, nil
}

// String is the annotation value of m.
func (m RestartMarker) String() string {
	b, _ := json.Marshal(m)
	return string(b)
}

// Condemned reports whether m names the pod with this UID.
func (m *RestartMarker) Condemned(uid types.UID) bool {
	if m == nil {
		return false
	}
	for _, u := range m.Pods {
		if u == uid {
			return true
		}
	}
	return false
}

package audit

import (
	"sync"

	"github.com/shepherd-k8s/shepherd/integrations"
)

// OtherLabel is the metric label value of a kind or operation outside the
// known set.
const OtherLabel = "other"

// knownKinds are the kinds shepherd admits: every registered framework's
// (read at first use, after the frameworks' init has registered them).
var knownKinds = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{}
	for _, f := range integrations.Frameworks {
		for _, k := range f.Kinds {
			m[k] = true
		}
	}
	return m
})

// KindLabel is the metric label value of a request's kind: the kind if
// shepherd admits it, OtherLabel otherwise. The kind comes from the request
// body, which any client that reaches the webhook port writes; a label
// taken from it verbatim would let it grow /metrics, and the heap, without
// bound.
func KindLabel(kind string) string {
	if knownKinds()[kind] {
		return kind
	}
	return OtherLabel
}

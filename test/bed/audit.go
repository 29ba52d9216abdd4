package bed

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// Write is one write the apiserver's audit log recorded (stage
// ResponseComplete), the parts of an audit.k8s.io/v1 Event tests read.
type Write struct {
	Verb string `json:"verb"`
	User struct {
		Username string `json:"username"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	StageTimestamp time.Time `json:"stageTimestamp"`
	Stage          string    `json:"stage"`
	// Annotations name, among others, each mutating webhook called
	// (mutation.webhook.admission.k8s.io/round_R_index_I).
	Annotations map[string]string `json:"annotations"`
}

// Mutated reports whether the mutating webhook named webhook was called on
// the request (and whether it changed the object).
func (w Write) Mutated(webhook string) (called, changed bool) {
	for k, v := range w.Annotations {
		if !strings.HasPrefix(k, "mutation.webhook.admission.k8s.io/") {
			continue
		}
		var a struct {
			Webhook string `json:"webhook"`
			Mutated bool   `json:"mutated"`
		}
		if json.Unmarshal([]byte(v), &a) == nil && a.Webhook == webhook {
			return true, a.Mutated
		}
	}
	return false, false
}

// OK reports whether the apiserver carried the write out (2xx).
func (w Write) OK() bool {
	return w.ResponseStatus != nil && w.ResponseStatus.Code >= 200 && w.ResponseStatus.Code < 300
}

func (w Write) String() string {
	code := 0
	if w.ResponseStatus != nil {
		code = w.ResponseStatus.Code
	}
	return fmt.Sprintf("%s %s %s/%s/%s/%s by %s: %d", w.StageTimestamp.Format(time.RFC3339Nano), w.Verb,
		w.ObjectRef.Resource, w.ObjectRef.Subresource, w.ObjectRef.Namespace, w.ObjectRef.Name, w.User.Username, code)
}

// Writes returns the completed writes to the named object of resource in
// namespace ns — any subresource — oldest first. An empty name matches
// every object of resource in ns.
func (b *Bed) Writes(resource, ns, name string) ([]Write, error) {
	f, err := os.Open(b.AuditLog)
	if err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	defer f.Close()
	var out []Write
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var w Write
		if err := json.Unmarshal(sc.Bytes(), &w); err != nil {
			// The apiserver may be writing this very line.
			continue
		}
		if w.Stage != "ResponseComplete" || w.ObjectRef == nil || w.ObjectRef.Resource != resource ||
			w.ObjectRef.Namespace != ns || (name != "" && w.ObjectRef.Name != name) {
			continue
		}
		out = append(out, w)
	}
	return out, sc.Err()
}

// By returns the writes of one user.
func By(ws []Write, user string) []Write {
	var out []Write
	for _, w := range ws {
		if w.User.Username == user {
			out = append(out, w)
		}
	}
	return out
}

package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/webhook/audit"
	"github.com/shepherd-k8s/shepherd/webhook/server"
)

// AuditEvent is the part of an audit.k8s.io/v1 Event the suites read from
// the apiserver's audit log (Options.AuditPolicy, Cluster.AuditLog): who
// made which request, to what, and how it ended.
type AuditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
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
	// Annotations name, among others, each mutating webhook called
	// (mutation.webhook.admission.k8s.io/round_R_index_I).
	Annotations map[string]string `json:"annotations"`
	// RequestObject is the request's body where the policy logs it at
	// level Request (the bed: deletes, whose body is DeleteOptions, and
	// TrainJob status writes, whose body is the patch or the object).
	RequestObject json.RawMessage `json:"requestObject,omitempty"`
}

// PreconditionUID is the UID precondition of a delete whose DeleteOptions
// the audit log holds ("" without one).
func (e AuditEvent) PreconditionUID() string {
	var o struct {
		Preconditions *struct {
			UID *string `json:"uid"`
		} `json:"preconditions"`
	}
	if json.Unmarshal(e.RequestObject, &o) != nil || o.Preconditions == nil || o.Preconditions.UID == nil {
		return ""
	}
	return *o.Preconditions.UID
}

// StatusConditions are the conditions a status write's body sets, where
// the audit log holds the body; ok is false when the body sets none (a
// merge patch that leaves the list alone, or no body logged). A merge
// patch that sets the list replaces it whole (RFC 7386).
func (e AuditEvent) StatusConditions() (conditions []metav1.Condition, ok bool) {
	var o struct {
		Status struct {
			Conditions *[]metav1.Condition `json:"conditions"`
		} `json:"status"`
	}
	if json.Unmarshal(e.RequestObject, &o) != nil || o.Status.Conditions == nil {
		return nil, false
	}
	return *o.Status.Conditions, true
}

// OK reports whether the apiserver carried the request out (2xx).
func (e AuditEvent) OK() bool {
	return e.ResponseStatus != nil && e.ResponseStatus.Code >= 200 && e.ResponseStatus.Code < 300
}

// Mutated reports whether the mutating webhook named webhook was called on
// the request (and whether it changed the object).
func (e AuditEvent) Mutated(webhook string) (called, changed bool) {
	for k, v := range e.Annotations {
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

// MutationOrder is the mutating webhooks called on the request, in the
// order the apiserver called them (the audit annotations
// mutation.webhook.admission.k8s.io/round_R_index_I, first round first).
func (e AuditEvent) MutationOrder() []string {
	type call struct {
		round, index int
		webhook      string
	}
	var calls []call
	for k, v := range e.Annotations {
		rest, ok := strings.CutPrefix(k, "mutation.webhook.admission.k8s.io/")
		if !ok {
			continue
		}
		var c call
		if _, err := fmt.Sscanf(rest, "round_%d_index_%d", &c.round, &c.index); err != nil {
			continue
		}
		var a struct {
			Webhook string `json:"webhook"`
		}
		if json.Unmarshal([]byte(v), &a) == nil {
			c.webhook = a.Webhook
			calls = append(calls, c)
		}
	}
	sort.Slice(calls, func(i, j int) bool {
		if calls[i].round != calls[j].round {
			return calls[i].round < calls[j].round
		}
		return calls[i].index < calls[j].index
	})
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.webhook
	}
	return out
}

func (e AuditEvent) String() string {
	code := 0
	if e.ResponseStatus != nil {
		code = e.ResponseStatus.Code
	}
	var res, sub, ns, name string
	if r := e.ObjectRef; r != nil {
		res, sub, ns, name = r.Resource, r.Subresource, r.Namespace, r.Name
	}
	return fmt.Sprintf("%s %s %s/%s/%s/%s by %s: %d", e.StageTimestamp.Format(time.RFC3339Nano), e.Verb,
		res, sub, ns, name, e.User.Username, code)
}

// CompletedRequests reads the audit log at path and returns, oldest
// first, the requests that completed (stage ResponseComplete) on an
// object and that keep says to. A last line that does not parse is one
// the apiserver is writing, and is left out; any other is an error.
func CompletedRequests(path string, keep func(AuditEvent) bool) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	defer f.Close()
	var out []AuditEvent
	var bad error
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if bad != nil {
			return nil, bad // the line that did not parse was not the last
		}
		var e AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			bad = fmt.Errorf("audit log line %q: %w", sc.Text(), err)
			continue
		}
		if e.Stage == "ResponseComplete" && e.ObjectRef != nil && keep(e) {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	return out, nil
}

// AuditRecords are serve's /audit records matching q, read from its
// metrics server at metrics (host:port, plain HTTP: --metrics-secure=false).
func AuditRecords(t testing.TB, metrics string, q url.Values) []audit.Record {
	t.Helper()
	resp, err := http.Get("http://" + metrics + server.AuditPath + "?" + q.Encode()) //nolint:gosec // a local test server
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l audit.List
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s?%s: HTTP %d, %v", server.AuditPath, q.Encode(), resp.StatusCode, err)
	}
	return l.Items
}

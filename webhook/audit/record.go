package audit

import (
	"net/url"
	"strconv"
	"time"
)

// Record is one audited verdict: the request, the object, the rule's
// action, field and message, and whether its caller was authenticated.
type Record struct {
	Time       time.Time `json:"time"`
	RequestUID string    `json:"requestUID"`
	User       string    `json:"user"`
	Groups     []string  `json:"groups,omitempty"`
	Operation  string    `json:"operation"`
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Namespace  string    `json:"namespace,omitempty"`
	Name       string    `json:"name,omitempty"`
	Rule       string    `json:"rule"`
	Action     string    `json:"action"`
	Field      string    `json:"field,omitempty"`
	Message    string    `json:"message"`
	DryRun     bool      `json:"dryRun"`
	// Exception names the PolicyException that exempted the violation
	// (action Exempt), and ExceptionExpires when it stops applying (unset:
	// never).
	Exception        string     `json:"exception,omitempty"`
	ExceptionExpires *time.Time `json:"exceptionExpires,omitempty"`
	// CallerAuthenticated says the request came from an authenticated
	// caller (a client certificate of --webhook-client-ca, or the audit
	// sink's token). When false, User and Groups are the caller's claim:
	// anyone who reaches the webhook port can write them.
	CallerAuthenticated bool `json:"callerAuthenticated"`
}

// List is the JSON document /audit serves: the matching records, oldest first.
type List struct {
	Items []Record `json:"items"`
}

// Query selects records. Zero fields match everything.
type Query struct {
	Namespace string
	Rule      string
	User      string
	// Since keeps records at or after this time.
	Since time.Time
	// Limit keeps only the newest Limit records (0: all).
	Limit int
}

// Matches reports whether r passes the query's filters (not the limit).
func (q Query) Matches(r *Record) bool {
	return (q.Namespace == "" || r.Namespace == q.Namespace) &&
		(q.Rule == "" || r.Rule == q.Rule) &&
		(q.User == "" || r.User == q.User) &&
		(q.Since.IsZero() || !r.Time.Before(q.Since))
}

// Values encodes the query as /audit's URL parameters; ParseQuery reads them.
func (q Query) Values() url.Values {
	v := url.Values{}
	if q.Namespace != "" {
		v.Set("namespace", q.Namespace)
	}
	if q.Rule != "" {
		v.Set("rule", q.Rule)
	}
	if q.User != "" {
		v.Set("user", q.User)
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// ParseQuery reads /audit's URL parameters. since is an RFC 3339 time or a
// duration ("15m": the last fifteen minutes before now).
func ParseQuery(v url.Values, now time.Time) (Query, error) {
	q := Query{Namespace: v.Get("namespace"), Rule: v.Get("rule"), User: v.Get("user")}
	if s := v.Get("since"); s != "" {
		t, err := ParseSince(s, now)
		if err != nil {
			return Query{}, err
		}
		q.Since = t
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return Query{}, &ParamError{Param: "limit", Value: s, Want: "a non-negative integer"}
		}
		q.Limit = n
	}
	return q, nil
}

// ParseSince reads a since filter: an RFC 3339 time, or a positive Go
// duration counted back from now.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, &ParamError{Param: "since", Value: s, Want: `an RFC 3339 time ("2026-11-22T14:00:00Z") or a positive duration ("15m")`}
}

// ParamError is a bad /audit URL parameter.
type ParamError struct {
	Param, Value, Want string
}

func (e *ParamError) Error() string {
	return "invalid " + e.Param + " " + strconv.Quote(e.Value) + ": want " + e.Want
}

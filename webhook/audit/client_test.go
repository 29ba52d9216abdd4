package audit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Fetch sends the query and the token, reads the list, and names what the
// caller lacks when the server refuses.
func TestFetch(t *testing.T) {
	var gotQuery url.Values
	var gotAuth string
	status, body := http.StatusOK, `{"items":[{"rule":"V-TJ-1","action":"Deny","namespace":"ml"}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/audit" {
			http.NotFound(w, r)
			return
		}
		gotQuery, gotAuth = r.URL.Query(), r.Header.Get("Authorization")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	base, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	since := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)

	list, err := Fetch(ctx, srv.Client(), base, "secret", Query{Namespace: "ml", Rule: "V-TJ-1", Since: since, Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&List{Items: []Record{{Rule: "V-TJ-1", Action: "Deny", Namespace: "ml"}}}, list); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	if gotAuth != "Bearer secret" {
		t.Errorf("Authorization %q, want the bearer token", gotAuth)
	}
	if q, err := ParseQuery(gotQuery, since); err != nil || q.Namespace != "ml" || q.Rule != "V-TJ-1" || q.Limit != 5 || !q.Since.Equal(since) {
		t.Errorf("the server read the query %+v (%v) from %v", q, err, gotQuery)
	}

	if _, err := Fetch(ctx, srv.Client(), base, "", Query{}); err != nil || gotAuth != "" {
		t.Errorf("without a token: err %v, Authorization %q; want none sent", err, gotAuth)
	}

	for _, tc := range []struct {
		status int
		body   string
		want   string
	}{
		{http.StatusUnauthorized, "Unauthorized", "pass a bearer token"},
		{http.StatusForbidden, "Forbidden", `needs RBAC "get" on the non-resource URL /audit`},
		{http.StatusInternalServerError, "boom", "500 Internal Server Error: boom"},
		{http.StatusOK, "not json", "did not answer with an audit list"},
	} {
		status, body = tc.status, tc.body
		if _, err := Fetch(ctx, srv.Client(), base, "t", Query{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("answer %d %q: err %v, want it to say %q", tc.status, tc.body, err, tc.want)
		}
	}
}

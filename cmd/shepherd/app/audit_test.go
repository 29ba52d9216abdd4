package app

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

func auditServer(t *testing.T) (*httptest.Server, *string) {
	t.Helper()
	ring := audit.NewRing(10)
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	ring.Add(audit.Record{Time: t0, User: "alice", Operation: "CREATE", Kind: "TrainJob", Namespace: "research", Name: "tj", Rule: "V-TJ-1", Action: "Deny", Field: "spec.activeDeadlineSeconds", Message: "must be at least 1"})
	ring.Add(audit.Record{Time: t0.Add(time.Minute), User: "bob", Operation: "CREATE", Kind: "JobSet", Namespace: "prod", Name: "js", Rule: "V-JS-5", Action: "Warn", Message: "startupPolicy is\ndeprecated", DryRun: true})
	until := t0.Add(24 * time.Hour)
	ring.Add(audit.Record{Time: t0.Add(2 * time.Minute), User: "carol", Operation: "CREATE", Kind: "TrainJob", Namespace: "legacy", Name: "old", Rule: "V-TJ-2", Action: "Exempt", Message: "too long", Exception: "legacy-jobs", ExceptionExpires: &until})
	var auth string
	h := &audit.Handler{Ring: ring}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		if r.URL.Path != "/audit" {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &auth
}

func TestAuditPrintsATable(t *testing.T) {
	srv, auth := auditServer(t)
	var out, errOut bytes.Buffer
	if code := Main([]string{"audit", "--server", srv.URL, "--token", "s3cret", "--kubeconfig", "/nonexistent"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "TIME") {
		t.Fatalf("table:\n%s", out.String())
	}
	for i, want := range [][]string{
		{"2026-11-22T12:00:00Z", "Deny", "V-TJ-1", "TrainJob", "research/tj", "alice", "false", "spec.activeDeadlineSeconds", "must be at least 1"},
		{"Warn", "V-JS-5", "prod/js", "bob", "true", "startupPolicy is deprecated"},
		{"Exempt", "V-TJ-2", "legacy/old", "carol", "too long [exempt by PolicyException legacy-jobs, until 2026-11-23T12:00:00Z]"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("row %d %q lacks %q", i+1, lines[i+1], w)
			}
		}
	}
	if *auth != "Bearer s3cret" {
		t.Errorf("Authorization = %q", *auth)
	}
}

func TestAuditJSONWithFilters(t *testing.T) {
	srv, _ := auditServer(t)
	var out, errOut bytes.Buffer
	if code := Main([]string{"audit", "--server", srv.URL, "-n", "prod", "-o", "json", "--kubeconfig", "/nonexistent"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var l audit.List
	if err := json.Unmarshal(out.Bytes(), &l); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(l.Items) != 1 || l.Items[0].Rule != "V-JS-5" || !l.Items[0].DryRun {
		t.Errorf("items %+v", l.Items)
	}
}

func TestAuditUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"audit", "-o", "xml"},
		{"audit", "--since", "yesterday"},
		{"audit", "--server", "localhost:8443"},
	} {
		var out, errOut bytes.Buffer
		if code := Main(args, &out, &errOut); code != 2 || errOut.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q; want 2 with a message", args, code, errOut.String())
		}
	}
}

func TestAuditReportsHTTPErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	if code := Main([]string{"audit", "--server", srv.URL, "--kubeconfig", "/nonexistent"}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "--token") {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}

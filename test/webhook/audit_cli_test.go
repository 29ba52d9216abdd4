package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/shepherd-k8s/shepherd/cmd/shepherd/app"
	"github.com/shepherd-k8s/shepherd/test/corpus"
	"github.com/shepherd-k8s/shepherd/webhook/audit"
)

// TestShepherdAuditReadsTheServer runs `shepherd audit` against the
// running server's authenticated metrics endpoint after a denial.
func TestShepherdAuditReadsTheServer(t *testing.T) {
	ns := namespace(t, nil)
	corpus.ShepherdCauses(t, k.Create(context.Background(), object(t, ns, brokenPCS)))
	auditRecords(t, "namespace="+ns, func(rs []audit.Record) bool { return len(rs) > 0 })
	tok, _ := tokens(t)

	var out, errOut bytes.Buffer
	args := []string{"audit", "--server", metrics, "--token", tok, "--insecure-skip-tls-verify", "--kubeconfig", "/nonexistent", "-n", ns}
	if code := app.Main(append(args, "-o", "json"), &out, &errOut); code != 0 {
		t.Fatalf("shepherd audit -o json: exit %d: %s", code, errOut.String())
	}
	var l audit.List
	if err := json.Unmarshal(out.Bytes(), &l); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(l.Items) == 0 {
		t.Fatal("no records")
	}
	for _, r := range l.Items {
		if r.Namespace != ns || r.Name != "elastic-training" || r.Action != "Deny" {
			t.Errorf("record outside the filter or wrong: %+v", r)
		}
	}

	out.Reset()
	if code := app.Main(append(args, "--rule", l.Items[0].Rule), &out, &errOut); code != 0 {
		t.Fatalf("shepherd audit: exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "TIME") || !strings.Contains(lines[1], ns+"/elastic-training") || !strings.Contains(lines[1], l.Items[0].Rule) {
		t.Errorf("table:\n%s", out.String())
	}

	// Without a token the server refuses, and the CLI says what to do.
	out.Reset()
	errOut.Reset()
	if code := app.Main([]string{"audit", "--server", metrics, "--insecure-skip-tls-verify", "--kubeconfig", "/nonexistent"}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "401") {
		t.Errorf("unauthenticated: exit %d, stderr %q", code, errOut.String())
	}
}

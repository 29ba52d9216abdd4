package app

import (
	"bytes"
	"strings"
	"testing"
)

func TestVersionPrintsVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"version"}, &out, &errOut); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "shepherd "+Version()+" ") {
		t.Errorf("version output %q does not start with %q", out.String(), "shepherd "+Version())
	}
	for _, want := range []string{"Kubeflow Trainer v2.3.0", "JobSet v0.12.0", "Grove", "Kubernetes v1.37.1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("version output %q does not name the tested %s", out.String(), want)
		}
	}
}

func TestHelpListsSubcommands(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"--help"}, &out, &errOut); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, errOut.String())
	}
	if !strings.Contains(out.String(), "version") {
		t.Errorf("--help does not list the version subcommand:\n%s", out.String())
	}
}

func TestUnknownSubcommandIsUsageError(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"no-such-command"}, &out, &errOut); code != 2 {
		t.Fatalf("exit code %d, want 2", code)
	}
	if !strings.Contains(errOut.String(), "no-such-command") {
		t.Errorf("stderr %q does not name the unknown command", errOut.String())
	}
}

// TestServeRejectsInconsistentLeaseTimings: lease timings that cannot
// work (renewing slower than the lease lasts) are a usage error at start,
// before serve reaches for the apiserver.
func TestServeRejectsInconsistentLeaseTimings(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Main([]string{"serve", "--leader-election-lease-duration=5s", "--leader-election-renew-deadline=8s"}, &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), "--leader-election-renew-deadline") {
		t.Errorf("exit %d, stderr %q; want 2 naming the flags", code, errOut.String())
	}
}

// TestServeRejectsAnImpossibleAuditCPUShare: the audit's share of the time
// is above 0 and at most 1; anything else is a usage error at start.
func TestServeRejectsAnImpossibleAuditCPUShare(t *testing.T) {
	for _, share := range []string{"0", "-0.5", "1.5"} {
		var out, errOut bytes.Buffer
		code := Main([]string{"serve", "--audit-cpu-share=" + share}, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), "--audit-cpu-share") {
			t.Errorf("--audit-cpu-share=%s: exit %d, stderr %q; want 2 naming the flag", share, code, errOut.String())
		}
	}
}

// TestServeRejectsAMaxPoliciesBelowOne: a cap of no policies is a usage
// error at start, not a replica that silently enforces none.
func TestServeRejectsAMaxPoliciesBelowOne(t *testing.T) {
	for _, n := range []string{"0", "-3"} {
		var out, errOut bytes.Buffer
		code := Main([]string{"serve", "--max-workload-policies=" + n}, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), "--max-workload-policies") {
			t.Errorf("--max-workload-policies=%s: exit %d, stderr %q; want 2 naming the flag", n, code, errOut.String())
		}
	}
}

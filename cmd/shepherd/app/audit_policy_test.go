package app

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shepherd-k8s/shepherd/offline"
)

func impactFile(name string) string { return filepath.Join("testdata", "impact", name) }

// runImpactJSON runs `shepherd audit --policy ... -o json` and decodes the
// report.
func runImpactJSON(t *testing.T, wantCode int, args ...string) offline.ImpactReport {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := Main(append([]string{"audit", "-o", "json"}, args...), &out, &errOut); code != wantCode {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, wantCode, out.String(), errOut.String())
	}
	var rep offline.ImpactReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("not an impact report: %v\n%s", err, out.String())
	}
	return rep
}

// violators lists "kind ns/name rule field" per reported violation.
func violators(rep offline.ImpactReport) []string {
	var out []string
	for _, o := range rep.Objects {
		for _, v := range o.Violations {
			out = append(out, o.Kind+" "+o.Namespace+"/"+o.Name+" "+v.Rule+" "+v.Action+" "+v.Field)
		}
	}
	return out
}

func TestImpactReportsOnlyTheGivenPolicyOffline(t *testing.T) {
	rep := runImpactJSON(t, 1, "--policy", impactFile("policy-team.yaml"), "-f", impactFile("objects.yaml"))
	// lost also fails V-TJ-3 (its runtime does not exist); without
	// --include-builtin only the new policy is reported.
	want := []string{
		"TrainJob research/unlabelled team-label-required Deny metadata.labels",
		"TrainJob prod/lost team-label-required Deny metadata.labels",
	}
	if diff := cmp.Diff(want, violators(rep)); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
	// Only the kinds the policy names are judged: three TrainJobs, not
	// the JobSet or the runtime.
	if rep.Evaluated != 3 || rep.WouldDeny != 2 {
		t.Errorf("evaluated %d, would deny %d; want 3 and 2", rep.Evaluated, rep.WouldDeny)
	}
	if diff := cmp.Diff([]offline.ImpactPolicy{{Rule: "team-label-required", Action: "Deny", ViolatingObjects: 2}}, rep.Rules); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
}

func TestImpactIncludeBuiltinAddsTheBuiltInRules(t *testing.T) {
	rep := runImpactJSON(t, 1, "--policy", impactFile("policy-team.yaml"), "-f", impactFile("objects.yaml"), "--include-builtin")
	got := strings.Join(violators(rep), "\n")
	if !strings.Contains(got, "TrainJob prod/lost V-TJ-3 Deny spec.runtimeRef") {
		t.Errorf("the built-in lookup V-TJ-3 is not reported for prod/lost:\n%s", got)
	}
	// Every stored object of the seven kinds is judged: the runtime and
	// the JobSet too.
	if rep.Evaluated != 5 {
		t.Errorf("evaluated %d objects, want 5", rep.Evaluated)
	}
}

func TestImpactOfAnAuditPolicyIsNotADenial(t *testing.T) {
	rep := runImpactJSON(t, 0, "--policy", impactFile("policy-audit.yaml"), "-f", impactFile("objects.yaml"))
	if diff := cmp.Diff([]string{"TrainJob research/unlabelled deadline-at-most-a-day Audit spec.activeDeadlineSeconds"}, violators(rep)); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
	if rep.WouldDeny != 0 {
		t.Errorf("would deny %d, want 0 for an Audit policy", rep.WouldDeny)
	}
}

func TestImpactNamespaceNarrowsTheObjects(t *testing.T) {
	rep := runImpactJSON(t, 1, "--policy", impactFile("policy-team.yaml"), "-f", impactFile("objects.yaml"), "-n", "research")
	if diff := cmp.Diff([]string{"TrainJob research/unlabelled team-label-required Deny metadata.labels"}, violators(rep)); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
	if rep.Evaluated != 2 {
		t.Errorf("evaluated %d, want the 2 TrainJobs of research", rep.Evaluated)
	}
}

func TestImpactTable(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Main([]string{"audit", "--policy", impactFile("policy-team.yaml"), "-f", impactFile("objects.yaml")}, &out, &errOut)
	if code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, errOut.String())
	}
	for _, want := range []string{
		"Judged 3 stored objects",
		"team-label-required (Deny): would deny 2 of them",
		"KIND", "research/unlabelled", "every TrainJob needs a team label",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestImpactUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a policy that does not compile", []string{"--policy", impactFile("policy-broken.yaml"), "-f", impactFile("objects.yaml")}, `WorkloadPolicy "broken" does not compile`},
		{"no policy in the file", []string{"--policy", impactFile("objects.yaml"), "-f", impactFile("objects.yaml")}, "--policy takes WorkloadPolicy and PolicyException objects"},
		{"-f without --policy", []string{"-f", impactFile("objects.yaml")}, "go with --policy"},
		{"ring filters with --policy", []string{"--policy", impactFile("policy-team.yaml"), "-f", impactFile("objects.yaml"), "--since", "1h"}, "--rule, --user, --since and --limit"},
		{"a missing file", []string{"--policy", impactFile("nope.yaml"), "-f", impactFile("objects.yaml")}, "nope.yaml"},
		{"no kubeconfig", []string{"--policy", impactFile("policy-team.yaml"), "--kubeconfig", "/nonexistent/kubeconfig"}, "reads the cluster of a kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := Main(append([]string{"audit"}, tc.args...), &out, &errOut); code != 2 {
				t.Fatalf("exit %d, want 2\n%s%s", code, out.String(), errOut.String())
			}
			if !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, errOut.String())
			}
		})
	}
}

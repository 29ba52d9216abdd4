package webhook

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestCheckRuleIDs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ids     []string
		wantErr string
	}{
		{name: "none"},
		{name: "a CEL rule and a Go defaulter", ids: []string{"V-TJ-1", "D-PCS-3"}},
		{name: "unknown", ids: []string{"V-TJ-1", "V-TJ-99"}, wantErr: "--disable-rule: unknown rule ID V-TJ-99; the built-in rules are "},
		{name: "lower case is another ID", ids: []string{"v-tj-1"}, wantErr: "unknown rule ID v-tj-1"},
		{name: "empty", ids: []string{" "}, wantErr: "--disable-rule has an empty rule ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckRuleIDs("disable-rule", tc.ids)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if err != nil && strings.Contains(tc.wantErr, "unknown") && !strings.Contains(err.Error(), "V-TJ-1, ") {
				t.Errorf("the error does not list the valid IDs: %v", err)
			}
		})
	}
}

// TestBuiltinRuleIDsFitThePolicyExceptionSchema: the PolicyException CRD
// admits every built-in rule ID in spec.rules (its items pattern), so a
// new rule ID of another shape cannot be left unexemptable.
func TestBuiltinRuleIDsFitThePolicyExceptionSchema(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "deploy", "crds", "shepherd.dev_policyexceptions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s+pattern: (.+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no pattern in the PolicyException CRD")
	}
	re, err := regexp.Compile(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := BuiltinRuleIDs()
	if err != nil || len(ids) == 0 {
		t.Fatalf("BuiltinRuleIDs: %v, %v", ids, err)
	}
	for _, id := range ids {
		if !re.MatchString(id) {
			t.Errorf("rule %s does not match the CRD's pattern %s", id, m[1])
		}
	}
	if re.MatchString("V-tj-1") || !re.MatchString("require-team-label") {
		t.Errorf("pattern %s: want built-in IDs and DNS names only", m[1])
	}
}

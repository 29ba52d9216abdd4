package webhook

import (
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

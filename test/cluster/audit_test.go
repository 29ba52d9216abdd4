package cluster

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestStatusConditions: the conditions a status write sets are read from
// the body the audit log holds, and a body that leaves the list alone is
// told apart from one that sets it empty.
func TestStatusConditions(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		want   []string
		wantOK bool
	}{
		{"merge patch that sets the list", `{"status":{"conditions":[{"type":"Created","status":"True"},{"type":"Suspended","status":"False"}]}}`, []string{"Created", "Suspended"}, true},
		{"merge patch that empties the list", `{"status":{"conditions":[]}}`, []string{}, true},
		{"merge patch that leaves the list alone", `{"status":{"jobsStatus":[{"name":"node"}]}}`, nil, false},
		{"an update: the whole object", `{"kind":"TrainJob","status":{"conditions":[{"type":"Failed","status":"True"}]}}`, []string{"Failed"}, true},
		{"no body logged", ``, nil, false},
		{"a body that is not JSON", `{"status":`, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := AuditEvent{RequestObject: []byte(tc.body)}.StatusConditions()
			var types []string
			if got != nil {
				types = []string{}
			}
			for _, c := range got {
				types = append(types, c.Type)
			}
			if ok != tc.wantOK {
				t.Errorf("ok = %t, want %t", ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, types); diff != "" {
				t.Errorf("condition types (-want +got):\n%s", diff)
			}
		})
	}
}

package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	uberzap "go.uber.org/zap"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// TestRequestValuesAreLoggedWithTheCaller: the deferred values reach every
// line, with the values added later and the logger's name, and the line
// names the code that logged (not the deferring sink).
func TestRequestValuesAreLoggedWithTheCaller(t *testing.T) {
	var buf bytes.Buffer
	// With the caller, which serve's --zap flags can ask for.
	base := zap.New(zap.WriteTo(&buf), zap.UseDevMode(false), zap.RawZapOpts(uberzap.AddCaller()))
	log := withRequestValues(base, "uid", "u-1", "kind", "TrainJob")

	log.WithName("chain").WithValues("rule", "V-TJ-3").Info("looked up")
	log.Error(errors.New("boom"), "failed")
	log.V(1).Info("not at this verbosity")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), buf.String())
	}
	for i, want := range []map[string]any{
		{"uid": "u-1", "kind": "TrainJob", "rule": "V-TJ-3", "logger": "chain", "msg": "looked up"},
		{"uid": "u-1", "kind": "TrainJob", "msg": "failed", "error": "boom"},
	} {
		var got map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
			t.Fatalf("line %d is not JSON: %v: %s", i, err, lines[i])
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("line %d: %s = %v, want %v (%s)", i, k, got[k], v, lines[i])
			}
		}
		if c, _ := got["caller"].(string); !strings.HasPrefix(c, "server/requestlog_test.go:") {
			t.Errorf("line %d: caller %q, want this test file", i, got["caller"])
		}
	}
}

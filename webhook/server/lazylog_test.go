package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// countingSink counts the WithValues calls that reach it.
type countingSink struct {
	logr.LogSink
	withValues *int
}

func (c countingSink) WithValues(kvs ...any) logr.LogSink {
	*c.withValues++
	return countingSink{LogSink: c.LogSink.WithValues(kvs...), withValues: c.withValues}
}

// A request's values reach every line logged, with the caller's file and
// line, and are handed to the sink below only when a line is logged, once.
func TestLazyValuesAreEncodedOnlyWhenLogging(t *testing.T) {
	var lines []string
	base := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{LogCaller: funcr.All})
	calls := 0
	base = logr.New(countingSink{LogSink: base.GetSink(), withValues: &calls})

	log := withRequestValues(base, lazyBase(base), requestID{webhook: Validating, uid: "u-1", kind: "PodCliqueSet", operation: "CREATE"}, nil)
	if calls != 0 {
		t.Fatalf("%d WithValues calls before anything was logged, want 0", calls)
	}
	log.V(5).Info("not enabled") // funcr's default verbosity is 0
	if calls != 0 || len(lines) != 0 {
		t.Fatalf("a disabled line resolved the values (%d calls) or was written (%q)", calls, lines)
	}
	log.Info("admitted", "allowed", true)
	log.Error(errors.New("boom"), "denied")
	log.WithName("audit").WithValues("rule", "V-PCS-1").Info("violation")
	if calls != 1 {
		t.Errorf("the request's values were handed down %d times, want once", calls)
	}
	want := [][]string{
		{`"webhook"="validating"`, `"uid"="u-1"`, `"kind"="PodCliqueSet"`, `"namespace"=""`, `"operation"="CREATE"`, `"allowed"=true`, `"msg"="admitted"`},
		{`"uid"="u-1"`, `"error"="boom"`, `"msg"="denied"`},
		{`audit`, `"uid"="u-1"`, `"rule"="V-PCS-1"`, `"msg"="violation"`},
	}
	if len(lines) != len(want) {
		t.Fatalf("logged %q, want %d lines", lines, len(want))
	}
	for i, w := range want {
		for _, part := range append(w, `"file"="lazylog_test.go"`) {
			if !strings.Contains(lines[i], part) {
				t.Errorf("line %d %q lacks %s", i, lines[i], part)
			}
		}
	}
}

// A logger without a sink (logr.Discard) stays one.
func TestLazyValuesOnDiscard(t *testing.T) {
	log := withRequestValues(logr.Discard(), lazyBase(logr.Discard()), requestID{uid: "u-1"}, nil)
	if log.GetSink() != nil {
		t.Fatalf("sink %T, want none", log.GetSink())
	}
	log.Info("nothing")
}

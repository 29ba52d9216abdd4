package testkit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, as testing's does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatalOf runs check on a fatalRecorder and returns the message it failed
// with ("" if it did not).
func fatalOf(check func(testing.TB)) string {
	f := &fatalRecorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(f)
	}()
	<-done
	return f.msg
}

func run[C Condition](timeout time.Duration, cond C) string {
	return fatalOf(func(t testing.TB) { Eventually(t, timeout, "the thing", cond) })
}

// TestEventuallyEveryForm: each form of condition is done on its own
// terms, after failing twice; an error on the way does not stop the wait.
func TestEventuallyEveryForm(t *testing.T) {
	tries := func() func() int { n := 0; return func() int { n++; return n } }
	next := tries()
	if msg := run(10*time.Second, func() bool { return next() >= 3 }); msg != "" {
		t.Errorf("func() bool: %s", msg)
	}
	next = tries()
	if msg := run(10*time.Second, func() error {
		if next() < 3 {
			return errors.New("not yet")
		}
		return nil
	}); msg != "" {
		t.Errorf("func() error: %s", msg)
	}
	next = tries()
	if msg := run(10*time.Second, func() (bool, string) { return next() >= 3, "seen" }); msg != "" {
		t.Errorf("func() (bool, string): %s", msg)
	}
	next = tries()
	if msg := run(10*time.Second, func() (bool, error) {
		if next() < 3 {
			return false, errors.New("transient")
		}
		return true, nil
	}); msg != "" {
		t.Errorf("func() (bool, error): %s", msg)
	}
	next = tries()
	if msg := run(10*time.Second, func(ctx context.Context) (bool, error) {
		if _, ok := ctx.Deadline(); !ok {
			return false, errors.New("no deadline")
		}
		return next() >= 3, nil
	}); msg != "" {
		t.Errorf("func(ctx) (bool, error): %s", msg)
	}
}

// TestEventuallyFailsNamingWhatItSaw: a condition never done fails the
// test after the timeout with what was awaited and what was last seen.
func TestEventuallyFailsNamingWhatItSaw(t *testing.T) {
	start := time.Now()
	msg := run(500*time.Millisecond, func() (bool, string) { return false, "3 of 4 replicas ready" })
	if !strings.Contains(msg, "waiting for the thing: not within 500ms: 3 of 4 replicas ready") {
		t.Errorf("message %q", msg)
	}
	if took := time.Since(start); took < 500*time.Millisecond || took > 5*time.Second {
		t.Errorf("failed after %v; want about the timeout", took)
	}
	if msg := run(300*time.Millisecond, func() bool { return false }); !strings.HasSuffix(msg, ": not yet") {
		t.Errorf("a bare condition's message %q; want it to say not yet", msg)
	}
}

// TestPollAsksEveryIntervalAndReturns: Poll asks as often as it is told
// and, unlike Eventually, returns what it last saw instead of failing.
func TestPollAsksEveryIntervalAndReturns(t *testing.T) {
	n := 0
	start := time.Now()
	if err := Poll(10*time.Millisecond, 10*time.Second, func() bool { n++; return n >= 10 }); err != nil {
		t.Fatalf("Poll: %v", err)
	}
	// Nine intervals of 10 ms; at Eventually's 200 ms it would be 1.8 s.
	if took := time.Since(start); took > time.Second {
		t.Errorf("ten tries 10 ms apart took %v", took)
	}
	err := Poll(10*time.Millisecond, 100*time.Millisecond, func() (bool, error) { return false, errors.New("lease held by a") })
	if err == nil || err.Error() != "not within 100ms: lease held by a" {
		t.Errorf("Poll of a condition never done: %v", err)
	}
}

// TestConsistentlyFailsAtTheFirstLapse: a condition that holds throughout
// passes after about d; one that lapses fails the test at once, naming what
// should have held and what was seen; Holds returns the same instead.
func TestConsistentlyFailsAtTheFirstLapse(t *testing.T) {
	consistently := func(d time.Duration, cond func() (bool, string)) string {
		return fatalOf(func(t testing.TB) { Consistently(t, d, "the job Failed", cond) })
	}
	n := 0
	start := time.Now()
	if msg := consistently(500*time.Millisecond, func() (bool, string) { n++; return true, "" }); msg != "" {
		t.Errorf("a condition that holds: %s", msg)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 5*time.Second || n < 2 {
		t.Errorf("held for %v, asked %d times; want about 500ms, asked more than once", took, n)
	}
	n = 0
	start = time.Now()
	msg := consistently(time.Minute, func() (bool, string) { n++; return n < 3, "the Failed condition is nil" })
	if msg != "the job Failed: no longer so: the Failed condition is nil" {
		t.Errorf("message %q", msg)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("failed after %v; want at the third ask, long before the minute", took)
	}
	if err := Holds(10*time.Millisecond, 100*time.Millisecond, func() bool { return false }); err == nil || err.Error() != "not so" {
		t.Errorf("Holds of a bare condition never done: %v", err)
	}
	if err := Holds(10*time.Millisecond, 100*time.Millisecond, func() error { return nil }); err != nil {
		t.Errorf("Holds of a condition always done: %v", err)
	}
}

// TestStopEndsTheWaitAtOnce: an error wrapped in Stop ends Poll and Holds
// at once with that error, where any other error is only what was seen.
func TestStopEndsTheWaitAtOnce(t *testing.T) {
	exited := errors.New("kwok exited: signal: killed")
	n := 0
	start := time.Now()
	err := Poll(10*time.Millisecond, time.Minute, func() (bool, error) {
		if n++; n == 3 {
			return false, Stop(exited)
		}
		return false, errors.New("not healthy yet")
	})
	if !errors.Is(err, exited) || err.Error() != exited.Error() {
		t.Errorf("Poll stopped with %v, want %v itself", err, exited)
	}
	if took := time.Since(start); n != 3 || took > 5*time.Second {
		t.Errorf("Poll asked %d times in %v; want it to stop at the third", n, took)
	}
	if err := Holds(10*time.Millisecond, time.Minute, func(context.Context) (bool, error) { return true, Stop(exited) }); !errors.Is(err, exited) {
		t.Errorf("Holds stopped with %v, want %v", err, exited)
	}
	msg := run(time.Minute, func() error { return Stop(exited) })
	if msg != "waiting for the thing: "+exited.Error() {
		t.Errorf("Eventually's message %q", msg)
	}
}

// Package testkit holds the helpers every test shares and that need no
// cluster: one Eventually for every wait (and one Consistently for every
// state that must hold), and one builder per kind
// (builders.go, policy.go) for the objects unit and integration tests
// build. The suites' control planes and serve are test/cluster's.
package testkit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Interval is how often Eventually asks its condition again.
const Interval = 200 * time.Millisecond

// Condition is what Eventually waits for, in whichever form a suite's
// check comes most naturally:
//   - func() bool: true is done;
//   - func() error: nil is done, an error says what was seen;
//   - func() (bool, string): done, and what was seen;
//   - func() (bool, error) and func(context.Context) (bool, error): done,
//     and what went wrong; an error does not stop the wait (the next try
//     may succeed), it is what is reported if none does — unless it is
//     wrapped in Stop: then the wait ends with it at once.
type Condition interface {
	func() bool | func() error | func() (bool, string) | func() (bool, error) | func(context.Context) (bool, error)
}

// Eventually asks cond every Interval until it is done, and fails t when it
// is not within timeout, naming what was awaited and what cond last saw.
func Eventually[C Condition](t testing.TB, timeout time.Duration, what string, cond C) {
	t.Helper()
	if err := Poll(Interval, timeout, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// Poll asks cond at once and then every `every` until it is done, and
// returns nil then; when it is not done within timeout, it returns an error
// saying so and what cond last saw. It is Eventually for the waits that go
// on when it fails (a check after a grace period), and for those that time
// what they await (a takeover within a lease duration) and so ask more often
// than every Interval.
func Poll[C Condition](every, timeout time.Duration, cond C) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ask := asker(cond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var last string
	for {
		done, seen, stop := ask(ctx)
		if stop != nil {
			return stop
		}
		if done {
			return nil
		}
		if seen != "" {
			last = seen
		}
		select {
		case <-ctx.Done():
			if last == "" {
				last = "not yet"
			}
			return fmt.Errorf("not within %v: %s", timeout, last)
		case <-tick.C:
		}
	}
}

// Consistently asks cond every Interval for d, and fails t as soon as it
// is not done, naming what should have held and what cond saw then.
func Consistently[C Condition](t testing.TB, d time.Duration, what string, cond C) {
	t.Helper()
	if err := Holds(Interval, d, cond); err != nil {
		t.Fatalf("%s: no longer so: %v", what, err)
	}
}

// Holds asks cond at once and then every `every` for d, and returns nil
// when it was done each time; the first time it is not, Holds returns at
// once an error saying what cond saw. It is Consistently for the checks
// that go on when a state lapses (to find out why). cond's context is not
// bounded by d: a request it makes as d ends is not cut short into a lapse.
func Holds[C Condition](every, d time.Duration, cond C) error {
	ask := asker(cond)
	end := time.Now().Add(d)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		done, seen, stop := ask(context.Background())
		if stop != nil {
			return stop
		}
		if !done {
			if seen == "" {
				seen = "not so"
			}
			return errors.New(seen)
		}
		if !time.Now().Add(every).Before(end) {
			return nil
		}
		<-tick.C
	}
}

// Stop wraps err so that a condition's error ends the wait at once (Poll,
// Holds and Eventually return or report err itself) instead of being what
// the next try may outdo: for a wait that can no longer end well, such as
// one for a process that has exited.
func Stop(err error) error { return stopError{err} }

type stopError struct{ err error }

func (e stopError) Error() string { return e.err.Error() }
func (e stopError) Unwrap() error { return e.err }

// asker turns any Condition into one form: done, what was seen, and the
// error a condition wrapped in Stop.
func asker[C Condition](cond C) func(context.Context) (bool, string, error) {
	seen := func(ok bool, err error) (bool, string, error) {
		var stop stopError
		if errors.As(err, &stop) {
			return false, "", stop.err
		}
		return ok && err == nil, errText(err), nil
	}
	switch c := any(cond).(type) {
	case func() bool:
		return func(context.Context) (bool, string, error) { return c(), "", nil }
	case func() error:
		return func(context.Context) (bool, string, error) { return seen(true, c()) }
	case func() (bool, string):
		return func(context.Context) (bool, string, error) {
			ok, what := c()
			return ok, what, nil
		}
	case func() (bool, error):
		return func(context.Context) (bool, string, error) { return seen(c()) }
	case func(context.Context) (bool, error):
		return func(ctx context.Context) (bool, string, error) { return seen(c(ctx)) }
	}
	panic(fmt.Sprintf("testkit.Eventually: condition of type %T", cond)) // unreachable: Condition lists the cases
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Package testkit holds the helpers every test shares and that need no
// cluster: one Eventually for every wait, and one builder per kind
// (builders.go, policy.go) for the objects unit and integration tests
// build. The suites' control planes and serve are test/cluster's.
package testkit

import (
	"context"
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
//     may succeed), it is what is reported if none does.
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
		done, seen := ask(ctx)
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

// asker turns any Condition into one form: done, and what was seen.
func asker[C Condition](cond C) func(context.Context) (bool, string) {
	switch c := any(cond).(type) {
	case func() bool:
		return func(context.Context) (bool, string) { return c(), "" }
	case func() error:
		return func(context.Context) (bool, string) {
			err := c()
			return err == nil, errText(err)
		}
	case func() (bool, string):
		return func(context.Context) (bool, string) { return c() }
	case func() (bool, error):
		return func(context.Context) (bool, string) {
			ok, err := c()
			return ok && err == nil, errText(err)
		}
	case func(context.Context) (bool, error):
		return func(ctx context.Context) (bool, string) {
			ok, err := c(ctx)
			return ok && err == nil, errText(err)
		}
	}
	panic(fmt.Sprintf("testkit.Eventually: condition of type %T", cond)) // unreachable: Condition lists the cases
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

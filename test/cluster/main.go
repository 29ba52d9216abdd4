package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
)

// ChildEnv, in a child process's environment, names the role the test
// binary plays instead of running its tests (ChildCommand): ServeRole or
// one a suite registered (RegisterChild). Controller names are unique per
// process, so a second serve (a second replica) needs a process of its own.
const ChildEnv = "SHEPHERD_TEST_CHILD"

// ServeRole is the child role that runs `shepherd serve` (ServeChild)
// with the child's arguments.
const ServeRole = "serve"

var (
	childrenMu sync.Mutex
	children   = map[string]func(args []string) int{ServeRole: ServeChild}
)

// RegisterChild makes role a child role of this test binary: started by
// ChildCommand(role, args...), the process runs run(args) and exits with
// its code. Call it in TestMain before RunMain.
func RegisterChild(role string, run func(args []string) int) {
	childrenMu.Lock()
	defer childrenMu.Unlock()
	children[role] = run
}

// ChildCommand is this test binary started as a child playing role with
// args (RunMain, or RunChildIfAsked, dispatches it before any test flag is
// parsed). The process is killed when ctx is done.
func ChildCommand(ctx context.Context, role string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...) //nolint:gosec // this test binary
	cmd.Env = append(os.Environ(), ChildEnv+"="+role)
	return cmd
}

// RunChildIfAsked plays the role ChildEnv names and exits, when this
// process is a child (ChildCommand); otherwise it returns. RunMain calls
// it first; a TestMain with work before RunMain calls it before that work.
func RunChildIfAsked() {
	role := os.Getenv(ChildEnv)
	if role == "" {
		return
	}
	childrenMu.Lock()
	run, ok := children[role]
	roles := make([]string, 0, len(children))
	for r := range children {
		roles = append(roles, r)
	}
	childrenMu.Unlock()
	if !ok {
		sort.Strings(roles)
		fmt.Fprintf(os.Stderr, "%s=%q: this test binary plays no such child role; it plays %s\n", ChildEnv, role, strings.Join(roles, ", "))
		os.Exit(2)
	}
	os.Exit(run(os.Args[1:]))
}

// Teardown undoes a Setup after the tests. failed says whether they
// failed, so that it can print what explains the failure (a log); an
// error it returns fails the suite (a component that died meanwhile, say).
type Teardown func(failed bool) error

// Setup is what a suite starts before its tests (serve, fixtures, a test
// bed), on the shared control plane (nil when the suite has none). Its
// Teardown, when not nil, runs after the tests, even when Setup failed.
type Setup func(c *Cluster) (Teardown, error)

// Undo is the Teardown that calls stop.
func Undo(stop func() error) Teardown {
	return func(bool) error { return stop() }
}

// RunMain is every suite's TestMain. In a child process (ChildCommand) it
// plays the child's role instead. Otherwise it starts a control plane with
// opts into *env (none when env is nil: the tests start their own), then
// each setup in order, runs the tests, runs the teardowns in reverse
// order, stops the control plane and exits: 0 when the tests passed and
// every teardown returned nil; 1 otherwise, or when a start failed (naming
// what failed).
func RunMain(m *testing.M, opts Options, env **Cluster, setups ...Setup) {
	RunChildIfAsked()
	os.Exit(runMain(m, opts, env, setups))
}

func runMain(m *testing.M, opts Options, env **Cluster, setups []Setup) (code int) {
	var c *Cluster
	if env != nil {
		var err error
		if c, err = New(opts); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		*env = c
		defer func() {
			if err := c.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
			}
		}()
	}
	var teardowns []Teardown
	defer func() {
		for _, td := range teardowns {
			if err := td(code != 0); err != nil {
				fmt.Fprintln(os.Stderr, "after the tests:", err)
				code = 1
			}
		}
	}()
	for _, setup := range setups {
		td, err := setup(c)
		if td != nil {
			teardowns = append([]Teardown{td}, teardowns...)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "setting up the suite:", err)
			return 1
		}
	}
	return m.Run()
}

// Teardown stops serve; when the tests failed it first prints serve's log,
// which shows what serve did while a test waited in vain.
func (s *Serving) Teardown(failed bool) error {
	if failed {
		fmt.Fprintln(os.Stderr, "shepherd serve's log:\n"+s.Log())
	}
	return s.Stop()
}

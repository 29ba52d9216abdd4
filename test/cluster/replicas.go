package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shepherd-k8s/shepherd/test/testkit"
)

// Replica is a `shepherd serve` running in a child process of the test
// binary, with a webhook port, health and metrics addresses of its own.
type Replica struct {
	// Webhook is the host:port of its webhook server (/mutate, /validate),
	// serving the certificate of c.Env.WebhookInstallOptions.
	Webhook string
	// Health is the base URL of /healthz and /readyz.
	Health string
	// Metrics is the host:port of its metrics server.
	Metrics string

	cmd  *exec.Cmd
	log  *SyncBuffer
	done chan error
}

// Log is what the replica has written so far.
func (r *Replica) Log() string { return r.log.String() }

// StartReplica starts a replica (ServeArgs plus extra, on a free webhook
// port) and waits until its /readyz answers 200. The control plane must
// have been started with Options.Webhooks (for the serving certificate),
// and TestMain must be RunMain (or call RunChildIfAsked). The replica is stopped when the
// test ends; its log is printed if the test failed. The background audit
// is off unless extra turns it on (--audit-interval): the suites that start
// replicas time failovers and outages on a shared two-core machine, and a
// full audit pass at the start of every leadership term, over everything
// the suite left in the cluster, competes with the reconcilers they time
// (test/audit is the audit's own suite).
func (c *Cluster) StartReplica(t testing.TB, extra ...string) *Replica {
	t.Helper()
	webhook, health, metrics := FreeAddr(), FreeAddr(), FreeAddr()
	_, port, _ := net.SplitHostPort(webhook)
	args, err := c.ServeArgs(t.TempDir(), health, metrics, append([]string{"--webhook-port=" + port, "--audit-interval=0"}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	r := &Replica{Webhook: webhook, Health: "http://" + health, Metrics: metrics, log: &SyncBuffer{}, done: make(chan error, 1)}
	r.cmd = ChildCommand(context.Background(), ServeRole, args...)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("starting a replica: %v", err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Errorf("replica on %s: %v", r.Webhook, err)
		}
		if t.Failed() {
			t.Logf("replica on %s:\n%s", r.Webhook, r.Log())
		}
	})
	if err := r.waitReady(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *Replica) waitReady(within time.Duration) error {
	err := testkit.Poll(200*time.Millisecond, within, func() error {
		select {
		case err := <-r.done:
			r.done <- err
			return testkit.Stop(fmt.Errorf("replica exited before it was ready: %v", err))
		default:
		}
		return Healthy(r.Health + "/readyz")
	})
	if err != nil {
		return fmt.Errorf("replica was not ready: %w\n%s", err, r.Log())
	}
	return nil
}

// Stop ends the replica gracefully (SIGTERM), killing it after 30 s; a
// replica already gone is not an error.
func (r *Replica) Stop() error {
	select {
	case err := <-r.done: // gone already (Kill, or it exited)
		r.done <- err
		return nil
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.done:
		r.done <- err
		if ee, ok := err.(*exec.ExitError); ok && !ee.Exited() {
			return nil // ended by the signal
		}
		return err
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		err := <-r.done
		r.done <- err
		return fmt.Errorf("did not stop within 30s after SIGTERM")
	}
}

// Kill ends the replica at once (SIGKILL), as a lost node would: it does
// not release its leader-election Lease.
func (r *Replica) Kill() {
	_ = r.cmd.Process.Kill()
	err := <-r.done
	r.done <- err
}

// Terminate sends the replica SIGTERM, as the kubelet does when its pod is
// deleted, and returns at once; Wait collects the exit.
func (r *Replica) Terminate() error {
	return r.cmd.Process.Signal(syscall.SIGTERM)
}

// Wait waits up to within for the replica to exit and returns its exit
// code (-1 if a signal ended it).
func (r *Replica) Wait(within time.Duration) (int, error) {
	select {
	case err := <-r.done:
		r.done <- err
		return r.cmd.ProcessState.ExitCode(), nil
	case <-time.After(within):
		return 0, fmt.Errorf("replica on %s did not exit within %v", r.Webhook, within)
	}
}

// Exited reports whether the replica has exited, and how.
func (r *Replica) Exited() (bool, string) {
	select {
	case err := <-r.done:
		r.done <- err
		return true, r.cmd.ProcessState.String()
	default:
		return false, ""
	}
}

// MaxRSS is the replica's peak resident set size so far (VmHWM of
// /proc/PID/status), in bytes; 0 where /proc cannot tell.
func (r *Replica) MaxRSS() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

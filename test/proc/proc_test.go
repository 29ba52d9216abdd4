package proc

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestCPUCountsWorkDone(t *testing.T) {
	before, err := CPU(Self)
	if err != nil {
		t.Fatal(err)
	}
	// Spin past several clock ticks of CPU time.
	x := uint64(1)
	for start := time.Now(); time.Since(start) < 200*time.Millisecond; {
		for range 1000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	after, err := CPU(Self)
	if err != nil {
		t.Fatal(err)
	}
	if got := after - before; got < 50*time.Millisecond {
		t.Errorf("CPU grew by %s over 200 ms of spinning (x=%d), want at least 50ms", got, x)
	}
}

func TestMemoryReportsResidentSize(t *testing.T) {
	rss, peak, err := Memory(Self)
	if err != nil {
		t.Fatal(err)
	}
	if rss <= 0 || peak < rss {
		t.Errorf("Memory() = rss %.1f MiB, peak %.1f MiB; want 0 < rss <= peak", rss, peak)
	}
}

func TestChildrenFindsAChildByName(t *testing.T) {
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting sleep: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	got, err := Children("sleep", "no-such-command")
	if err != nil {
		t.Fatal(err)
	}
	if got["sleep"] != cmd.Process.Pid {
		t.Errorf("Children()[sleep] = %d, want %d", got["sleep"], cmd.Process.Pid)
	}
	if _, ok := got["no-such-command"]; ok {
		t.Errorf("Children() found no-such-command: %v", got)
	}
}

func TestMissingProcessIsAnError(t *testing.T) {
	if _, err := CPU(1 << 30); err == nil {
		t.Error("CPU of a pid that cannot exist: want an error")
	}
}

// Another process's CPU comes from /proc/<pid>/stat, in clock ticks: this
// process read that way agrees with getrusage to within a few ticks.
func TestCPUOfAPidAgreesWithSelf(t *testing.T) {
	self, err := CPU(Self)
	if err != nil {
		t.Fatal(err)
	}
	byPid, err := CPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d := byPid - self; d < -50*time.Millisecond || d > 50*time.Millisecond {
		t.Errorf("CPU(%d) = %s, CPU(Self) = %s: want them within 50ms", os.Getpid(), byPid, self)
	}
}

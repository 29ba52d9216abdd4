package perf

import (
	"testing"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// TestMain runs the benchmarks, which start their own control planes; in
// a child process it is the benchmark's empty webhook (startEmptyWebhook).
func TestMain(m *testing.M) {
	cluster.RegisterChild(emptyWebhookRole, runEmptyWebhook)
	cluster.RunMain(m, cluster.Options{}, nil)
}

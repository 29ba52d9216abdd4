// Package faults runs `shepherd serve` as an operator would — two replicas
// with leader election on, behind a round-robin proxy that stands in for
// the Service and routes only to replicas whose /readyz passes, against
// one real control plane whose webhook configurations (failurePolicy
// Fail) point at the proxy — and breaks things: a rolling restart under
// admission load, an apiserver outage, SIGKILL of the leader, SIGTERM of
// the leader with Events still queued, a client sending made-up kinds.
// Each test asserts the outcome (no failed admission, no replica exiting,
// enforcement resumed, nothing lost); bounds are asserted only where the
// bound is the behaviour, with slack for a small shared machine, and the
// figures measured are logged.
//
// test/replicas already covers exactly-once enforcement and Events through
// a SIGKILL mid-burst; test/hostile the memory bounds under abusive
// clients. This suite does not repeat them.
package faults

import (
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// timeout bounds the waits for what should take a few seconds: generous,
// the machine is small and shared.
const timeout = 90 * time.Second

// leaseName is `shepherd serve`'s default --leader-election-id.
const leaseName = "shepherd.shepherd.dev"

// Lease timings of the replicas: a 6 s Lease (15 s by default), so that
// takeovers fit the suite's time.
const (
	leaseDuration = 6 * time.Second
	renewDeadline = 4 * time.Second
	retryPeriod   = time.Second
)

// drainPeriod is the replicas' --shutdown-drain-period: above the proxy's
// readiness poll (proxyPoll), as the default of 10 s is above a cluster's
// endpoint propagation.
const drainPeriod = 3 * time.Second

var env *cluster.Cluster

func TestMain(m *testing.M) {
	cluster.RunMain(m, cluster.Options{
		CRDs: cluster.SeedCRDs,
		// The outage test stops and starts the apiserver.
		RestartableAPIServer: true,
		// Registers shepherd's webhooks at LocalServingHost:LocalServingPort,
		// where the proxy listens, and issues the certificate every
		// replica serves.
		Webhooks: envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(cluster.RepoRoot(), "deploy", "webhook")},
			LocalServingHost: "127.0.0.1",
		},
	}, &env)
}

// Package load holds shepherd's admission load benchmarks. They are
// Benchmarks, so `make test` never runs them; run them explicitly:
//
//	# in-process handler: decode → default → validate → encode, p50/p99
//	go test -run '^$' -bench Handler ./test/load/
//
//	# `shepherd serve` over TLS on loopback: 32 keep-alive clients, mixed kinds
//	KUBEBUILDER_ASSETS=$(./hack/build-controlplane.sh) \
//	  go test -run '^$' -bench TLSLoad -benchtime 1x -timeout 20m ./test/load/
//
//	# SHEPHERD_LOAD_RATE=0 for saturation (clients back to back)
//
// Each reports its figures with b.ReportMetric: admissions/s, latency
// percentiles, errors, and for the TLS run the server process's CPU and RSS.
// The handler benchmark reports the pair of webhook calls (mutate, then
// validate the defaulted object) and each call on its own. The figures are
// diagnostics, with no targets: shepherd's end-to-end cost is the
// apiserver's two webhook calls over TLS. The TLS run also reports
// the generator's own CPU and how late its pacing timer fired
// (generator-wake-p99-ms), which is kept out of the measured latency.
package load

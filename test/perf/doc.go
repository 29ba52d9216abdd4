// Package perf holds load benchmarks against a real kube-apiserver. They are
// Benchmarks, so `make test` (go test without -bench) never runs them; run
// one explicitly, e.g.
//
//	KUBEBUILDER_ASSETS=$(./hack/build-controlplane.sh) \
//	  go test -run '^$' -bench TrainJobDeadline -benchtime 1x -timeout 30m ./test/perf/
//
// Each benchmark runs its scenario once per invocation and reports its
// figures with b.ReportMetric.
//
// BenchmarkAdmission (`make bench-admission`) is the end-to-end cost of
// admission: dry-run creates of a PodCliqueSet through the apiserver with
// no policy, with shepherd's exported ValidatingAdmissionPolicies, with
// `shepherd serve` (built from this tree) behind its webhook configurations,
// and with an empty webhook registered the same way, one after the other on
// one control plane, and prints a table of latency, throughput and overhead
// over no policy. ADMISSION_N (default 2000) and ADMISSION_CLIENTS (default
// 32) size it; SHEPHERD_BASELINE_BIN=path/to/old/shepherd adds the same
// webhook run with another build, to compare two builds in one run.
package perf

// Package perf holds load benchmarks against a real kube-apiserver. They are
// Benchmarks, so `make test` (go test without -bench) never runs them; run
// one explicitly, e.g.
//
//	KUBEBUILDER_ASSETS=$(./hack/build-controlplane.sh) \
//	  go test -run '^$' -bench TrainJobDeadline -benchtime 1x -timeout 30m ./test/perf/
//
// Each benchmark runs its scenario once per invocation and reports its
// figures with b.ReportMetric.
package perf

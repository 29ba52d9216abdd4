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
// admission per mode — none, deploy/native's VAPs and MAPs alone, an empty
// webhook registered like shepherd's, `shepherd serve` in webhook mode and
// in native mode — interleaved in ADMISSION_ROUNDS rounds, for TrainJobs,
// PodCliqueSets and JobSets, dry-run and stored creates, from one client
// and from ADMISSION_CLIENTS; see its doc comment for the other knobs.
// BenchmarkAudit (`make bench-audit`) is the background audit at scale.
package perf

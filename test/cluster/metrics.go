package cluster

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metric sums, over the series of the named metric whose labels include
// want (all of them for an empty want), a counter's or gauge's value or a
// histogram's sample count, as the `shepherd serve` running in this
// process (Serve) registered them in controller-runtime's registry. A
// metric no series of has been recorded yet is 0.
func Metric(name string, want map[string]string) (float64, error) {
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		return 0, err
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			labels := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			if c := m.GetCounter(); c != nil {
				n += c.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				n += g.GetValue()
			}
			if h := m.GetHistogram(); h != nil {
				n += float64(h.GetSampleCount())
			}
		}
	}
	return n, nil
}

// MetricOf is Metric for a test, with the labels as name, value pairs; an
// error fails the test.
func MetricOf(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	n, err := Metric(name, want)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

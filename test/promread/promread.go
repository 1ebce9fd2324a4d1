// Package promread reads metric values out of a Prometheus registry in tests: the same families a scrape
// returns, without an HTTP round trip.
package promread

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Sum adds the values of family name's series whose labels include want: a counter's or gauge's value, a
// histogram's or summary's sample count. A family that does not exist (yet) sums to 0.
func Sum(g prometheus.Gatherer, name string, want map[string]string) float64 {
	mfs, _ := g.Gather()
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if matches(m, want) {
				sum += value(m)
			}
		}
	}
	return sum
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	case m.Summary != nil:
		return float64(m.GetSummary().GetSampleCount())
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// matches reports whether m carries every label of want with its value.
func matches(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

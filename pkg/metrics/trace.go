package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pepsi-dev/pepsi/pkg/trace/otlp"
)

// The pass spans of a dispatcher with TRACING on (pkg/trace/otlp): those
// taken into a batch for export, and those dropped because
// export could not keep up.
var (
	spansDropped = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "pepsi_trace_spans_dropped_total",
		Help: "Pass spans dropped because their export could not keep up (TRACING on: a slow or unreachable collector).",
	}, func() float64 { return float64(otlp.Dropped()) })
	spansExported = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "pepsi_trace_spans_total",
		Help: "Pass spans taken into a batch for export over OTLP (TRACING on).",
	}, func() float64 { return float64(otlp.Handed()) })
)

package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pepsi-dev/pepsi/pkg/dispatch"
)

// ObserverOptions configures an Observer.
type ObserverOptions struct {
	// Stages are the configured stages: their series exist, as zeros,
	// before anything happens to them.
	Stages []string
	// Only: Stages are a dispatcher's stage set, and pepsi_queue_depth
	// carries them alone (not every stage found in the queue): several
	// dispatchers share the database, each reporting its own stages.
	Only bool
	// Source is the database to count the queue in; nil: no
	// pepsi_queue_depth.
	Source *Source
	// MaxAge is how long a count of the queue is reused; 0 means
	// DefaultMaxAge, a negative value counts on every scrape.
	MaxAge  time.Duration
	Version string       // for pepsi_build_info
	Log     *slog.Logger // count failures; nil: slog.Default()
}

// latencyBuckets are the bounds of pepsi_dispatch_latency_seconds: from a
// few milliseconds (an idle pipeline) to an hour (a queue backed up).
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// results are the values of the result label, in a fixed order.
var results = []dispatch.Result{dispatch.ResultOK, dispatch.ResultFailed, dispatch.ResultTimeout, dispatch.ResultCrash, dispatch.ResultProtocol,
	dispatch.ResultNotRun}

// reasons are the values of the reason label known in advance: their
// series exist, as zeros, from the first scrape ("error_" and a SQLSTATE
// come when they happen).
var reasons = []string{dispatch.ReasonNetwork, dispatch.ReasonClosed, dispatch.ReasonServerShutdown, dispatch.ReasonReadOnly}

// Observer is the dispatcher's metrics: a dispatch.Observer that counts
// into a registry of its own, which Handler serves.
type Observer struct {
	reg     *prometheus.Registry
	healthy atomic.Bool

	handed        *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	results       *prometheus.CounterVec
	busy          *prometheus.CounterVec
	workers       *prometheus.GaugeVec
	inflight      *prometheus.GaugeVec
	starts        *prometheus.CounterVec
	startFailures *prometheus.CounterVec
	stderrLines   *prometheus.CounterVec
	stderrBytes   *prometheus.CounterVec
	reconnects    *prometheus.CounterVec
	retries       *prometheus.CounterVec
	orphans       prometheus.Counter
	health        prometheus.Gauge

	// known holds the series of the configured stages, resolved once: the
	// observer's methods run on the dispatcher's loop, once per message.
	// It is never written after New; other stages (a fused stage that is
	// not configured) go through extra.
	known map[string]*stageSeries
	mu    sync.Mutex
	extra map[string]*stageSeries
}

// stageSeries are one stage's series.
type stageSeries struct {
	handed        prometheus.Counter
	latency       prometheus.Observer
	results       map[dispatch.Result]prometheus.Counter
	busy          prometheus.Counter
	workers       prometheus.Gauge
	inflight      prometheus.Gauge
	starts        prometheus.Counter
	startFailures prometheus.Counter
	stderrLines   prometheus.Counter
	stderrBytes   prometheus.Counter
}

var _ dispatch.Observer = (*Observer)(nil)

// NewObserver returns the metrics of a dispatcher; it is unhealthy until
// the dispatcher reports otherwise.
func NewObserver(opts ObserverOptions) *Observer {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.MaxAge == 0 {
		opts.MaxAge = DefaultMaxAge
	}
	stage := []string{"stage"}
	m := &Observer{
		reg: prometheus.NewRegistry(),
		handed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pepsi_dispatch_total",
			Help: "Messages handed to a worker of the stage.",
		}, stage),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pepsi_dispatch_latency_seconds",
			Help:    "How long a message handed to a worker of the stage had been pending.",
			Buckets: latencyBuckets,
		}, stage),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pepsi_stage_results_total",
			Help: "Passes of the stage by how they ended: ok (answered 0), failed (answered non-zero), timeout (unanswered within MAX_RUNTIME), crash (the worker died), protocol (the worker broke the protocol); and not_run, the answers 75 (not run: no pass was made, no attempt counted).",
		}, []string{"stage", "result"}),
		busy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pepsi_stage_busy_seconds_total",
			Help: "Seconds the stage's workers spent on messages, from reaching the head of a worker's pipeline to the pass's end, whatever the result.",
		}, stage),
		workers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pepsi_workers",
			Help: "Worker processes of the stage.",
		}, stage),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pepsi_inflight",
			Help: "Messages handed to workers of the stage and not answered yet.",
		}, stage),
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pepsi_worker_starts_total",
			Help: "Worker processes of the stage started.",
		}, stage),
		startFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pepsi_worker_start_failures_total",
			Help: "Times the stage's PROGRAM could not be started.",
		}, stage),
		stderrLines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pepsi_worker_stderr_dropped_lines_total",
			Help: "Lines the stage's workers wrote to stderr that were not logged: over the rate at which a worker's stderr is relayed.",
		}, stage),
		stderrBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pepsi_worker_stderr_cut_bytes_total",
			Help: "Bytes cut off the ends of the stage's workers' stderr lines that were longer than a logged line may be.",
		}, stage),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pepsi_listener_reconnects_total",
			Help: "Times the listener session (the one that holds the single-dispatcher lock and LISTENs) failed and was re-made, by reason.",
		}, []string{"reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pepsi_queue_retries_total",
			Help: "Queue statements (claims, settles, sweeps, statistics flushes) that failed and were retried after a backoff, by reason.",
		}, []string{"reason"}),
		orphans: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pepsi_orphans_rescued_total",
			Help: "Running messages no worker held, put back to pending (at start, after a reconnect, by the orphan sweep).",
		}),
		health: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pepsi_dispatcher_healthy",
			Help: "1 while this dispatcher holds the single-dispatcher lock and its listener is connected, else 0 (a standby, a reconnect, a stop).",
		}),
		known: make(map[string]*stageSeries, len(opts.Stages)),
		extra: make(map[string]*stageSeries),
	}
	for _, s := range opts.Stages {
		m.known[s] = m.newSeries(s)
	}
	for _, r := range reasons {
		m.reconnects.WithLabelValues(r)
		m.retries.WithLabelValues(r)
	}
	m.reg.MustRegister(m.handed, m.latency, m.results, m.busy, m.workers, m.inflight,
		m.starts, m.startFailures, m.stderrLines, m.stderrBytes, m.reconnects, m.retries, m.orphans, m.health,
		buildInfo(opts.Version), spansDropped, spansExported,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if opts.Source != nil {
		maxAge := max(opts.MaxAge, 0)
		m.reg.MustRegister(newDepthCollector(opts.Source, opts.Stages, opts.Only, maxAge, &episode{log: opts.Log, what: "counting the queue"}))
	}
	return m
}

// buildInfo is pepsi_build_info{version}, always 1.
func buildInfo(version string) prometheus.Collector {
	if version == "" {
		version = "unknown"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "pepsi_build_info",
		Help:        "Always 1; the version label is the running pepsi's.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	g.Set(1)
	return g
}

func (m *Observer) newSeries(stage string) *stageSeries {
	s := &stageSeries{
		handed:        m.handed.WithLabelValues(stage),
		latency:       m.latency.WithLabelValues(stage),
		results:       make(map[dispatch.Result]prometheus.Counter, len(results)),
		busy:          m.busy.WithLabelValues(stage),
		workers:       m.workers.WithLabelValues(stage),
		inflight:      m.inflight.WithLabelValues(stage),
		starts:        m.starts.WithLabelValues(stage),
		startFailures: m.startFailures.WithLabelValues(stage),
		stderrLines:   m.stderrLines.WithLabelValues(stage),
		stderrBytes:   m.stderrBytes.WithLabelValues(stage),
	}
	for _, r := range results {
		s.results[r] = m.results.WithLabelValues(stage, string(r))
	}
	return s
}

// series returns stage's series.
func (m *Observer) series(stage string) *stageSeries {
	if s := m.known[stage]; s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.extra[stage]
	if s == nil {
		s = m.newSeries(stage)
		m.extra[stage] = s
	}
	return s
}

// Registry is where the metrics are registered.
func (m *Observer) Registry() *prometheus.Registry { return m.reg }

// Healthy reports what the dispatcher last said of its health.
func (m *Observer) Healthy() bool { return m.healthy.Load() }

// Handler serves /metrics and /healthz: 200 while the dispatcher holds
// the lock and its listener is connected, 503 otherwise.
func (m *Observer) Handler() http.Handler {
	return Handler(m.reg, func(context.Context) error {
		if !m.healthy.Load() {
			return errUnhealthy
		}
		return nil
	})
}

var errUnhealthy = errors.New("this dispatcher does not hold the lock with a connected listener")

// Handed implements dispatch.Observer.
func (m *Observer) Handed(stage string, waited time.Duration) {
	s := m.series(stage)
	s.handed.Inc()
	s.latency.Observe(waited.Seconds())
}

// Passed implements dispatch.Observer.
func (m *Observer) Passed(stage string, result dispatch.Result, busy time.Duration) {
	s := m.series(stage)
	c := s.results[result]
	if c == nil {
		c = m.results.WithLabelValues(stage, string(result))
	}
	c.Inc()
	s.busy.Add(max(busy, 0).Seconds())
}

// WorkerStarted implements dispatch.Observer.
func (m *Observer) WorkerStarted(stage string) { m.series(stage).starts.Inc() }

// WorkerStartFailed implements dispatch.Observer.
func (m *Observer) WorkerStartFailed(stage string) { m.series(stage).startFailures.Inc() }

// Pool implements dispatch.Observer.
func (m *Observer) Pool(stage string, workers, inflight int) {
	s := m.series(stage)
	s.workers.Set(float64(workers))
	s.inflight.Set(float64(inflight))
}

// ListenerReconnect implements dispatch.Observer.
func (m *Observer) ListenerReconnect(reason string) { m.reconnects.WithLabelValues(reason).Inc() }

// QueueRetry implements dispatch.Observer.
func (m *Observer) QueueRetry(reason string) { m.retries.WithLabelValues(reason).Inc() }

// StderrDropped implements dispatch.Observer.
func (m *Observer) StderrDropped(stage string, lines, bytes int64) {
	s := m.series(stage)
	if lines > 0 {
		s.stderrLines.Add(float64(lines))
	}
	if bytes > 0 {
		s.stderrBytes.Add(float64(bytes))
	}
}

// OrphansRescued implements dispatch.Observer.
func (m *Observer) OrphansRescued(n int64) { m.orphans.Add(float64(n)) }

// Health implements dispatch.Observer.
func (m *Observer) Health(ok bool) {
	m.healthy.Store(ok)
	if ok {
		m.health.Set(1)
	} else {
		m.health.Set(0)
	}
}

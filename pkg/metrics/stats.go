package metrics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The standalone exporter (pepsi httpd) and pepsi stats --format
// prometheus (WriteStatsText, for the node_exporter textfile collector)
// are the same collector, so that dashboards and alerts work with either.
// When a column is added to a statistics table it is picked up from the
// struct (its json tag names the series); its help text goes here.
var (
	stageHelp = map[string]string{
		"processed":    "Passes of the stage that answered success, fused passes included.",
		"failed":       "Passes of the stage that answered non-zero or broke the protocol.",
		"timeouts":     "Workers of the stage killed because a message went unanswered for MAX_RUNTIME.",
		"crashes":      "Workers of the stage that exited with messages outstanding.",
		"not_run":      "Answers 75 of the stage (not run: its database unreachable): messages put back with no attempt counted.",
		"cancelled":    "Passes of the stage whose message was cancelled while they ran; their outcome was ignored.",
		"busy_seconds": "Seconds the stage's workers spent on messages.",
	}
	dispatchHelp = map[string]string{
		"claimed":      "Messages the dispatcher moved from pending to running.",
		"stage_passes": "Status lines received, fused stages counted once each.",
		"requeued":     "Advanced messages put back to pending for their next stage.",
		"done":         "Messages finished.",
		"failed":       "Messages that ended failed.",
		"paused":       "Passes that paused their message for a later retry.",
		"resumed":      "Paused messages that fell due and went back to pending.",
		"reset":        "Claimed messages put back to pending unrun (shutdown, crashes, timeouts).",
		"orphans":      "Running messages no worker held, reset to pending.",
		"expired":      "Done messages deleted by the retention sweep.",
		"cancelled":    "Passes whose message was cancelled while they ran (pepsi queue cancel --force); their outcome was ignored.",
		"joined":       "Parents released at their join stage: every child had ended.",
		"join_failed":  "Parents failed at their join stage because a child failed (JOIN_POLICY fail).",
	}
)

// column is one counter column of a statistics table: an int64 or
// float64 field of queue.StageStats or queue.DispatchStats.
type column struct {
	name  string // its json name
	index int
	desc  *prometheus.Desc
}

func (c *column) value(v any) float64 {
	x := reflect.ValueOf(v).Elem().Field(c.index)
	if x.Kind() == reflect.Float64 {
		return x.Float()
	}
	return float64(x.Int())
}

// columns lists the counters of a stats struct, named prefix+NAME+"_total".
func columns(t reflect.Type, prefix, table string, help map[string]string, labels []string) []column {
	var out []column
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || (f.Type.Kind() != reflect.Int64 && f.Type.Kind() != reflect.Float64) {
			continue
		}
		h, ok := help[name]
		if !ok {
			h = "Column " + name + " of " + table + "."
		}
		out = append(out, column{name, i, prometheus.NewDesc(prefix+name+"_total", h, labels, nil)})
	}
	return out
}

// statsSnapshot is what one scrape of the exporter reads.
type statsSnapshot struct {
	stages   []queue.StageStats
	dispatch queue.DispatchStats
	queue    queueCounts
}

func readStats(ctx context.Context, src *Source, stages []string) (*statsSnapshot, error) {
	db, err := src.DB(ctx)
	if err != nil {
		return nil, err
	}
	s := &statsSnapshot{}
	if s.stages, s.dispatch, err = db.ReadStats(ctx); err != nil {
		return nil, err
	}
	if s.queue, err = readCounts(ctx, src, stages); err != nil {
		return nil, err
	}
	return s, nil
}

// StatsOptions configures Stats.
type StatsOptions struct {
	Source *Source
	// Stages are the configured stages: their series exist, as zeros,
	// before they have ever run.
	Stages []string
	// MaxAge is how long a read of the tables is reused; 0 means
	// DefaultMaxAge, a negative value reads on every scrape.
	MaxAge  time.Duration
	Version string
	Log     *slog.Logger
}

// Stats is the standalone exporter: pepsi.stage_stats, pepsi.dispatch_stats,
// the queue's depth and whether a dispatcher runs, read from the database
// when scraped (at most once per MaxAge). When the database cannot be read,
// the scrape fails (HTTP 500, so Prometheus's up is 0): the exporter has
// nothing else to say.
type Stats struct {
	src      *Source
	reg      *prometheus.Registry
	stages   []string
	snap     *cache[*statsSnapshot]
	log      *episode
	stageCol []column
	dispCol  []column
	updated  *prometheus.Desc
	messages *prometheus.Desc
	oldest   *prometheus.Desc
	paused   *prometheus.Desc
	parents  *prometheus.Desc // pepsi_queue_waiting_parents
	children *prometheus.Desc // pepsi_queue_open_children
	running  *prometheus.Desc
}

// NewStats returns the exporter, with build, Go and process metrics.
func NewStats(opts StatsOptions) *Stats {
	s := newStats(opts)
	s.reg.MustRegister(s, buildInfo(opts.Version),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return s
}

// WriteStatsText reads the statistics and the queue's depth now and writes
// them to w in the Prometheus text format: the exporter's families without
// the build, Go and process metrics of a short-lived command, and without
// timestamps, which the node_exporter textfile collector refuses.
func WriteStatsText(w io.Writer, opts StatsOptions) error {
	opts.MaxAge = time.Hour // one read, below, that the collector reuses
	s := newStats(opts)
	if _, err := s.read(); err != nil {
		return err // as it is, not wrapped in the registry's multi-line error
	}
	s.reg.MustRegister(s)
	mfs, err := s.reg.Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return err
		}
	}
	return nil
}

func newStats(opts StatsOptions) *Stats {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.MaxAge == 0 {
		opts.MaxAge = DefaultMaxAge
	}
	src := opts.Source
	s := &Stats{
		src:      src,
		reg:      prometheus.NewRegistry(),
		stages:   opts.Stages,
		snap:     &cache[*statsSnapshot]{maxAge: max(opts.MaxAge, 0), read: func(ctx context.Context) (*statsSnapshot, error) { return readStats(ctx, src, opts.Stages) }},
		log:      &episode{log: opts.Log, what: "reading the statistics"},
		stageCol: columns(reflect.TypeFor[queue.StageStats](), "pepsi_stage_", "pepsi.stage_stats", stageHelp, []string{"stage"}),
		dispCol:  columns(reflect.TypeFor[queue.DispatchStats](), "pepsi_dispatch_", "pepsi.dispatch_stats", dispatchHelp, nil),
		updated: prometheus.NewDesc("pepsi_dispatch_stats_updated_timestamp_seconds",
			"When the dispatcher last wrote its statistics, in seconds since the epoch.", nil, nil),
		messages: prometheus.NewDesc("pepsi_queue_messages", "Messages in the queue by stage and status.", []string{"stage", "status"}, nil),
		oldest: prometheus.NewDesc("pepsi_queue_oldest_pending_age_seconds",
			"How long the oldest pending message of the stage has waited, in seconds; 0 when none is pending.", []string{"stage"}, nil),
		paused:  newPausedDesc(),
		running: prometheus.NewDesc("pepsi_dispatcher_running", "1 when a dispatcher runs (it holds the single-dispatcher lock, or a stage set's locks), else 0.", nil, nil),
	}
	s.parents, s.children = joinDescs()
	return s
}

// Registry is where the exporter's metrics are registered.
func (s *Stats) Registry() *prometheus.Registry { return s.reg }

// Handler serves /metrics and /healthz: 200 while the database answers.
func (s *Stats) Handler() http.Handler {
	// A failed read fails the scrape: see Stats.
	return handler(s.reg, s.src.Ping, promhttp.HTTPErrorOnError)
}

// read returns the snapshot for this scrape.
func (s *Stats) read() (*statsSnapshot, error) {
	ctx, cancel := context.WithTimeout(context.Background(), countTimeout)
	defer cancel()
	snap, err := s.snap.get(ctx)
	if err != nil {
		s.log.failed(err)
		return nil, err
	}
	s.log.ok()
	return snap, nil
}

// Describe implements prometheus.Collector.
func (s *Stats) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range s.stageCol {
		ch <- c.desc
	}
	for _, c := range s.dispCol {
		ch <- c.desc
	}
	ch <- s.updated
	ch <- s.messages
	ch <- s.oldest
	ch <- s.paused
	ch <- s.parents
	ch <- s.children
	ch <- s.running
}

// Collect implements prometheus.Collector. Every stage known (configured,
// with statistics, or with messages) gets every per-stage series.
func (s *Stats) Collect(ch chan<- prometheus.Metric) {
	snap, err := s.read()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(s.running, fmt.Errorf("reading the statistics: %w", err))
		return
	}
	byStage := make(map[string]*queue.StageStats, len(snap.stages))
	names := make([]string, 0, len(snap.stages))
	for i := range snap.stages {
		byStage[snap.stages[i].Stage] = &snap.stages[i]
		names = append(names, snap.stages[i].Stage)
	}
	stages := stageNames(s.stages, names, snap.queue.stages())
	zero := &queue.StageStats{}
	for _, c := range s.stageCol {
		for _, st := range stages {
			row := byStage[st]
			if row == nil {
				row = zero
			}
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, c.value(row), st)
		}
	}
	for _, c := range s.dispCol {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, c.value(&snap.dispatch))
	}
	ch <- prometheus.MustNewConstMetric(s.updated, prometheus.GaugeValue, float64(snap.dispatch.UpdatedAt.UnixMilli())/1000)
	by := snap.queue.byKey()
	for _, st := range stages {
		for _, status := range queue.Statuses {
			ch <- prometheus.MustNewConstMetric(s.messages, prometheus.GaugeValue, float64(by[depthKey{st, status}].N), st, string(status))
		}
	}
	for _, st := range stages {
		ch <- prometheus.MustNewConstMetric(s.oldest, prometheus.GaugeValue, snap.queue.oldestAge(by[depthKey{st, queue.Pending}]), st)
	}
	for _, st := range stages {
		ch <- prometheus.MustNewConstMetric(s.paused, prometheus.GaugeValue, snap.queue.pausedValue(st), st)
	}
	snap.queue.collectJoins(ch, s.parents, s.children, stages)
	ch <- prometheus.MustNewConstMetric(s.running, prometheus.GaugeValue, gauge(snap.queue.health.DispatcherRuns()))
}

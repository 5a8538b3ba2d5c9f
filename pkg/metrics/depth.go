package metrics

import (
	"context"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// queueCounts is one count of the queue: the health model (the messages
// per stage and status but done, the paused stages, whether a dispatcher
// runs, the database's clock) and the done messages per stage.
type queueCounts struct {
	health *admin.Health
	done   map[string]int64
	joins  map[string]admin.JoinCount // the waiting parents by join stage
}

// readCounts reads the health model of stages and counts the done messages
// through src.
func readCounts(ctx context.Context, src *Source, stages []string) (queueCounts, error) {
	db, err := src.DB(ctx)
	if err != nil {
		return queueCounts{}, err
	}
	var q queueCounts
	if q.health, err = db.Health(ctx, admin.HealthConfig{Stages: stages}); err != nil {
		return q, err
	}
	if q.done, err = db.DoneCounts(ctx); err != nil {
		return q, err
	}
	js, err := db.Joins(ctx)
	q.joins = make(map[string]admin.JoinCount, len(js))
	for _, j := range js {
		q.joins[j.Stage] = j
	}
	return q, err
}

// joinDescs describe pepsi_queue_waiting_parents and
// pepsi_queue_open_children, which both collectors give.
func joinDescs() (parents, children *prometheus.Desc) {
	return prometheus.NewDesc("pepsi_queue_waiting_parents",
			"Parents waiting at the join stage until their children have ended (status waiting).",
			[]string{"stage"}, nil),
		prometheus.NewDesc("pepsi_queue_open_children",
			"Children not yet ended (live) of the parents waiting at the join stage.",
			[]string{"stage"}, nil)
}

// collectJoins sends the join gauges of stages.
func (q *queueCounts) collectJoins(ch chan<- prometheus.Metric, parents, children *prometheus.Desc, stages []string) {
	for _, st := range stages {
		j := q.joins[st]
		ch <- prometheus.MustNewConstMetric(parents, prometheus.GaugeValue, float64(j.Parents), st)
		ch <- prometheus.MustNewConstMetric(children, prometheus.GaugeValue, float64(j.Children), st)
	}
}

// newPausedDesc describes pepsi_stage_paused, which both collectors give.
func newPausedDesc() *prometheus.Desc {
	return prometheus.NewDesc("pepsi_stage_paused",
		"1 while the stage is paused (pepsi queue pause): handed no new message; else 0.",
		[]string{"stage"}, nil)
}

// pausedValue is pepsi_stage_paused of stage.
func (q *queueCounts) pausedValue(stage string) float64 { return gauge(q.health.StagePaused(stage)) }

// gauge is 1 for true, 0 for false.
func gauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// depthKey is one stage × status.
type depthKey struct {
	stage  string
	status queue.Status
}

// byKey indexes the counts, done included (Oldest is kept for the others).
func (q *queueCounts) byKey() map[depthKey]admin.Count {
	m := make(map[depthKey]admin.Count, len(q.health.Live)+len(q.done))
	for _, c := range q.health.Live {
		k := depthKey{c.Stage, c.Status}
		x, seen := m[k]
		if !seen || c.Oldest.Before(x.Oldest) {
			x.Oldest = c.Oldest
		}
		x.Stage, x.Status, x.N = c.Stage, c.Status, x.N+c.N
		m[k] = x
	}
	for s, n := range q.done {
		m[depthKey{s, queue.Done}] = admin.Count{Stage: s, Status: queue.Done, N: n}
	}
	return m
}

// oldestAge is how long the oldest message of c has been unchanged, in
// seconds; 0 for none.
func (q *queueCounts) oldestAge(c admin.Count) float64 {
	if c.N == 0 {
		return 0
	}
	return max(q.health.Now.Sub(c.Oldest), 0).Seconds()
}

// stageNames returns the union of names and the stages of counts, sorted.
func stageNames(names []string, more ...[]string) []string {
	out := slices.Clone(names)
	for _, m := range more {
		out = append(out, m...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (q *queueCounts) stages() []string {
	out := make([]string, 0, len(q.health.Live)+len(q.done)+len(q.health.Paused))
	for _, c := range q.health.Live {
		out = append(out, c.Stage)
	}
	for s := range q.done {
		out = append(out, s)
	}
	for _, p := range q.health.Paused {
		out = append(out, p.Stage)
	}
	for s := range q.joins {
		out = append(out, s)
	}
	return out
}

// depthCollector is the dispatcher's view of the queue: pepsi_queue_depth,
// pepsi_queue_oldest_pending_age_seconds and pepsi_stage_paused, counted
// on scrape (at most once per MaxAge), for every stage configured or with
// messages and every status, zeros included.
type depthCollector struct {
	stages   []string
	only     bool // the stages alone, not every one in the queue
	counts   *cache[queueCounts]
	log      *episode
	depth    *prometheus.Desc
	oldest   *prometheus.Desc
	paused   *prometheus.Desc
	parents  *prometheus.Desc
	children *prometheus.Desc
	failures prometheus.Counter
}

func newDepthCollector(src *Source, stages []string, only bool, maxAge time.Duration, log *episode) *depthCollector {
	parents, children := joinDescs()
	return &depthCollector{
		parents:  parents,
		children: children,
		stages:   stages,
		only:     only,
		counts:   &cache[queueCounts]{maxAge: maxAge, read: func(ctx context.Context) (queueCounts, error) { return readCounts(ctx, src, stages) }},
		log:      log,
		depth: prometheus.NewDesc("pepsi_queue_depth",
			"Messages in the queue by stage and status, counted at most every few seconds when scraped.",
			[]string{"stage", "status"}, nil),
		oldest: prometheus.NewDesc("pepsi_queue_oldest_pending_age_seconds",
			"How long the oldest pending message of the stage has waited, in seconds; 0 when none is pending.",
			[]string{"stage"}, nil),
		paused: newPausedDesc(),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pepsi_queue_count_failures_total",
			Help: "Scrapes whose count of the queue failed (its series were left out of them).",
		}),
	}
}

func (d *depthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- d.depth
	ch <- d.oldest
	ch <- d.paused
	ch <- d.parents
	ch <- d.children
	d.failures.Describe(ch)
}

func (d *depthCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), countTimeout)
	defer cancel()
	q, err := d.counts.get(ctx)
	if err != nil {
		d.failures.Inc()
		d.log.failed(err)
		d.failures.Collect(ch)
		return
	}
	d.log.ok()
	d.failures.Collect(ch)
	by := q.byKey()
	names := d.stages
	if !d.only {
		names = stageNames(d.stages, q.stages())
	}
	for _, stage := range names {
		for _, st := range queue.Statuses {
			ch <- prometheus.MustNewConstMetric(d.depth, prometheus.GaugeValue, float64(by[depthKey{stage, st}].N), stage, string(st))
		}
		ch <- prometheus.MustNewConstMetric(d.oldest, prometheus.GaugeValue, q.oldestAge(by[depthKey{stage, queue.Pending}]), stage)
		ch <- prometheus.MustNewConstMetric(d.paused, prometheus.GaugeValue, q.pausedValue(stage), stage)
	}
	q.collectJoins(ch, d.parents, d.children, names)
}

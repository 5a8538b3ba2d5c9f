package dashboard

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/config"
)

// Defaults of Options.
const (
	DefaultSampleEvery = 5 * time.Second  // how often the statistics are sampled
	DefaultWindow      = 15 * time.Minute // how far back the throughput charts go
	DefaultRefresh     = 10               // seconds between reloads of the overview
)

// sampleTimeout bounds one sample: the counts read whole partitions.
const sampleTimeout = 30 * time.Second

// pageTimeout bounds the statements of one page.
const pageTimeout = 30 * time.Second

// Options configures a Dashboard.
type Options struct {
	// DB returns the database, connecting if need be (metrics.Source.DB).
	DB func(context.Context) (*admin.DB, error)
	// Stages are the configured stages, in pipeline order: they are listed
	// first, and even when they have no messages.
	Stages []string
	// Schedules are the [schedule-NAME] sections, for the schedules page,
	// and PollInterval the dispatchers' POLL_INTERVAL (how late a slot may
	// be before it is overdue; default config.DefaultPollInterval).
	Schedules    []config.Schedule
	PollInterval time.Duration
	// Auth says who may act; nil: nobody (a read-only dashboard).
	Auth *Auth
	// TraceURL is [pepsi-httpd] TRACE_URL: a trace UI's address with
	// {trace_id}, where the message page links its trace id; "": no link.
	TraceURL string
	// Metrics, when set, serves /metrics and /healthz beside the dashboard.
	Metrics http.Handler
	// SampleEvery is how often the statistics are sampled for the
	// throughput charts (default DefaultSampleEvery); Window how far back
	// the charts go (default DefaultWindow).
	SampleEvery time.Duration
	Window      time.Duration
	// StatsInterval is the dispatchers' STATS_INTERVAL: the overview warns
	// of stages whose statistics of the last two say they answered mostly
	// 75 (default config.DefaultStatsInterval).
	StatsInterval time.Duration
	// Refresh is how often the overview reloads itself, in seconds (the
	// lists, only when asked to with ?refresh=N): 0 means DefaultRefresh,
	// a negative value never unless asked to.
	Refresh int
	Version string       // shown in the footer
	Log     *slog.Logger // actions and failures; nil: slog.Default()
}

// Dashboard is the web dashboard: its Handler serves the pages, and Run
// samples the statistics for the throughput charts.
type Dashboard struct {
	opts    Options
	log     *slog.Logger
	pages   *pages
	samples *sampler
	counts  *countCache
	// countWait is how long a page waits for a count (countWait; 0: until
	// it is in).
	countWait time.Duration
	standbys  standbys
	results   results
	confirms  confirmations
	sampling  atomic.Bool  // Run runs
	viewed    atomic.Int64 // when a page was last asked for (Unix ns)
	// historyFailing: the charts' history could not be read or written
	// (logged once until it can).
	historyFailing bool
}

// New returns a dashboard; Run must run for its charts to have data.
func New(opts Options) *Dashboard {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.SampleEvery <= 0 {
		opts.SampleEvery = DefaultSampleEvery
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.StatsInterval <= 0 {
		opts.StatsInterval = config.DefaultStatsInterval
	}
	if opts.Refresh == 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = config.DefaultPollInterval
	}
	return &Dashboard{
		opts:    opts,
		log:     opts.Log,
		pages:   loadPages(),
		samples: newSampler(opts.Window, opts.SampleEvery),
		counts:  newCountCache(opts.Window),

		countWait: countWait,
	}
}

// Run samples the statistics, counts the queue and notes the dispatchers'
// sessions every SampleEvery until ctx ends. A failure is logged once, and
// once more when sampling works again.
func (d *Dashboard) Run(ctx context.Context) {
	d.sampling.Store(true)
	defer d.sampling.Store(false)
	tick := time.NewTicker(d.opts.SampleEvery)
	defer tick.Stop()
	failing := false
	for {
		err := d.sample(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			d.log.Warn("dashboard: sampling failed; the throughput charts and the backlog's trend have a gap", "err", err)
		case err == nil && failing:
			d.log.Info("dashboard: sampling works again")
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sample takes one sample: the statistics, the counts, the sessions.
func (d *Dashboard) sample(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(d.opts.SampleEvery, sampleTimeout))
	defer cancel()
	db, err := d.opts.DB(ctx)
	if err != nil {
		return err
	}
	errHistory := d.samples.restore(ctx, db, time.Now())
	stages, at, errStats := d.samples.take(ctx, db)
	if errStats == nil && errHistory == nil {
		errHistory = d.samples.keep(ctx, db, at, stages)
	}
	if ctx.Err() == nil {
		d.historyFailed(errHistory)
	}
	var errCounts error
	if d.watched(time.Now()) {
		errCounts = d.counts.refresh(ctx, db)
	}
	owners, errSessions := db.DispatcherSessions(ctx, d.sessionStages(d.counts.latest()))
	if errSessions == nil {
		d.standbys.note(owners, time.Now())
	}
	return errors.Join(errStats, errCounts, errSessions)
}

// viewerGone is how long after the last page asked for the sampler goes on
// counting the queue: as long as the backlog's trend looks back.
const viewerGone = trendSpan

// watched says whether someone asked for a page within viewerGone of now.
// The sampler counts the queue only then: a count reads every row of the
// statuses counted, which an httpd nobody looks at would pay for every
// SampleEvery; the first page after counts itself.
func (d *Dashboard) watched(now time.Time) bool {
	return now.Sub(time.Unix(0, d.viewed.Load())) < viewerGone
}

// historyFailed logs the first of a run of failures to read or write the
// charts' history (nil: it worked), and when it works again; it does not
// fail the sample: the charts go on from memory.
func (d *Dashboard) historyFailed(err error) {
	switch {
	case err != nil && !d.historyFailing:
		d.log.Warn("dashboard: the throughput charts' history cannot be kept in pepsi.throughput (is the schema migrated?); the charts start empty after a restart", "err", err)
	case err == nil && d.historyFailing:
		d.log.Info("dashboard: the throughput charts' history is kept again")
	}
	d.historyFailing = err != nil
}

// pageCounts returns the counts a page shows: while the sampler runs, it
// counts every SampleEvery (done messages every doneMaxAge), and a page
// counts only when it has not, for a while, waiting countWait at most (the
// counts may lack a part, see queueCounts).
func (d *Dashboard) pageCounts(ctx context.Context, db *admin.DB) (queueCounts, error) {
	if d.sampling.Load() {
		return d.counts.count(ctx, db, 2*d.opts.SampleEvery, doneMaxAge+2*d.opts.SampleEvery, d.countWait)
	}
	return d.counts.count(ctx, db, min(d.opts.SampleEvery, 2*time.Second), doneMaxAge, d.countWait)
}

// sessionStages is the stages to ask the dispatchers' sessions about: the
// overview's, and those running messages were handed out at.
func (d *Dashboard) sessionStages(c queueCounts) []string {
	out := d.stageOrder(c)
	for _, x := range c.live {
		if x.HandedAt != "" && !slices.Contains(out, x.HandedAt) {
			out = append(out, x.HandedAt)
		}
	}
	return out
}

// stageOrder is the stages the overview lists: the configured ones in
// pipeline order, then the others with messages or statistics, by name.
func (d *Dashboard) stageOrder(c queueCounts) []string {
	seen := map[string]bool{}
	for _, s := range d.opts.Stages {
		seen[s] = true
	}
	var others []string
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			others = append(others, s)
		}
	}
	for _, x := range c.live {
		add(x.Stage)
	}
	for s := range c.done {
		add(s)
	}
	for _, s := range d.samples.stages() {
		add(s)
	}
	slices.Sort(others)
	return slices.Concat(d.opts.Stages, others)
}

// Handler serves the dashboard, its assets and, when Options.Metrics is
// set, /metrics and /healthz. Requests that change something are refused
// when they come from another origin.
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", d.withDB(d.overview))
	mux.HandleFunc("GET /failures", d.withDB(d.failures))
	mux.HandleFunc("GET /schedules", d.withDB(d.schedules))
	mux.HandleFunc("GET /messages", d.withDB(d.messages))
	mux.HandleFunc("GET /messages/{id}", d.withDB(d.message))
	mux.HandleFunc("GET /messages/{id}/payload", d.withDB(d.payload))
	mux.HandleFunc("POST /retry", d.withDB(d.serveAction("retry", "retried", d.parseRetry)))
	mux.HandleFunc("POST /purge", d.withDB(d.serveAction("purge", "purged", d.parsePurge)))
	for _, c := range []struct{ name, done string }{{"hold", "held"}, {"release", "released"}, {"cancel", "cancelled"}} {
		mux.HandleFunc("POST /"+c.name, d.withDB(d.serveAction(c.name, c.done, d.parseControl(c.name))))
	}
	mux.HandleFunc("POST /pause", d.withDB(d.serveAction("pause", "paused", d.parseStageControl("pause"))))
	mux.HandleFunc("POST /resume", d.withDB(d.serveAction("resume", "resumed", d.parseStageControl("resume"))))
	mux.HandleFunc("GET /actions/{token}", d.actionResult)
	mux.Handle("GET /static/", staticHandler())
	if d.opts.Metrics != nil {
		mux.Handle("GET /metrics", d.opts.Metrics)
		mux.Handle("GET /healthz", d.opts.Metrics)
	}
	mux.HandleFunc("/", d.notFound)
	csrf := http.NewCrossOriginProtection()
	csrf.SetDenyHandler(http.HandlerFunc(d.crossOrigin))
	return secure(csrf.Handler(mux))
}

// withDB gives h the database, and the request a context with the page's
// time limit; when the database cannot be reached it answers 503 itself.
func (d *Dashboard) withDB(h func(http.ResponseWriter, *http.Request, *admin.DB)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		d.viewed.Store(time.Now().UnixNano())
		ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
		defer cancel()
		db, err := d.opts.DB(ctx)
		if err != nil {
			d.dbFailed(w, r, err)
			return
		}
		h(w, r.WithContext(ctx), db)
	}
}

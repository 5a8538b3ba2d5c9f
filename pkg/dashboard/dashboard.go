package dashboard

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
)

// Defaults of Options.
const (
	DefaultSampleEvery = 5 * time.Second  // how often the statistics are sampled
	DefaultWindow      = 15 * time.Minute // how far back the throughput charts go
	DefaultRefresh     = 10               // seconds between reloads of the overview
)

// pageTimeout bounds the statements of one page.
const pageTimeout = 30 * time.Second

// Options configures a Dashboard.
type Options struct {
	// DB returns the database, connecting if need be (metrics.Source.DB).
	DB func(context.Context) (*admin.DB, error)
	// Stages are the configured stages, in pipeline order: they are listed
	// first, and even when they have no messages.
	Stages []string
	// Auth says who may act; nil: nobody (a read-only dashboard).
	Auth *Auth
	// Metrics, when set, serves /metrics and /healthz beside the dashboard.
	Metrics http.Handler
	// SampleEvery is how often the statistics are sampled for the
	// throughput charts (default DefaultSampleEvery); Window how far back
	// the charts go (default DefaultWindow).
	SampleEvery time.Duration
	Window      time.Duration
	// Refresh is how often the overview reloads itself in a browser with
	// JavaScript, in seconds: 0 means DefaultRefresh, a negative value never.
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
	if opts.Refresh == 0 {
		opts.Refresh = DefaultRefresh
	}
	return &Dashboard{
		opts:    opts,
		log:     opts.Log,
		pages:   loadPages(),
		samples: newSampler(opts.Window, opts.SampleEvery),
		counts:  &countCache{maxAge: min(opts.SampleEvery, 2*time.Second)},
	}
}

// Run samples the statistics every SampleEvery until ctx ends.
func (d *Dashboard) Run(ctx context.Context) {
	d.samples.run(ctx, d.opts.DB, d.log)
}

// Handler serves the dashboard, its assets and, when Options.Metrics is
// set, /metrics and /healthz. Requests that change something are refused
// when they come from another origin.
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", d.withDB(d.overview))
	mux.HandleFunc("GET /failures", d.withDB(d.failures))
	mux.HandleFunc("GET /messages", d.withDB(d.messages))
	mux.HandleFunc("GET /messages/{id}", d.withDB(d.message))
	mux.HandleFunc("GET /messages/{id}/payload", d.withDB(d.payload))
	mux.HandleFunc("POST /retry", d.withDB(d.serveAction("retry", "retried", parseRetry)))
	mux.HandleFunc("POST /purge", d.withDB(d.serveAction("purge", "purged", parsePurge)))
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

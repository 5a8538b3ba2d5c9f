package dashboard

import (
	"context"
	"html/template"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// stageRow is one stage of the overview.
type stageRow struct {
	Stage      string           `json:"stage"`
	Configured bool             `json:"configured"` // pepsi.conf has a [stage-NAME] for it
	Counts     map[string]int64 `json:"counts"`     // by status, every status present
	// OldestPending is how long the oldest pending message has waited,
	// in seconds; 0 when none is pending.
	OldestPending float64 `json:"oldest_pending_seconds"`
	Throughput    []bin   `json:"throughput"`
	// Owner is the dispatcher that claims the stage's messages: the one
	// without a stage set, which owns every stage, or the one whose set
	// has the stage; nil when none does (its messages wait).
	Owner *admin.DispatcherSession `json:"owner"`

	Cells []cell        `json:"-"` // the counts, in Statuses order, with their lists
	Chart template.HTML `json:"-"`
	Rate  string        `json:"-"` // the last bar's passes per second, "" when not sampled
}

// cell is one count of the overview with the list of its messages.
type cell struct {
	Status string
	N      int64
	URL    string
}

// overviewPage is the overview's data.
type overviewPage struct {
	Stages []stageRow       `json:"stages"`
	Totals map[string]int64 `json:"totals"`
	// Dispatcher is the dispatcher that owns every stage (one without a
	// stage set); nil when none runs, or when dispatchers with stage sets
	// do: they are in Dispatchers, as it is.
	Dispatcher  *admin.DispatcherSession  `json:"dispatcher"`
	Dispatchers []admin.DispatcherSession `json:"dispatchers"` // every one running, each with the stages it owns
	Standbys    []admin.DispatcherSession `json:"standbys"`
	Unowned     []string                  `json:"unowned"` // while dispatchers run: the stages none owns
	Window      string                    `json:"window"`  // what the charts span
	Statuses    []queue.Status            `json:"-"`
}

// countCache shares one count of the queue among the overviews asked for
// within maxAge: a count reads all of pepsi.state (0.25 s at 1 000 000 rows).
type countCache struct {
	maxAge time.Duration

	mu     sync.Mutex
	at     time.Time
	now    time.Time // the server's clock at the count
	counts []admin.Count
}

func (c *countCache) get(ctx context.Context, db *admin.DB) ([]admin.Count, time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts != nil && time.Since(c.at) < c.maxAge {
		return c.counts, c.now, nil
	}
	counts, err := db.Counts(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	now, err := db.Now(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	if counts == nil {
		counts = []admin.Count{}
	}
	c.counts, c.now, c.at = counts, now, time.Now()
	return counts, now, nil
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request, db *admin.DB) {
	if !d.paramsOK(w, r) {
		return
	}
	ctx := r.Context()
	counts, now, err := d.counts.get(ctx, db)
	if err != nil {
		d.dbFailed(w, r, err)
		return
	}
	page := overviewPage{
		Totals:   map[string]int64{},
		Unowned:  []string{},
		Window:   span(d.opts.Window),
		Statuses: queue.Statuses,
	}

	rows := map[string]*stageRow{}
	row := func(stage string) *stageRow {
		if x := rows[stage]; x != nil {
			return x
		}
		x := &stageRow{Stage: stage, Counts: map[string]int64{}}
		for _, st := range queue.Statuses {
			x.Counts[string(st)] = 0
		}
		rows[stage] = x
		return x
	}
	for _, s := range d.opts.Stages {
		row(s).Configured = true
	}
	for _, s := range d.samples.stages() {
		row(s)
	}
	for _, c := range counts {
		x := row(c.Stage)
		x.Counts[string(c.Status)] = c.N
		page.Totals[string(c.Status)] += c.N
		if c.Status == queue.Pending && c.N > 0 {
			x.OldestPending = max(now.Sub(c.Oldest), 0).Seconds()
		}
	}
	for _, st := range queue.Statuses {
		page.Totals[string(st)] += 0
	}
	// Configured stages in pipeline order, then the others by name.
	var others []string
	for s, x := range rows {
		if !x.Configured {
			others = append(others, s)
		}
	}
	slices.Sort(others)
	order := slices.Concat(d.opts.Stages, others)
	owners, err := db.DispatcherSessions(ctx, order)
	if err != nil {
		d.dbFailed(w, r, err)
		return
	}
	page.Dispatcher, page.Dispatchers, page.Standbys = owners.Holder, owners.Running, owners.Standbys
	at := time.Now()
	for _, s := range order {
		x := rows[s]
		x.Owner = owners.Owners[s]
		if x.Owner == nil && len(owners.Running) > 0 {
			page.Unowned = append(page.Unowned, s)
		}
		x.Throughput = d.samples.bins(s, at)
		x.Chart = chartSVG(x.Throughput)
		if b := x.Throughput[len(x.Throughput)-1]; b.Known {
			x.Rate = rate(b.OK + b.Failed)
		}
		for _, st := range queue.Statuses {
			x.Cells = append(x.Cells, cell{string(st), x.Counts[string(st)], queryOf("/messages", "stage", s, "status", string(st))})
		}
		page.Stages = append(page.Stages, *x)
	}
	if page.Stages == nil {
		page.Stages = []stageRow{}
	}
	d.render(w, r, http.StatusOK, "overview", view{Title: "Overview", Nav: "overview", Refresh: d.opts.Refresh, Page: page})
}

package dashboard

import (
	"cmp"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The overview answers "is anything wrong?": banners for what is (no
// dispatcher, stages no dispatcher owns, running messages no dispatcher
// holds, stages no section configures, a dispatcher whose standby is gone),
// then per stage the failed and pending messages first, the failures of
// the last minutes as a count and a share of the passes, whether the
// backlog grows or drains, the oldest pending message, the other counts,
// the throughput on one scale, and the owner.

// stageRow is one stage of the overview.
type stageRow struct {
	Stage      string `json:"stage"`
	Configured bool   `json:"configured"` // pepsi.conf has a [stage-NAME] for it
	// Counts are by status, every status present but those still being
	// counted (overviewPage.Counting).
	Counts map[string]int64 `json:"counts"`
	// OldestPending is how long the oldest pending message has waited,
	// in seconds; 0 when none is pending.
	OldestPending float64 `json:"oldest_pending_seconds"`
	// Failures are the stage's failed passes and failed messages over the
	// charts' window.
	Failures failures `json:"failures"`
	// Backlog is whether its pending messages grow or drain.
	Backlog backlogTrend `json:"backlog"`
	// Orphans are the running messages handed out at this stage that no
	// dispatcher holds: none owns the stage, so no worker has them.
	Orphans int64 `json:"running_without_dispatcher"`
	// NextDue is when its earliest paused message (a retry, or a
	// scheduled message) falls due, as pepsi queue's NEXT_DUE; nil when
	// none is paused.
	NextDue *time.Time `json:"next_due"`
	// Paused is the stage's pause (pepsi queue pause), nil when it runs.
	Paused     *admin.StagePause `json:"paused"`
	Throughput []bin             `json:"throughput"`
	// Owner is the dispatcher that claims the stage's messages: the one
	// without a stage set, which owns every stage, or the one whose set
	// has the stage; nil when none does (its messages wait).
	Owner *admin.DispatcherSession `json:"owner"`

	Lead  []cell        `json:"-"` // failed and pending, with their lists
	Rest  []cell        `json:"-"` // the other counts
	Chart template.HTML `json:"-"`
	Rate  string        `json:"-"` // the last bar's passes per second, "" when not sampled
	// NoSection: pepsi.conf has stages, and none of them is this one.
	NoSection bool `json:"-"`
	// Counting: its live messages are still being counted (the oldest
	// pending one's age with them).
	Counting bool `json:"-"`
}

// failures is a stage's failed passes over a span, and its failed
// messages over the window.
type failures struct {
	Known  bool    `json:"known"`  // false until the server has two samples
	Failed int64   `json:"failed"` // failed passes: failed answers, protocol errors, timeouts and crashes
	Passes int64   `json:"passes"` // every pass, ok or failed
	Share  float64 `json:"share"`  // Failed / Passes, 0 without passes
	Span   float64 `json:"span_seconds"`
	// Messages are the failed messages: those that failed within the
	// window and are failed still, whether the stage failed them itself
	// (pepsi.fail(), in a pass that ended ok) or their failed passes ran
	// out of retries. Read from the queue, not sampled: known always.
	Messages int64   `json:"failed_messages"`
	Window   float64 `json:"-"` // the failed messages' span, seconds
	URL      string  `json:"-"` // the list of those failed messages
}

// cell is one count of the overview with the list of its messages.
type cell struct {
	Status   string
	N        int64
	URL      string
	Counting bool // not counted yet: the count is on its way
}

// banner is one thing the overview says is wrong.
type banner struct {
	// Kind is no_dispatcher, unowned, paused, orphans, unconfigured,
	// not_run or no_standby.
	Kind string `json:"kind"`
	// Severity is error (nothing moves: no dispatcher runs, or none owns
	// a stage), warning (something is amiss that needs a look) or notice
	// (a state an operator chose: a paused stage).
	Severity string `json:"severity"`
	Text     string `json:"text"`
	Link     string `json:"link,omitempty"`
	LinkText string `json:"-"`
}

// overviewPage is the overview's data.
type overviewPage struct {
	Banners []banner         `json:"banners"`
	Stages  []stageRow       `json:"stages"`
	Totals  map[string]int64 `json:"totals"`
	// Dispatcher is the dispatcher that owns every stage (one without a
	// stage set); nil when none runs, or when dispatchers with stage sets
	// do: they are in Dispatchers, as it is.
	Dispatcher  *admin.DispatcherSession  `json:"dispatcher"`
	Dispatchers []admin.DispatcherSession `json:"dispatchers"` // every one running, each with the stages it owns
	Standbys    []admin.DispatcherSession `json:"standbys"`
	// LostStandbys are the running dispatchers without the standby this
	// server saw waiting for them before.
	LostStandbys []lostStandby `json:"lost_standbys"`
	// NotRun are the stages whose recent answers were mostly 75 (not run).
	NotRun []queue.NotRunAnswers `json:"not_run"`
	// Paused are the paused stages (pepsi queue pause), by name.
	Paused    []admin.StagePause `json:"paused"`
	Unowned   []string           `json:"unowned"` // while dispatchers run: the stages none owns
	Window    string             `json:"window"`  // what the charts span
	ChartTop  float64            `json:"chart_top_per_second"`
	CountedAt time.Time          `json:"counted_at"` // the counts' time (the server's clock)
	DoneAt    time.Time          `json:"done_counted_at"`
	// Counting are the statuses whose counts are not there yet: the first
	// page after a quiet spell waits for a count a moment only (the done
	// messages' take seconds at millions), and has them at its next
	// refresh. Empty when every count is there.
	Counting []queue.Status `json:"counting"`
	// LeadStatuses are the statuses whose counts a stage's row shows
	// first, RestStatuses the others, in their order.
	LeadStatuses []queue.Status `json:"lead_statuses"`
	RestStatuses []queue.Status `json:"rest_statuses"`
	TotalLead    []cell         `json:"-"`
	TotalRest    []cell         `json:"-"`
	// Joins are the parents waiting at each join stage and their children
	// still open (read only when the counts have waiting messages).
	Joins []admin.JoinCount `json:"joins"`
}

// Columns is how many columns a row of the stages' table has.
func (p overviewPage) Columns() int { return 1 + len(p.LeadStatuses) + 4 + len(p.RestStatuses) + 2 }

// leadStatuses are the counts the overview shows first, the rest follow
// in queue.Statuses' order.
var leadStatuses = []queue.Status{queue.Failed, queue.Pending}

func restStatuses() []queue.Status {
	return slices.DeleteFunc(slices.Clone(queue.Statuses), func(s queue.Status) bool { return slices.Contains(leadStatuses, s) })
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request, db *admin.DB) {
	if !d.paramsOK(w, r) {
		return
	}
	refresh, ok := d.refreshParam(w, r, d.opts.Refresh)
	if !ok {
		return
	}
	ctx := r.Context()
	counts, err := d.pageCounts(ctx, db)
	if err != nil {
		d.dbFailed(w, r, err)
		return
	}
	rest := restStatuses()
	now := counts.now
	if counts.at.IsZero() { // still counting
		if now, err = db.Now(ctx); err != nil {
			d.dbFailed(w, r, err)
			return
		}
	}
	page := overviewPage{
		Totals:       map[string]int64{},
		Unowned:      []string{},
		Banners:      []banner{},
		Window:       span(d.opts.Window),
		CountedAt:    counts.now,
		DoneAt:       counts.doneAt,
		LeadStatuses: leadStatuses,
		RestStatuses: rest,
		Counting:     []queue.Status{},
	}
	for _, st := range queue.Statuses {
		if !counts.known(st) {
			page.Counting = append(page.Counting, st)
		}
	}

	order := d.stageOrder(counts)
	h, err := db.HealthOf(ctx, admin.HealthConfig{Stages: d.opts.Stages, StatsInterval: d.opts.StatsInterval, Also: order}, counts.live, now)
	if err != nil {
		d.dbFailed(w, r, err)
		return
	}
	owners := h.Dispatchers
	d.standbys.note(owners, time.Now())
	page.Dispatcher, page.Dispatchers, page.Standbys = owners.Holder, owners.Running, owners.Standbys
	page.LostStandbys = d.standbys.lost(owners)
	if page.LostStandbys == nil {
		page.LostStandbys = []lostStandby{}
	}
	page.Paused = append([]admin.StagePause{}, h.Paused...)
	page.NotRun = append([]queue.NotRunAnswers{}, h.NotRun...)
	if h.DispatcherRuns() { // else the banner says no dispatcher runs
		page.Unowned = append(page.Unowned, h.Unowned()...)
	}

	rows := make(map[string]*stageRow, len(order))
	for _, s := range order {
		x := &stageRow{Stage: s, Counts: map[string]int64{}, Configured: slices.Contains(d.opts.Stages, s)}
		x.NoSection = !x.Configured && len(d.opts.Stages) > 0
		for _, st := range queue.Statuses {
			if counts.known(st) {
				x.Counts[string(st)] = 0
			}
		}
		rows[s] = x
	}
	orphans := h.Orphans()
	for _, c := range counts.live {
		x := rows[c.Stage]
		if x == nil { // not in the order: cannot be, the order has every counted stage
			continue
		}
		x.Counts[string(c.Status)] += c.N
		if c.Status == queue.Pending {
			age := max(counts.now.Sub(c.Oldest), 0).Seconds()
			x.OldestPending = max(x.OldestPending, age)
		}
	}
	for s, n := range counts.done {
		if x := rows[s]; x != nil {
			x.Counts[string(queue.Done)] = n
		}
	}
	var pausedAt []string
	for _, s := range order {
		if rows[s].Counts[string(queue.Paused)] > 0 {
			pausedAt = append(pausedAt, s)
		}
	}
	due, err := db.NextDueOf(ctx, pausedAt)
	if err != nil {
		d.dbFailed(w, r, err)
		return
	}
	for s, t := range due {
		if x := rows[s]; x != nil {
			x.NextDue = &t
		}
	}
	at := time.Now()
	dead, err := db.FailedMessages(ctx, at, d.opts.Window/chartBins, chartBins)
	if err != nil {
		d.dbFailed(w, r, err)
		return
	}
	var charts [][]bin
	for _, s := range order {
		x := rows[s]
		x.Owner = h.Owner(s)
		x.Orphans = orphans[s]
		for i := range page.Paused {
			if page.Paused[i].Stage == s {
				x.Paused = &page.Paused[i]
			}
		}
		x.Throughput = d.samples.bins(s, at)
		charts = append(charts, x.Throughput)
		if b := x.Throughput[len(x.Throughput)-1]; b.Known {
			x.Rate = rate(b.OK + b.Failed)
		}
		if f, p, sp, ok := d.samples.failures(s, at); ok {
			x.Failures = failures{Known: true, Failed: f, Passes: p, Span: sp.Seconds()}
			if p > 0 {
				x.Failures.Share = float64(f) / float64(p)
			}
		}
		x.Failures.Window = d.opts.Window.Seconds()
		x.Failures.URL = queryOf("/messages", "stage", s, "status", string(queue.Failed), "newer", strconv.Itoa(int(d.opts.Window.Seconds())))
		for i, n := range dead[s] {
			x.Throughput[i].FailedMessages = n
			x.Failures.Messages += n
		}
		if counts.known(queue.Pending) {
			x.Backlog = d.counts.trend(s, x.Counts[string(queue.Pending)], counts.at)
		} else {
			x.Backlog, x.Counting = backlogTrend{Trend: "unknown"}, true
		}
		for st, n := range x.Counts {
			page.Totals[st] += n
		}
		x.Lead, x.Rest = cells(s, x.Counts, leadStatuses), cells(s, x.Counts, rest)
	}
	page.ChartTop = chartTop(charts...)
	for _, s := range order {
		x := rows[s]
		x.Chart = chartSVG(x.Throughput, page.ChartTop, span(d.opts.Window))
		page.Stages = append(page.Stages, *x)
	}
	if page.Stages == nil {
		page.Stages = []stageRow{}
	}
	page.TotalLead, page.TotalRest = cells("", page.Totals, leadStatuses), cells("", page.Totals, rest)
	page.Joins = []admin.JoinCount{}
	if page.Totals[string(queue.Waiting)] > 0 {
		if page.Joins, err = db.Joins(ctx); err != nil {
			d.dbFailed(w, r, err)
			return
		}
	}
	page.Banners = d.banners(page, h, order)
	d.render(w, r, http.StatusOK, "overview", view{Title: "Overview", Nav: "overview", Refresh: refresh, Updated: cmp.Or(counts.at, at), Page: page})
}

// cells are counts of stage ("": every stage) in the statuses given, with
// their lists; a status missing from counts is still being counted.
func cells(stage string, counts map[string]int64, sts []queue.Status) []cell {
	out := make([]cell, 0, len(sts))
	for _, st := range sts {
		n, ok := counts[string(st)]
		out = append(out, cell{string(st), n, queryOf("/messages", "stage", stage, "status", string(st)), !ok})
	}
	return out
}

// Severities of a banner, the worst first.
const (
	sevError   = "error"
	sevWarning = "warning"
	sevNotice  = "notice"
)

// severityRank orders the severities, the worst first.
var severityRank = map[string]int{sevError: 0, sevWarning: 1, sevNotice: 2}

// banners says what is wrong, the worst first: the errors, the warnings,
// then the notices, each in the order below.
func (d *Dashboard) banners(page overviewPage, h *admin.Health, order []string) []banner {
	out := d.bannerList(page, h, order)
	slices.SortStableFunc(out, func(a, b banner) int { return severityRank[a.Severity] - severityRank[b.Severity] })
	return out
}

// bannerList is the banners, in the order of their kinds.
func (d *Dashboard) bannerList(page overviewPage, h *admin.Health, order []string) []banner {
	out := []banner{}
	if slices.Contains(page.Counting, queue.Pending) {
		out = append(out, banner{Kind: "counting", Severity: sevNotice, Text: "Counting the queue: its counts, and what they would warn of " +
			"(running messages no dispatcher holds, messages no worker runs), are not in yet; the next refresh has them."})
	}
	if !h.DispatcherRuns() {
		out = append(out, banner{Kind: "no_dispatcher", Severity: sevError, Text: "No dispatcher runs: no stage is owned, and nothing is claimed. Start pepsi dispatch."})
	}
	if n := len(page.Unowned); n > 0 {
		out = append(out, banner{Kind: "unowned", Severity: sevError, Text: fmt.Sprintf("No dispatcher owns stage%s %s: %s messages wait.",
			plural(int64(n)), strings.Join(page.Unowned, ", "), map[bool]string{true: "their", false: "its"}[n > 1])})
	}
	for _, p := range page.Paused {
		pending := int64(0)
		for _, x := range page.Stages {
			if x.Stage == p.Stage {
				pending = x.Counts[string(queue.Pending)]
			}
		}
		why := ""
		if p.Reason != "" {
			why = ": " + p.Reason
		}
		out = append(out, banner{Kind: "paused", Severity: sevNotice, Text: fmt.Sprintf(
			"Stage %s is paused, by %s since %s (%s ago)%s. Nothing new is handed to it: its %s pending message%s wait%s.",
			p.Stage, p.By, timestamp(p.At), ago(p.At), why, number(pending), plural(pending), map[bool]string{true: "", false: "s"}[pending != 1]),
			Link: queryOf("/messages", "stage", p.Stage, "status", string(queue.Pending)), LinkText: "see them"})
	}
	var total int64
	var where []string
	one := ""
	seen := map[string]bool{}
	orphans := h.Orphans()
	for _, s := range slices.Concat(order, sortedKeys(orphans)) {
		if n := orphans[s]; n > 0 && !seen[s] {
			seen[s] = true
			total += n
			where = append(where, s+": "+number(n))
			one = s
		}
	}
	if total > 0 {
		b := banner{Kind: "orphans", Severity: sevWarning, Text: fmt.Sprintf("%s message%s running with no dispatcher to hold %s (stage %s): no worker has %s. "+
			"The dispatcher that next takes %s stage puts %s back to pending; or retry %s.",
			number(total), map[bool]string{true: "s are", false: " is"}[total != 1], them(total), strings.Join(where, ", "),
			them(total), map[bool]string{true: "their", false: "its"}[total != 1], them(total), them(total)),
			Link: queryOf("/messages", "status", string(queue.Running)), LinkText: "see them"}
		if len(where) == 1 {
			b.Link = queryOf("/messages", "status", string(queue.Running), "stage", one)
		}
		out = append(out, b)
	}
	for _, m := range h.Unconfigured() {
		out = append(out, banner{Kind: "unconfigured", Severity: sevWarning, Text: fmt.Sprintf(
			"Stage %s holds %s unfinished message%s, and no [stage-%s] section of pepsi.conf configures it: no worker runs %s.",
			m.Stage, number(m.N), plural(m.N), m.Stage, them(m.N)), Link: queryOf("/messages", "stage", m.Stage), LinkText: "see them"})
	}
	for _, a := range page.NotRun {
		out = append(out, banner{Kind: "not_run", Severity: sevWarning, Text: fmt.Sprintf(
			"Stage %s answered 75 (not run) in %s of its last %s answer%s: those messages go back and are tried again every second, with no attempt counted. "+
				"A stage should answer 75 only when it cannot reach its database; their errors say why.",
			a.Stage, number(a.NotRun), number(a.NotRun+a.Passes), plural(a.NotRun+a.Passes)),
			Link: queryOf("/messages", "stage", a.Stage, "status", string(queue.Paused)), LinkText: "see them"})
	}
	for _, l := range page.LostStandbys {
		owns := "every stage"
		if !l.Dispatcher.All {
			owns = "stage" + plural(int64(len(l.Dispatcher.Stages))) + " " + strings.Join(l.Dispatcher.Stages, ", ")
		}
		out = append(out, banner{Kind: "no_standby", Severity: sevWarning, Text: fmt.Sprintf(
			"Dispatcher %s (%s) runs without a standby: the last one, %s, was seen waiting at %s (%s ago).",
			who(l.Dispatcher), owns, who(l.Standby), timestamp(l.LastSeen), ago(l.LastSeen))})
	}
	return out
}

// who names a dispatcher's session: its pid and host, else its name, else
// its server pid.
func who(s admin.DispatcherSession) string {
	switch {
	case s.PID != 0:
		return "pid " + strconv.Itoa(s.PID) + " on " + s.Host
	case s.Name != "":
		return s.Name
	}
	return "server pid " + strconv.Itoa(int(s.ServerPID))
}

func plural(n int64) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func them(n int64) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

func sortedKeys(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// filter is the messages list's query string, as given and as read.
type filter struct {
	Stage  string `json:"stage,omitempty"`
	Status string `json:"status,omitempty"`
	Older  string `json:"older,omitempty"` // unchanged for at least this long
	Newer  string `json:"newer,omitempty"` // changed within this long
	Text   string `json:"q,omitempty"`     // in the error or the dispatch_error
	Reason string `json:"reason,omitempty"`
	Parent int64  `json:"parent,omitempty"` // the children of this message
	// The search: headers (KEY=VALUE, every one), text in a text
	// payload, enqueued within Since (admin.DefaultSince when empty).
	Headers []string `json:"header,omitempty"`
	Payload string   `json:"payload,omitempty"`
	Since   string   `json:"since,omitempty"`
	Before  int64    `json:"before,omitempty"`
	After   int64    `json:"after,omitempty"`
	Limit   int      `json:"limit,omitempty"`
	// Refresh is ?refresh=N as given, kept in the pager's links.
	Refresh string `json:"-"`

	params admin.BrowseParams
}

// maxText bounds the text filters.
const maxText = 1000

// parseFilter reads the messages list's filters from r, or says which is wrong.
func parseFilter(r *http.Request) (filter, error) {
	bad := checkParams(r)
	f := filter{
		Stage: r.FormValue("stage"), Status: r.FormValue("status"), Older: r.FormValue("older"),
		Newer: r.FormValue("newer"), Text: r.FormValue("q"), Reason: r.FormValue("reason"),
		Refresh: r.URL.Query().Get("refresh"),
		Headers: given(r.Form["header"]), Payload: r.FormValue("payload"), Since: r.FormValue("since"),
	}
	if bad != nil {
		return f, bad
	}
	p := &f.params
	var err error
	p.Stage = f.Stage
	if f.Status != "" {
		if p.Status, err = queue.ParseStatus(f.Status); err != nil {
			return f, fmt.Errorf("status: %v", err)
		}
	}
	if p.OlderThan, err = parseAgeParam("older", f.Older); err != nil {
		return f, err
	}
	if p.NewerThan, err = parseAgeParam("newer", f.Newer); err != nil {
		return f, err
	}
	if len(f.Stage) > maxText || len(f.Text) > maxText || len(f.Reason) > maxText {
		return f, fmt.Errorf("stage, q and reason take at most %d bytes", maxText)
	}
	p.Text, p.Reason = f.Text, f.Reason
	if p.Search, err = parseSearch(f.Headers, f.Payload, f.Since); err != nil {
		return f, err
	}
	for _, n := range []struct {
		name string
		dst  *int64
	}{{"before", &f.Before}, {"after", &f.After}, {"parent", &f.Parent}} {
		if *n.dst, err = parseID(n.name, r.FormValue(n.name)); err != nil {
			return f, err
		}
	}
	p.Before, p.After, p.Parent = f.Before, f.After, f.Parent
	if s := r.FormValue("limit"); s != "" {
		if f.Limit, err = strconv.Atoi(s); err != nil || f.Limit < 1 || f.Limit > 1000 {
			return f, fmt.Errorf("limit %q: want a number from 1 to 1000", s)
		}
		p.Limit = f.Limit
	}
	return f, nil
}

// parseAgeParam reads an age parameter; "" is none.
func parseAgeParam(name, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := config.ParseAge(s)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %v", name, s, err)
	}
	return d, nil
}

// maxHeaders bounds the header filters of a search.
const maxHeaders = 10

// given returns the values that are not empty (a form's empty field is
// no filter).
func given(vs []string) []string {
	var out []string
	for _, v := range vs {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// parseSearch reads a search's parameters: header (KEY=VALUE, each),
// payload and since (more than 0).
func parseSearch(headers []string, payload, since string) (admin.Search, error) {
	var s admin.Search
	if len(headers) > maxHeaders {
		return s, fmt.Errorf("header: at most %d of them", maxHeaders)
	}
	for _, v := range headers {
		if len(v) > maxText {
			return s, fmt.Errorf("header: at most %d bytes", maxText)
		}
		h, err := admin.ParseHeader(v)
		if err != nil {
			return s, fmt.Errorf("header %v", err)
		}
		s.Headers = append(s.Headers, h)
	}
	if len(payload) > maxText {
		return s, fmt.Errorf("payload: at most %d bytes", maxText)
	}
	s.Payload = payload
	var err error
	if s.Since, err = parseAgeParam("since", since); err != nil {
		return s, err
	}
	if since != "" && s.Since == 0 {
		return s, fmt.Errorf("since %q: want a duration of more than 0", since)
	}
	return s, nil
}

// parseID reads a message id parameter; "" is none.
func parseID(name, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, fmt.Errorf("%s %q: want a message id (a positive integer)", name, s)
	}
	return id, nil
}

// query is the filter's query string without the page's position.
func (f *filter) query() url.Values {
	q := url.Values{}
	for _, kv := range [][2]string{{"stage", f.Stage}, {"status", f.Status}, {"older", f.Older},
		{"newer", f.Newer}, {"q", f.Text}, {"reason", f.Reason}, {"payload", f.Payload}, {"since", f.Since}} {
		if kv[1] != "" {
			q.Set(kv[0], kv[1])
		}
	}
	for _, h := range f.Headers {
		q.Add("header", h)
	}
	if f.Parent > 0 {
		q.Set("parent", strconv.FormatInt(f.Parent, 10))
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.Refresh != "" {
		q.Set("refresh", f.Refresh)
	}
	return q
}

// at is the list's URL with one more parameter.
func (f *filter) at(key string, id int64) string {
	q := f.query()
	q.Set(key, strconv.FormatInt(id, 10))
	return "/messages?" + q.Encode()
}

// listRow is one message of the list.
type listRow struct {
	admin.Row
	URL string `json:"url"`
	// Wait is why a paused message waits: scheduled or retry (waitOf).
	Wait string `json:"wait,omitempty"`
}

// messagesPage is the messages list's data.
type messagesPage struct {
	Filter filter    `json:"filter"`
	Rows   []listRow `json:"rows"`
	Older  string    `json:"older_url,omitempty"` // the next page, older messages
	Newer  string    `json:"newer_url,omitempty"` // the previous page, newer messages
	// Total is how many messages match the filter, on every page; with
	// TotalMore, at least that many (they are counted up to maxTotal). A
	// filter of a stage and a status only that has more is read from the
	// queue's last count, of TotalAt.
	Total     int64          `json:"total"`
	TotalMore bool           `json:"total_more,omitempty"`
	TotalAt   *time.Time     `json:"total_counted_at,omitempty"`
	Problem   string         `json:"-"` // what is wrong with the filter
	Stages    []string       `json:"-"`
	Statuses  []queue.Status `json:"-"`
	Refresh   int            `json:"-"`
	// What the action bar offers: to act on the ticked messages, or on
	// every one the filter matches (never on none); Retry says whether a
	// retry is among them (with its stage and priority).
	Ticked, All []button `json:"-"`
	Retry       bool     `json:"-"`
	// Window is how far back a search reads: its since, or the default.
	Window string `json:"search_window,omitempty"`
	// Cut is, for a search that read only part of its window, how far
	// back it read (see admin.SearchBudget); Total counts in that part.
	Cut *searchCut `json:"search_cut,omitempty"`
	// DefaultSince is the default of since, for the form.
	DefaultSince string `json:"-"`
}

// searchCut is how far back a page of a search read its window.
type searchCut struct {
	From time.Time `json:"from"` // when the oldest message it read was enqueued
}

// button is an action the action bar offers.
type button struct{ Action, Label string }

// barActions are the actions a list's action bar may offer, in its order,
// with the statuses of a list each makes sense for ("" for a list of any
// status) on ticked messages and on every one the filter matches.
var barActions = []struct {
	action, label string
	ticked, all   []queue.Status
}{
	{"retry", "Retry", []queue.Status{"", queue.Failed, queue.Cancelled, queue.Paused, queue.Done, queue.Running},
		[]queue.Status{queue.Failed, queue.Cancelled, queue.Paused, queue.Done, queue.Running}},
	{"hold", "Hold", []queue.Status{"", queue.Pending, queue.Paused}, []queue.Status{queue.Pending, queue.Paused}},
	{"release", "Release", []queue.Status{"", queue.Held}, []queue.Status{queue.Held}},
	{"cancel", "Cancel", []queue.Status{"", queue.Pending, queue.Paused, queue.Held, queue.Waiting}, []queue.Status{queue.Pending, queue.Paused, queue.Held, queue.Waiting}},
	{"purge", "Purge", []queue.Status{"", queue.Done, queue.Failed, queue.Cancelled}, []queue.Status{queue.Done, queue.Failed, queue.Cancelled}},
}

// maxTotal bounds the count of a list's matching messages when it is not
// read from the queue's counts.
const maxTotal = 10000

func (d *Dashboard) messages(w http.ResponseWriter, r *http.Request, db *admin.DB) {
	f, err := parseFilter(r)
	page := messagesPage{Filter: f, Rows: []listRow{}, Stages: d.opts.Stages, Statuses: queue.Statuses,
		DefaultSince: strconv.Itoa(int(admin.DefaultSince.Hours())) + "h"}
	if len(f.Headers) > 0 || f.Payload != "" {
		page.Window = cmp.Or(f.Since, page.DefaultSince)
	}
	refresh := 0
	if err == nil {
		var ok bool
		if refresh, ok = d.refreshParam(w, r, 0); !ok {
			return
		}
	}
	page.Refresh = refresh
	if err != nil {
		page.Problem = err.Error()
		if wantsJSON(r) {
			d.fail(w, r, http.StatusBadRequest, page.Problem)
			return
		}
		d.render(w, r, http.StatusBadRequest, "messages", view{Title: "Messages", Nav: "messages", Page: page})
		return
	}
	res, err := db.Browse(r.Context(), f.params)
	if err == nil {
		err = d.total(r.Context(), db, &page, res)
	}
	if errors.Is(err, admin.ErrSearchTimeout) {
		d.searchFailed(w, r, page, err)
		return
	}
	if err != nil {
		d.dbFailed(w, r, err)
		return
	}
	read := time.Now()
	for _, row := range res.Rows {
		page.Rows = append(page.Rows, listRow{Row: row, URL: "/messages/" + strconv.FormatInt(row.ID, 10), Wait: waitOf(row)})
	}
	if res.Older && res.OlderBefore > 0 {
		page.Older = f.at("before", res.OlderBefore)
	}
	if res.Newer && res.NewerAfter > 0 {
		page.Newer = f.at("after", res.NewerAfter)
	}
	if res.Cut && res.Searched != nil {
		page.Cut = &searchCut{From: res.Searched.FromTime}
	}
	st := f.params.Status
	for _, a := range barActions {
		if len(page.Rows) > 0 && slices.Contains(a.ticked, st) {
			page.Ticked = append(page.Ticked, button{a.action, a.label})
			page.Retry = page.Retry || a.action == "retry"
		}
		if page.Total > 0 && slices.Contains(a.all, st) {
			page.All = append(page.All, button{a.action, a.label})
			page.Retry = page.Retry || a.action == "retry"
		}
	}
	d.render(w, r, http.StatusOK, "messages", view{Title: "Messages", Nav: "messages", Refresh: refresh, Updated: read, Page: page})
}

// searchFailed answers a search that ran out of time: 400, the list with
// its filters and what to do, as for a filter that is wrong.
func (d *Dashboard) searchFailed(w http.ResponseWriter, r *http.Request, page messagesPage, err error) {
	page.Problem = err.Error()
	if wantsJSON(r) {
		d.fail(w, r, http.StatusBadRequest, page.Problem)
		return
	}
	d.render(w, r, http.StatusBadRequest, "messages", view{Title: "Messages", Nav: "messages", Page: page})
}

// total counts the messages the filter matches (res is its page): the
// page's own rows when they are all of them; else, for a filter of a stage and a status only,
// the queue's last count when it has more than maxTotal; else a count up
// to maxTotal.
func (d *Dashboard) total(ctx context.Context, db *admin.DB, page *messagesPage, res admin.BrowsePage) error {
	p := page.Filter.params
	if res.Cut {
		// A page cut short (see admin.SearchBudget) counts its own rows:
		// a count would read all it did not.
		page.Total, page.TotalMore = int64(len(res.Rows)), true
		return nil
	}
	if !res.Older && !res.Newer && res.Searched == nil {
		page.Total = int64(len(res.Rows))
		return nil
	}
	if res.Searched != nil && p.Search.Searches() {
		// A search is not counted beyond its page: a count would read
		// the part of the window the page read once more (see
		// admin.SearchBudget). At least the page's rows match, more
		// when it is full or the window goes on beyond what it read.
		page.Total = int64(len(res.Rows))
		page.TotalMore = res.Older || !res.Searched.Whole
		return nil
	}
	if p.OlderThan == 0 && p.NewerThan == 0 && p.Text == "" && p.Reason == "" && p.Parent == 0 && p.Search.Since == 0 && len(p.Search.Headers) == 0 && p.Search.Payload == "" {
		c, err := d.pageCounts(ctx, db)
		if err != nil {
			return err
		}
		// A list of a stage's done messages is not counted either: no
		// index holds their stage, and a count would read them all.
		switch n := c.n(p.Stage, p.Status); {
		case !c.known(p.Status) && p.Unindexed():
			// Not counted yet (see pageCounts): the page's own rows,
			// and more when there are older ones.
			page.Total, page.TotalMore = int64(len(res.Rows)), res.Older
			return nil
		case !c.known(p.Status):
			// Not counted yet: counted below, up to maxTotal.
		case n > maxTotal || p.Unindexed():
			page.Total = n
			at := c.now // the server's clock at the count; done's may be older
			switch {
			case c.at.IsZero(): // done's, the live count not in yet: this clock's
				at = c.doneAt
			case (p.Status == "" || p.Status == queue.Done) && c.doneAt.Before(c.at):
				at = c.now.Add(-c.at.Sub(c.doneAt))
			}
			page.TotalAt = &at
			return nil
		}
	}
	var err error
	page.Total, page.TotalMore, err = db.CountSelection(ctx, p.Selection(), maxTotal)
	return err
}

package dashboard_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/admin"
)

// listJSON is the messages list as JSON, as the search tests read it.
type listJSON struct {
	Rows []struct {
		ID int64 `json:"id"`
	} `json:"rows"`
	Total  int64  `json:"total"`
	More   bool   `json:"total_more"`
	Older  string `json:"older_url"`
	Window string `json:"search_window"`
	Cut    *struct {
		From time.Time `json:"from"`
	} `json:"search_cut"`
}

// TestSearch: the list's search (header KEY=VALUE, every one; text in a
// text payload; enqueued within since, a day by default) lists and counts
// what it matches, pages through it and keeps it in its links; a bad
// header or since is a 400 naming it, with the list and its filters; a
// retry and a hold of every message a search matches change what their
// confirmation counted, and nothing else.
func TestSearch(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{users: true, actors: []string{"alice"}, stages: []string{"a", "b"}})
	one := func(headers map[string]string, payload string) int64 {
		t.Helper()
		ids, err := s.db.EnqueueBulk(ctx(t), oneMessage("a", headers, []byte(payload)))
		if err != nil {
			t.Fatal(err)
		}
		return ids[0]
	}
	old := one(map[string]string{"tenant": "acme"}, `{"order": 7}`)
	var acme []int64
	for range 3 {
		acme = append(acme, one(map[string]string{"tenant": "acme", "tags": "x,y"}, `{"order": 7}`))
	}
	other := one(map[string]string{"tenant": "other"}, `{"order": 7}`)
	binary := one(map[string]string{"tenant": "acme"}, "\xff{\"order\": 7}")
	pending := one(map[string]string{"tenant": "acme"}, `{"order": 8}`)
	s.exec(`UPDATE pepsi.message SET created_at = now() - interval '3 days' WHERE id = $1`, old)
	s.fail(slices.Concat([]int64{old, other, binary}, acme), "boom")

	list := func(path string) (ids []int64, l listJSON) {
		t.Helper()
		s.getJSON(path, alice, &l)
		for _, r := range l.Rows {
			ids = append(ids, r.ID)
		}
		return ids, l
	}
	// The list is newest first.
	rev := func(ids ...int64) []int64 { ids = slices.Clone(ids); slices.Reverse(ids); return ids }
	for _, tc := range []struct {
		path   string
		want   []int64
		window string
	}{
		{"/messages?header=tenant%3Dacme", rev(acme[0], acme[1], acme[2], binary, pending), "24h"},
		{"/messages?header=tenant%3Dacme&since=4d&status=failed", rev(old, acme[0], acme[1], acme[2], binary), "4d"},
		{"/messages?header=tenant%3Dacme&header=tags%3Dx%2Cy", rev(acme...), "24h"},
		{"/messages?payload=%22order%22%3A+7&status=failed", rev(acme[0], acme[1], acme[2], other), "24h"},
		{"/messages?payload=ORDER", nil, "24h"},
		{"/messages?since=1h&status=pending", rev(pending), ""},
		{"/messages?header=&payload=&since=", rev(old, acme[0], acme[1], acme[2], other, binary, pending), ""},
	} {
		got, l := list(tc.path)
		if !slices.Equal(got, tc.want) || l.Total != int64(len(tc.want)) || l.Window != tc.window {
			t.Errorf("%s: %v, total %d, window %q; want %v, %q", tc.path, got, l.Total, l.Window, tc.want, tc.window)
		}
	}
	// Pages of a search, its filters kept in the links.
	// A search counts its page: "2 or more".
	got, l := list("/messages?header=tenant%3Dacme&header=tags%3Dx%2Cy&limit=2")
	if !slices.Equal(got, []int64{acme[2], acme[1]}) || l.Total != 2 || !l.More || !strings.Contains(l.Older, "header=tenant%3Dacme&header=tags%3Dx%2Cy") {
		t.Fatalf("first page: %v, total %d (more %v), older %q", got, l.Total, l.More, l.Older)
	}
	if got, _ := list(l.Older); !slices.Equal(got, []int64{acme[0]}) {
		t.Errorf("second page: %v", got)
	}
	body := s.get("/messages?header=tenant%3Dacme&payload=order&status=failed", http.StatusOK, alice)
	for _, want := range []string{`name="header" value="tenant=acme"`, `name="payload" value="order"`, "enqueued within 24h only",
		`<input type="hidden" name="header" value="tenant=acme">`, `<input type="hidden" name="payload" value="order">`} {
		if !strings.Contains(body, want) {
			t.Errorf("the list of a search lacks %q", want)
		}
	}

	// Bad input: 400, saying which, never a 500.
	for path, says := range map[string]string{
		"/messages?header=foo":                           `header &#34;foo&#34;: want KEY=VALUE`,
		"/messages?header=%3Dv":                          `header &#34;=v&#34;: want KEY=VALUE`,
		"/messages?payload=x&since=-5m":                  `since &#34;-5m&#34;:`,
		"/messages?since=0":                              `since &#34;0&#34;: want a duration of more than 0`,
		"/messages?header=a%3Db&since=sometime":          `since &#34;sometime&#34;:`,
		"/messages?payload=" + strings.Repeat("x", 1001): "payload: at most 1000 bytes",
	} {
		r := s.do("GET", path, nil, alice)
		if r.code != http.StatusBadRequest || !strings.Contains(r.body, says) || !strings.Contains(r.body, `name="payload"`) {
			t.Errorf("%s: %d, want 400 saying %q with the list's filters:\n%s", path, r.code, says, r.body)
		}
	}
	if r := s.do("POST", "/retry", url.Values{"scope": {"filter"}, "status": {"failed"}, "header": {"foo"}}, alice); r.code != http.StatusBadRequest ||
		!strings.Contains(r.text, `header "foo": want KEY=VALUE`) {
		t.Errorf("a retry with a bad header: %d\n%s", r.code, r.body)
	}

	// Retry every failed message with tenant=acme and "order" in a text
	// payload within a day: acme's three, not old (too old), other or
	// binary.
	var c struct {
		Done  bool   `json:"done"`
		Count int64  `json:"count"`
		What  string `json:"what"`
	}
	form := url.Values{"scope": {"filter"}, "status": {"failed"}, "header": {"tenant=acme"}, "payload": {"order"}, "format": {"json"}}
	postJSON(t, s, "/retry", form, &c)
	if c.Done || c.Count != 3 || !strings.Contains(c.What, `with the header "tenant=acme" whose payload contains "order" enqueued within 24h`) {
		t.Fatalf("confirmation: %+v", c)
	}
	form.Set("confirm", "yes")
	postJSON(t, s, "/retry", form, &c)
	if !c.Done || c.Count != 3 {
		t.Fatalf("retry: %+v", c)
	}
	wantStates(t, "acme's", s.states(acme), cleared("a"), cleared("a"), cleared("a"))
	wantStates(t, "the others", s.states([]int64{old, other, binary}), state{Stage: "a", Status: "failed", Attempts: 2, Error: strp("boom")},
		state{Stage: "a", Status: "failed", Attempts: 2, Error: strp("boom")}, state{Stage: "a", Status: "failed", Attempts: 2, Error: strp("boom")})

	// Hold every pending message with tenant=acme enqueued within an hour.
	form = url.Values{"scope": {"filter"}, "status": {"pending"}, "header": {"tenant=acme"}, "since": {"1h"}, "format": {"json"}}
	postJSON(t, s, "/hold", form, &c)
	if c.Count != 4 {
		t.Fatalf("hold, confirmation: %+v", c)
	}
	form.Set("confirm", "yes")
	postJSON(t, s, "/hold", form, &c)
	if !c.Done || c.Count != 4 {
		t.Fatalf("hold: %+v", c)
	}
	var held []int64
	rows, err := s.conn.Query(ctx(t), `SELECT id FROM pepsi.state WHERE status = 'held' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	if held, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil || !slices.Equal(held, append(slices.Clone(acme), pending)) {
		t.Errorf("held %v, %v; want acme's and pending", held, err)
	}
}

// TestSearchTimeout: a search that runs out of time is a 400 that says
// to narrow it, on the list and for an action, not a 500 or a 503.
func TestSearchTimeout(t *testing.T) {
	// Not parallel: it sets admin.SearchTimeout.
	s := newSite(t, siteOptions{users: true, actors: []string{"alice"}, stages: []string{"a"}})
	ids := s.enqueue("a", 1, []byte("x"))
	s.fail(ids, "no")
	defer func(d time.Duration) { admin.SearchTimeout = d }(admin.SearchTimeout)
	admin.SearchTimeout = 200 * time.Millisecond
	tx, err := s.conn.Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx(t)) //nolint:errcheck // the test's own lock
	if _, err := tx.Exec(ctx(t), "LOCK TABLE pepsi.message IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	const says = "the search stopped after its time limit (200ms): narrow it"
	if r := s.do("GET", "/messages?payload=x", nil, alice); r.code != http.StatusBadRequest || !strings.Contains(r.text, says) || !strings.Contains(r.body, `name="payload" value="x"`) {
		t.Errorf("the list: %d\n%s", r.code, r.body)
	}
	if r := s.do("POST", "/retry", url.Values{"scope": {"filter"}, "status": {"failed"}, "payload": {"x"}}, alice); r.code != http.StatusBadRequest || !strings.Contains(r.text, says) {
		t.Errorf("a retry: %d\n%s", r.code, r.body)
	}
}

// cutSearch enqueues 30 messages at stage a, the 5th and the 25th with
// the header tenant=acme, the others tenant=other, and returns their ids;
// until the test ends, a page of a search reads one slice of 10 ids
// (admin.SearchSlice, admin.SearchBudget: the test must not be parallel).
func cutSearch(t *testing.T, s *site) []int64 {
	t.Helper()
	var ids []int64
	for i := range 30 {
		tenant := "other"
		if i == 4 || i == 24 {
			tenant = "acme"
		}
		got, err := s.db.EnqueueBulk(ctx(t), oneMessage("a", map[string]string{"tenant": tenant}, []byte("x")))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got[0])
	}
	t.Cleanup(func(n int64, d time.Duration) func() {
		return func() { admin.SearchSlice, admin.SearchBudget = n, d }
	}(admin.SearchSlice, admin.SearchBudget))
	admin.SearchSlice, admin.SearchBudget = 10, 0
	return ids
}

// TestSearchCut: a page of a search that runs out of its time budget
// shows what it found in the part of its window it read, says how far
// back it read and counts "or more"; its older link goes on from there,
// and the page that reaches the window's start says nothing more.
func TestSearchCut(t *testing.T) {
	// Not parallel: it sets admin.SearchSlice and admin.SearchBudget.
	s := newSite(t, siteOptions{stages: []string{"a"}})
	ids := cutSearch(t, s)
	path := "/messages?header=tenant%3Dacme"
	var pages [][]int64
	for range 4 {
		var l listJSON
		s.getJSON(path+"&format=json", req{}, &l)
		var got []int64
		for _, r := range l.Rows {
			got = append(got, r.ID)
		}
		pages = append(pages, got)
		// A page counts what it read: "or more" while the window goes on
		// beyond it, either way.
		last := l.Older == ""
		if last != (l.Cut == nil) || l.More != (l.Cut != nil || len(pages) > 1) || l.Total != int64(len(got)) {
			t.Errorf("%s: older %q, cut %v, total %d (more %v) for %v", path, l.Older, l.Cut, l.Total, l.More, got)
		}
		if last {
			break
		}
		if !strings.Contains(l.Older, "header=tenant%3Dacme") {
			t.Fatalf("older link %q lost the search", l.Older)
		}
		path = l.Older
	}
	if want := [][]int64{{ids[24]}, nil, {ids[4]}}; !slices.EqualFunc(pages, want, slices.Equal) {
		t.Errorf("pages %v, want %v", pages, want)
	}
	body := s.get("/messages?header=tenant%3Dacme", http.StatusOK, req{})
	for _, want := range []string{"this page of the search read only the messages enqueued since", ">Search older messages</a>", "1</strong> or more message"} {
		if !strings.Contains(body, want) {
			t.Errorf("a page cut short lacks %q:\n%s", want, body)
		}
	}
}

// TestListCut: a list of a stage's done messages, which no index holds,
// and a search of the errors' text read in slices as a search does: a
// page cut short says how far back it read, and its older link goes on
// from there.
func TestListCut(t *testing.T) {
	// Not parallel: it sets admin.SearchSlice and the budgets.
	s := newSite(t, siteOptions{stages: []string{"a", "b"}})
	ids := s.enqueue("a", 30, []byte("x"))
	s.exec(`UPDATE pepsi.state SET status = 'done', stage = CASE WHEN id = ANY($1) THEN 'b' ELSE 'a' END,
	               error = CASE WHEN id = ANY($1) THEN 'a needle' ELSE 'hay' END`, []int64{ids[4], ids[24]})
	defer func(n int64, d, e time.Duration) {
		admin.SearchSlice, admin.ListBudget, admin.SearchBudget = n, d, e
	}(admin.SearchSlice, admin.ListBudget, admin.SearchBudget)
	admin.SearchSlice, admin.ListBudget, admin.SearchBudget = 10, 0, 0 // one slice of 10 ids a page
	for _, first := range []string{"/messages?status=done&stage=b", "/messages?q=needle"} {
		var l listJSON
		path := first
		var got []int64
		for range 4 {
			l.Rows, l.Older, l.Cut = nil, "", nil
			s.getJSON(path+"&format=json", req{}, &l)
			for _, r := range l.Rows {
				got = append(got, r.ID)
			}
			if (l.Older == "") != (l.Cut == nil) {
				t.Errorf("%s: older %q, cut %v", path, l.Older, l.Cut)
			}
			if l.Older == "" {
				break
			}
			path = l.Older
		}
		if want := []int64{ids[24], ids[4]}; !slices.Equal(got, want) {
			t.Errorf("%s: read %v over the pages, want %v", first, got, want)
		}
		if body := s.get(first, http.StatusOK, req{}); !strings.Contains(body, ">Read older messages</a>") || !strings.Contains(body, "1</strong> or more message") {
			t.Errorf("%s: a page cut short lacks its link or its count:\n%s", first, body)
		}
	}
}

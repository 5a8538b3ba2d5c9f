package dashboard_test

import (
	"bytes"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/dashboard"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// overviewJSON is the overview's JSON, as much as the tests read.
type overviewJSON struct {
	Stages []struct {
		Stage      string           `json:"stage"`
		Configured bool             `json:"configured"`
		Counts     map[string]int64 `json:"counts"`
		Oldest     float64          `json:"oldest_pending_seconds"`
		Throughput []struct {
			Known  bool    `json:"known"`
			OK     float64 `json:"ok_per_second"`
			Failed float64 `json:"failed_per_second"`
		} `json:"throughput"`
		Owner *sessionJSON `json:"owner"`
	} `json:"stages"`
	Totals      map[string]int64 `json:"totals"`
	Dispatcher  *sessionJSON     `json:"dispatcher"`
	Dispatchers []sessionJSON    `json:"dispatchers"`
	Standbys    []sessionJSON    `json:"standbys"`
	Unowned     []string         `json:"unowned"`
}

type sessionJSON struct {
	ServerPID    int32      `json:"server_pid"`
	PID          int        `json:"pid"`
	Host         string     `json:"host"`
	Since        *time.Time `json:"since"`
	WaitingSince *time.Time `json:"waiting_since"`
	All          bool       `json:"all"`
	Stages       []string   `json:"stages"`
	WaitsFor     string     `json:"waits_for"`
}

// TestOverview: counts per stage and status (configured stages first, in
// their order, then the others), the oldest pending message's age, who
// owns the stages, the standbys; as HTML and as JSON.
func TestOverview(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{stages: []string{"parse", "store", "idle"}})
	var o overviewJSON
	s.getJSON("/", req{}, &o)
	if o.Dispatcher != nil || len(o.Standbys) != 0 || len(o.Stages) != 3 || o.Stages[2].Stage != "idle" || o.Stages[0].Owner != nil {
		t.Fatalf("empty queue, no dispatcher: %+v", o)
	}
	if body := s.get("/", http.StatusOK, req{}); !strings.Contains(body, "No dispatcher runs") {
		t.Errorf("no dispatcher, and the page does not say so:\n%s", body)
	}

	parse := s.enqueue("parse", 5, nil)
	s.enqueue("store", 2, nil)
	s.enqueue("zzz", 1, nil)
	s.fail(parse[:2], "no")
	s.exec(`UPDATE pepsi.state SET updated_at = now() - interval '1 hour' WHERE id = $1`, parse[2])
	holder := holdLock(t, s.dsn)
	sb := standby(t, s.dsn)
	testkit.Wait(t, "the standby and the new counts", time.Minute, func() bool {
		o = overviewJSON{}
		s.getJSON("/", req{}, &o)
		return len(o.Standbys) == 1 && o.Standbys[0].WaitingSince != nil && o.Totals["pending"] == 6
	})
	var names []string
	for _, st := range o.Stages {
		names = append(names, st.Stage)
	}
	if !slices.Equal(names, []string{"parse", "store", "idle", "zzz"}) {
		t.Errorf("stages %v", names)
	}
	p := o.Stages[0]
	if p.Counts["pending"] != 3 || p.Counts["failed"] != 2 || p.Counts["done"] != 0 || !p.Configured || o.Stages[3].Configured {
		t.Errorf("parse: %+v", p)
	}
	if p.Oldest < 3500 || p.Oldest > 3700 {
		t.Errorf("parse's oldest pending: %v s, want about an hour", p.Oldest)
	}
	d := o.Dispatcher
	if d == nil || d.ServerPID != int32(holder.PID()) || d.PID == 0 || d.Host == "" || d.Since == nil {
		t.Fatalf("dispatcher: %+v", d)
	}
	if p.Owner == nil || p.Owner.ServerPID != d.ServerPID || o.Stages[3].Owner == nil || !d.All ||
		len(o.Dispatchers) != 1 || len(o.Unowned) != 0 {
		t.Errorf("the dispatcher does not own every stage: %+v, %+v", p.Owner, o)
	}
	if sd := o.Standbys[0]; sd.ServerPID != int32(sb.PID()) || sd.WaitingSince == nil {
		t.Errorf("standby: %+v", sd)
	}
	if len(p.Throughput) != 15 {
		t.Errorf("throughput: %d bins", len(p.Throughput))
	}

	body := s.get("/", http.StatusOK, req{})
	for _, want := range []string{
		"pid " + strconv.Itoa(d.PID) + " on " + d.Host,
		"(server pid " + strconv.Itoa(int(d.ServerPID)) + ")",
		"Standbys waiting",
		"(server pid " + strconv.Itoa(int(sb.PID())) + ")",
		`href="/messages?stage=parse&amp;status=failed"`,
		`<svg class="chart"`,
		"not configured",
		"1 h", // the oldest pending
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview lacks %q", want)
		}
	}
}

// TestOverviewStageSets: while dispatchers with stage sets run, each
// stage's owner is the one whose set has it, a stage in no set has none
// and is named as such, and a set's standby says which stage it waits for.
func TestOverviewStageSets(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{stages: []string{"parse", "store", "idle"}})
	s.enqueue("store", 2, nil)
	store := ownStages(t, s.dsn, "store")
	sb := standbyFor(t, s.dsn, "store")
	var o overviewJSON
	testkit.Wait(t, "the standby", time.Minute, func() bool {
		o = overviewJSON{}
		s.getJSON("/", req{}, &o)
		return len(o.Standbys) == 1
	})
	if o.Dispatcher != nil || len(o.Dispatchers) != 1 {
		t.Fatalf("dispatchers: %+v, %+v", o.Dispatcher, o.Dispatchers)
	}
	d := o.Dispatchers[0]
	if d.ServerPID != int32(store.PID()) || d.All || !slices.Equal(d.Stages, []string{"store"}) || d.PID == 0 {
		t.Errorf("the set's dispatcher: %+v", d)
	}
	if o.Stages[0].Owner != nil || o.Stages[1].Owner == nil || o.Stages[1].Owner.ServerPID != d.ServerPID || o.Stages[2].Owner != nil {
		t.Errorf("owners: parse %+v, store %+v, idle %+v", o.Stages[0].Owner, o.Stages[1].Owner, o.Stages[2].Owner)
	}
	if !slices.Equal(o.Unowned, []string{"parse", "idle"}) {
		t.Errorf("unowned %v", o.Unowned)
	}
	if w := o.Standbys[0]; w.ServerPID != int32(sb.PID()) || w.WaitsFor != "store" {
		t.Errorf("standby: %+v", w)
	}
	body := s.get("/", http.StatusOK, req{})
	for _, want := range []string{
		"(server pid " + strconv.Itoa(int(d.ServerPID)) + ")",
		"it owns stage store.",
		"No dispatcher owns stages parse, idle: their messages wait.",
		"(server pid " + strconv.Itoa(int(sb.PID())) + "), for stage store",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview lacks %q", want)
		}
	}
	if strings.Contains(body, "owns every stage") || strings.Contains(body, "No dispatcher runs") {
		t.Errorf("the overview says one dispatcher owns every stage, or none runs:\n%s", body)
	}
}

// TestFailures: groups by stage and reason, the largest first, each with
// its messages; filtered by stage.
func TestFailures(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{stages: []string{"a", "b"}})
	a := s.enqueue("a", 6, nil)
	b := s.enqueue("b", 2, nil)
	for i, id := range a[:4] {
		s.fail([]int64{id}, "order "+strconv.Itoa(100+i)+" rejected")
	}
	s.fail(a[4:], "timeout")
	s.fail(b, "order 7 rejected")

	var f struct {
		Groups []struct {
			Stage, Reason string
			Count         int64
			NewestID      int64  `json:"newest_id"`
			Messages      string `json:"messages_url"`
		} `json:"groups"`
		Total int64 `json:"total"`
	}
	s.getJSON("/failures", req{}, &f)
	if f.Total != 8 || len(f.Groups) != 3 || f.Groups[0].Stage != "a" || f.Groups[0].Reason != "order N rejected" || f.Groups[0].Count != 4 || f.Groups[0].NewestID != a[3] {
		t.Fatalf("groups: %+v", f)
	}
	// A group's link lists the group, and nothing else.
	var m struct {
		Rows []struct{ ID int64 } `json:"rows"`
	}
	s.getJSON(f.Groups[0].Messages, req{}, &m)
	var got []int64
	for _, r := range m.Rows {
		got = append(got, r.ID)
	}
	want := slices.Clone(a[:4])
	slices.Reverse(want)
	if !slices.Equal(got, want) {
		t.Errorf("the group's messages: %v, want %v", got, want)
	}
	s.getJSON("/failures?stage=b", req{}, &f)
	if len(f.Groups) != 1 || f.Groups[0].Stage != "b" {
		t.Errorf("stage b: %+v", f.Groups)
	}
	body := s.get("/failures", http.StatusOK, req{})
	if !strings.Contains(body, `<code class="reason">order N rejected</code>`) || !strings.Contains(body, "8 failed messages in 3 groups") {
		t.Errorf("the failures page:\n%s", body)
	}
	if strings.Contains(body, `action="/retry"`) {
		t.Error("a read-only dashboard offers to retry")
	}
}

// messageIDs follows a list from path through its older pages, and
// returns every id seen and the number of pages.
func messageIDs(t *testing.T, s *site, path string) ([]int64, int) {
	t.Helper()
	var ids []int64
	pages := 0
	for path != "" {
		var m struct {
			Rows  []struct{ ID int64 } `json:"rows"`
			Older string               `json:"older_url"`
		}
		s.getJSON(path, req{}, &m)
		for _, r := range m.Rows {
			ids = append(ids, r.ID)
		}
		pages++
		path = m.Older
		if pages > 100 {
			t.Fatal("more than 100 pages")
		}
	}
	return ids, pages
}

// TestMessages: filters, keyset pages both ways, bad filters.
func TestMessages(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{stages: []string{"a", "b"}})
	a := s.enqueue("a", 25, []byte("x"))
	b := s.enqueue("b", 5, []byte("y"))
	s.fail(a[:3], "Out Of Stock")
	s.exec(`UPDATE pepsi.state SET status = 'done', updated_at = now() - interval '3 days' WHERE id = ANY($1)`, b[:2])
	desc := func(ids ...[]int64) []int64 {
		out := slices.Concat(ids...)
		slices.Sort(out)
		slices.Reverse(out)
		return out
	}

	all, pages := messageIDs(t, s, "/messages?limit=7")
	if !slices.Equal(all, desc(a, b)) || pages != 5 {
		t.Errorf("every message in pages of 7: %d pages, %v", pages, all)
	}
	for _, tc := range []struct {
		path string
		want []int64
	}{
		{"/messages?stage=b", desc(b)},
		{"/messages?status=failed", desc(a[:3])},
		{"/messages?stage=a&status=pending&limit=4", desc(a[3:])},
		{"/messages?older=2d", desc(b[:2])},
		{"/messages?older=1d12h&status=done&stage=b", desc(b[:2])},
		{"/messages?newer=1h&stage=b", desc(b[2:])},
		{"/messages?q=out+of", desc(a[:3])},
		{"/messages?q=nothing+like+it", nil},
		{"/messages?reason=Out+Of+Stock&status=failed&stage=a", desc(a[:3])},
	} {
		if got, _ := messageIDs(t, s, tc.path); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.path, got, tc.want)
		}
	}

	// Back up: the newer link of the third page of 10 is the second page.
	var p struct {
		Rows  []struct{ ID int64 } `json:"rows"`
		Newer string               `json:"newer_url"`
		Older string               `json:"older_url"`
	}
	s.getJSON("/messages?limit=10&before="+strconv.FormatInt(desc(a, b)[19], 10), req{}, &p)
	if len(p.Rows) != 10 || p.Newer == "" || p.Older != "" {
		t.Fatalf("the last page: %+v", p)
	}
	newer := p.Newer
	s.getJSON(newer, req{}, &p)
	if len(p.Rows) != 10 || p.Rows[0].ID != desc(a, b)[10] || p.Older == "" || p.Newer == "" {
		t.Errorf("%s: %+v", newer, p)
	}

	// The HTML: the filters are kept in the form and the pager's links.
	body := s.get("/messages?stage=a&limit=10", http.StatusOK, req{})
	for _, want := range []string{`name="stage" value="a"`, `rel="next" href="/messages?before=` + strconv.FormatInt(desc(a)[9], 10) + `&amp;limit=10&amp;stage=a"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the list lacks %q", want)
		}
	}
	if body := s.get("/messages?status=failed", http.StatusOK, req{}); !strings.Contains(body, `<td class="error">Out Of Stock</td>`) {
		t.Errorf("the failed messages lack their error:\n%s", body)
	}

	for _, tc := range []struct{ query, want string }{
		{"status=lost", `status: unknown status "lost"`},
		{"older=soon", `older "soon": want seconds or a duration`},
		{"newer=-5m", `newer "-5m": want seconds`},
		{"before=0", `before "0": want a message id`},
		{"after=x", `after "x": want a message id`},
		{"limit=5000", `limit "5000": want a number from 1 to 1000`},
		{"q=" + strings.Repeat("x", 1001), "at most 1000 bytes"},
	} {
		r := s.do("GET", "/messages?"+tc.query, nil, req{})
		if r.code != http.StatusBadRequest || !strings.Contains(r.text, tc.want) {
			t.Errorf("%s: %d, want 400 saying %q:\n%s", tc.query, r.code, tc.want, r.body)
		}
		r = s.do("GET", "/messages?format=json&"+tc.query, nil, req{})
		if r.code != http.StatusBadRequest || !strings.Contains(r.body, `"error"`) {
			t.Errorf("%s as JSON: %d %s", tc.query, r.code, r.body)
		}
	}
}

// TestMessage: the state, the headers, the payload as text or a hex dump,
// its first 64 KiB and the whole as a download.
func TestMessage(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{})
	ctxT := ctx(t)
	text, err := s.db.EnqueueBulk(ctxT, oneMessage("a", map[string]string{"order": "42", "from": "shop"}, []byte("hello, wörld")))
	if err != nil {
		t.Fatal(err)
	}
	bin := s.enqueue("a", 1, []byte{0xff, 0x00, 'A', 'B', 0xfe})
	big := bytes.Repeat([]byte("é"), 40<<10) // 80 KiB of two-byte characters
	large := s.enqueue("a", 1, big)
	s.fail(text, "bad order")
	s.exec(`UPDATE pepsi.state SET dispatch_error = 'exit 1 # no', priority = -4, dedup_key = 'order-42' WHERE id = $1`, text[0])
	// A pending message at a stage with KEY, behind an earlier one of its key.
	keyed := s.enqueue("a", 2, []byte("k"))
	s.exec(`UPDATE pepsi.state SET flow_key = 'acme' WHERE id = ANY($1)`, keyed)

	id := strconv.FormatInt(text[0], 10)
	body := s.get("/messages/"+id, http.StatusOK, req{})
	for _, want := range []string{"Message " + id, "hello, wörld", "bad order", "exit 1 # no", "<th>order</th><td><code>42</code>",
		"<th>priority</th><td>-4</td>", "<th>key</th><td><code>order-42</code>",
		`href="/messages?reason=bad+order&stage=a&status=failed"`, "13 bytes", "as text"} {
		if !strings.Contains(html.UnescapeString(body), want) {
			t.Errorf("the message page lacks %q", want)
		}
	}
	k1, k2 := strconv.FormatInt(keyed[0], 10), strconv.FormatInt(keyed[1], 10)
	body = s.get("/messages/"+k2, http.StatusOK, req{})
	if want := `<th>flow key</th><td><code>acme</code> (waits behind <a href="/messages/` + k1 + `">` + k1 + `</a>)`; !strings.Contains(body, want) {
		t.Errorf("the keyed message's page lacks %q", want)
	}
	if body = s.get("/messages/"+id, http.StatusOK, req{}); strings.Contains(body, "flow key") {
		t.Error("a message without a key shows a flow key")
	}
	var m struct {
		Message struct {
			ID     int64  `json:"id"`
			Status string `json:"status"`
			Error  string `json:"error"`
		} `json:"message"`
		Payload struct {
			Size      int64  `json:"size"`
			Text      string `json:"text"`
			IsText    bool   `json:"is_text"`
			Base64    []byte `json:"base64"`
			Truncated bool   `json:"truncated"`
			Shown     int64  `json:"shown"`
			Download  string `json:"download_url"`
		} `json:"payload"`
		Reason string `json:"reason"`
	}
	s.getJSON("/messages/"+id, req{}, &m)
	if m.Message.ID != text[0] || m.Message.Status != "failed" || m.Payload.Text != "hello, wörld" || !m.Payload.IsText || m.Reason != "bad order" {
		t.Errorf("as JSON: %+v", m)
	}

	body = s.get("/messages/"+strconv.FormatInt(bin[0], 10), http.StatusOK, req{})
	if !strings.Contains(body, "not UTF-8: a hex dump") || !strings.Contains(body, "00000000  ff 00 41 42 fe") || !strings.Contains(body, "|..AB.|") {
		t.Errorf("binary payload:\n%s", body)
	}
	s.getJSON("/messages/"+strconv.FormatInt(bin[0], 10), req{}, &m)
	if m.Payload.IsText || !bytes.Equal(m.Payload.Base64, []byte{0xff, 0x00, 'A', 'B', 0xfe}) {
		t.Errorf("binary payload as JSON: %+v", m.Payload)
	}

	// 80 KiB: 64 KiB shown, as text (the cut does not split a character),
	// the whole in the download.
	lid := strconv.FormatInt(large[0], 10)
	s.getJSON("/messages/"+lid, req{}, &m)
	if !m.Payload.IsText || !m.Payload.Truncated || m.Payload.Shown != 64<<10 || m.Payload.Size != int64(len(big)) || len(m.Payload.Text) != 64<<10 {
		t.Errorf("large payload: shown %d of %d, text %v (%d bytes), truncated %v", m.Payload.Shown, m.Payload.Size, m.Payload.IsText, len(m.Payload.Text), m.Payload.Truncated)
	}
	r := s.do("GET", m.Payload.Download, nil, req{})
	if r.code != http.StatusOK || r.body != string(big) || r.header.Get("Content-Type") != "application/octet-stream" ||
		!strings.Contains(r.header.Get("Content-Disposition"), `attachment; filename="message-`+lid+`.bin"`) {
		t.Errorf("download: %d, %d bytes, %v", r.code, len(r.body), r.header)
	}
	if body := s.get("/messages/"+lid, http.StatusOK, req{}); !strings.Contains(body, "the first 65\u202f536 shown") {
		t.Error("the page does not say the payload is cut")
	}

	for path, code := range map[string]int{"/messages/0": 400, "/messages/abc": 400, "/messages/999999": 404, "/messages/999999/payload": 404, "/nowhere": 404} {
		if r := s.do("GET", path, nil, req{}); r.code != code {
			t.Errorf("%s: %d, want %d", path, r.code, code)
		}
	}
}

// TestHostileText: text that came from a message, a header, an error or a
// stage name is escaped on every page, and no page runs a script that
// the server did not serve as a file of its own.
func TestHostileText(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{users: true, actors: []string{"alice"}})
	const script = `<script>alert("pwned")</script>`
	const stage = `<img src=x onerror=alert(1)>`
	ids, err := s.db.EnqueueBulk(ctx(t), oneMessage(stage, map[string]string{script: script}, []byte(script)))
	if err != nil {
		t.Fatal(err)
	}
	s.fail(ids, script)
	s.exec(`UPDATE pepsi.state SET dispatch_error = $2 WHERE id = $1`, ids[0], "</pre>"+script)
	id := strconv.FormatInt(ids[0], 10)
	// The overview shows the sampler's last count: wait for it.
	testkit.Wait(t, "the hostile stage on the overview", time.Minute, func() bool {
		var o overviewJSON
		s.getJSON("/", alice, &o)
		return len(o.Stages) == 1 && o.Stages[0].Stage == stage
	})
	inline := regexp.MustCompile(`(?i)<script(\s[^>]*)?>`)
	for _, path := range []string{"/", "/failures", "/messages", "/messages?status=failed&q=" + url.QueryEscape(script),
		"/messages?stage=" + url.QueryEscape(stage), "/messages/" + id,
		"/messages?header=" + url.QueryEscape(script+"="+script) + "&payload=" + url.QueryEscape(script),
		"/messages?header=" + url.QueryEscape(stage) + "&since=" + url.QueryEscape("1d")} {
		r := s.do("GET", path, nil, alice)
		if r.code != http.StatusOK {
			t.Errorf("%s: %d", path, r.code)
			continue
		}
		for _, tag := range inline.FindAllString(r.body, -1) {
			if tag != `<script src="/static/dash.js" defer>` && tag != `<script src="/static/theme.js">` {
				t.Errorf("%s: a script tag the server did not write: %s", path, tag)
			}
		}
		if strings.Contains(r.body, "<img") || strings.Contains(r.body, "alert(\"pwned\")") {
			t.Errorf("%s: hostile text unescaped:\n%s", path, r.body)
		}
		if !strings.Contains(r.body, "&lt;") {
			t.Errorf("%s: the hostile text is not shown at all", path)
		}
		csp := r.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
		if r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", path, r.header)
		}
	}
	// A search found it (its header and payload), and a bad one says so,
	// escaped.
	if body := s.get("/messages?header="+url.QueryEscape(script+"="+script)+"&payload="+url.QueryEscape(script), http.StatusOK, alice); !strings.Contains(body, `value="`+id+`"`) {
		t.Errorf("the search did not find the hostile message:\n%s", body)
	}
	for _, q := range []string{"header=" + url.QueryEscape(script), "since=" + url.QueryEscape(script)} {
		r := s.do("GET", "/messages?"+q, nil, alice)
		if r.code != http.StatusBadRequest || strings.Contains(r.body, "<img") || strings.Contains(r.body, "alert(\"pwned\")") || !strings.Contains(r.body, "&lt;") {
			t.Errorf("/messages?%s: %d, unescaped or not shown:\n%s", q, r.code, r.body)
		}
	}
	// The hostile group can be retried: its confirmation escapes it too.
	r := s.do("POST", "/retry", url.Values{"status": {"failed"}, "stage": {stage}, "reason": {script}}, alice)
	if r.code != http.StatusOK || strings.Contains(r.body, "<img") || !strings.Contains(r.body, "<strong>1</strong> message now") {
		t.Errorf("confirmation: %d\n%s", r.code, r.body)
	}
	// JSON is JSON, with the text as it is.
	var m struct {
		Message struct{ Stage, Error string } `json:"message"`
	}
	s.getJSON("/messages/"+id, alice, &m)
	if m.Message.Stage != stage || m.Message.Error != script {
		t.Errorf("JSON: %+v", m)
	}
	if r := s.do("GET", "/messages/"+id, nil, req{user: "alice", pass: alicePass, accept: "application/json"}); r.header.Get("Content-Type") != "application/json" {
		t.Errorf("Accept: application/json gave %s", r.header.Get("Content-Type"))
	}
}

// TestThroughput: the server samples pepsi.stage_stats while it runs, and
// the overview's chart shows what the dispatcher's statistics add.
func TestThroughput(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{stages: []string{"a"}, options: func(o *dashboard.Options) {
		o.SampleEvery, o.Window = 50*time.Millisecond, 3*time.Second
	}})
	bars := func() (known int, ok, failed float64) {
		var o overviewJSON
		s.getJSON("/", req{}, &o)
		for _, b := range o.Stages[0].Throughput {
			if b.Known {
				known++
			}
			if b.OK > 0 {
				ok, failed = b.OK, b.Failed
			}
		}
		return known, ok, failed
	}
	testkit.Wait(t, "a few samples", time.Minute, func() bool { known, _, _ := bars(); return known >= 2 })
	if err := s.db.AddStats(ctx(t), []queue.StageStats{{Stage: "a", Processed: 30, Failed: 3}}, queue.DispatchStats{}); err != nil {
		t.Fatal(err)
	}
	var ok, failed float64
	testkit.Wait(t, "the passes in a bar", time.Minute, func() bool { _, ok, failed = bars(); return ok > 0 })
	if ratio := ok / failed; ratio < 9.999 || ratio > 10.001 {
		t.Errorf("a bar has %v ok and %v failed per second, want 10 to 1", ok, failed)
	}
	body := s.get("/", http.StatusOK, req{})
	if !strings.Contains(body, `<rect class="ok"`) || !strings.Contains(body, `<rect class="failed"`) {
		t.Errorf("the chart has no bars:\n%s", body)
	}
}

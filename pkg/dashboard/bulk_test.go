package dashboard_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestBulk: the list offers its actions above the messages, on the ticked
// ones or on every one the filter matches, with the total (and none on no
// message); a retry of ticked messages at another stage with a priority, a
// retry of a filter with text, a purge of ticked messages that leaves the
// unfinished ones alone, a purge of a failure group; each confirmed with
// its count first, then done and answered with a redirect to its result,
// which a reload shows again without acting again, to its user alone.
func TestBulk(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{users: true, actors: []string{"alice"}, stages: []string{"a", "b"}})
	a := s.enqueue("a", 8, nil)
	for i, id := range a[:6] {
		s.fail([]int64{id}, "boom "+itoa(int64(i)))
	}
	s.exec(`UPDATE pepsi.state SET status = 'done' WHERE id = ANY($1)`, a[6:])
	pend := s.enqueue("a", 2, nil)
	b := s.enqueue("b", 2, nil)
	s.fail(b, "upstream 503 after 30s")

	// The list: the total, the action bar above the messages.
	body := s.get("/messages?stage=a&status=failed", http.StatusOK, alice)
	bar, list := strings.Index(body, `<form id="act" class="bulk"`), strings.Index(body, `<table class="messages">`)
	if bar < 0 || list < 0 || bar > list {
		t.Errorf("the action bar is not above the list (%d, %d):\n%s", bar, list, body)
	}
	for _, want := range []string{"<strong>6</strong> messages match", `<input type="checkbox" name="id" value="` + itoa(a[0]) + `" form="act"`,
		"All 6 matching:", `formaction="/retry" class="ticked"`, `formaction="/purge" class="all"`, `<select name="to_stage">`, `name="priority"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the list of failed messages lacks %q", want)
		}
	}
	if body := s.get("/messages?stage=a&status=failed", http.StatusOK, bob); strings.Contains(body, `name="id"`) || strings.Contains(body, `class="bulk"`) {
		t.Error("bob is offered the bulk actions")
	}
	if body := s.get("/messages?stage=nowhere&status=failed", http.StatusOK, alice); strings.Contains(body, `class="bulk"`) || strings.Contains(body, `name="id"`) {
		t.Errorf("a list of no message offers an action")
	}
	if body := s.get("/messages?stage=a&status=pending", http.StatusOK, alice); strings.Contains(body, `formaction="/retry"`) ||
		strings.Contains(body, `formaction="/purge"`) || !strings.Contains(body, `formaction="/hold" class="ticked"`) {
		t.Errorf("pending messages: offered a retry or a purge, or no hold:\n%s", body)
	}
	for path, want := range map[string]string{
		"/messages?q=boom&stage=a":                                     "<strong>6</strong> messages match",
		"/messages?stage=a&limit=3":                                    "<strong>10</strong> messages match", // pages of 3
		"/messages?q=boom&stage=a&limit=2":                             "<strong>6</strong> messages match",
		"/messages?stage=a&status=done":                                "<strong>2</strong> messages match",
		"/messages?stage=b&status=done":                                "<strong>0</strong> messages match",
		"/messages?stage=a&status=failed&limit=1&before=" + itoa(a[1]): "<strong>6</strong> messages match",
	} {
		if body := s.get(path, http.StatusOK, alice); !strings.Contains(body, want) {
			t.Errorf("%s: no %q:\n%s", path, want, body)
		}
	}

	// Retry two ticked messages at stage b with priority -3.
	form := url.Values{"scope": {"selected"}, "id": {itoa(a[0]), itoa(a[1])}, "to_stage": {"b"}, "priority": {"-3"},
		"stage": {"a"}, "status": {"failed"}} // the list's filters, posted beside: they do not apply
	r := s.do("POST", "/retry", form, alice)
	if r.code != http.StatusOK || !strings.Contains(r.text, "<strong>2</strong> messages now") ||
		!strings.Contains(r.text, "the 2 ticked messages ("+itoa(a[0])+", "+itoa(a[1])+"), at stage b with priority -3") {
		t.Fatalf("confirmation: %d\n%s", r.code, r.body)
	}
	form.Set("confirm", "yes")
	r = s.do("POST", "/retry", form, req{user: "alice", pass: alicePass, noFollow: true})
	result := r.header.Get("Location")
	if r.code != http.StatusSeeOther || !strings.HasPrefix(result, "/actions/") {
		t.Fatalf("the retry answered %d, Location %q, not a redirect to its result", r.code, result)
	}
	var prio []int32
	for _, id := range a[:2] {
		var p int32
		if err := s.conn.QueryRow(ctx(t), `SELECT priority FROM pepsi.state WHERE id = $1`, id).Scan(&p); err != nil {
			t.Fatal(err)
		}
		prio = append(prio, p)
	}
	wantStates(t, "the ticked", s.states(a[:2]), cleared("b"))
	if prio[0] != -3 || prio[1] != -3 {
		t.Errorf("priorities %v, want -3", prio)
	}
	wantStates(t, "not ticked", s.states(a[2:3]), state{Stage: "a", Status: "failed", Attempts: 2, Error: strp("boom 2")})
	// The result, as often as asked, acting once.
	s.exec(`UPDATE pepsi.state SET status = 'failed', error = 'again' WHERE id = $1`, a[0])
	for range 2 {
		if body := s.get(result, http.StatusOK, alice); !strings.Contains(body, "Retried 2 messages: the 2 ticked messages") {
			t.Errorf("the result page:\n%s", body)
		}
	}
	wantStates(t, "after reloading the result", s.states(a[:1]), state{Stage: "b", Status: "failed", Error: strp("again")})
	if r := s.do("GET", result, nil, bob); r.code != http.StatusNotFound {
		t.Errorf("bob sees alice's result: %d", r.code)
	}
	if r := s.do("GET", "/actions/0123456789abcdef", nil, alice); r.code != http.StatusNotFound {
		t.Errorf("a made-up result: %d", r.code)
	}

	// Every failed message at a whose error has "boom 3": a filter pepsi
	// queue retry has not, as JSON.
	var c struct {
		Done      bool   `json:"done"`
		Count     int64  `json:"count"`
		Live      int64  `json:"live_left_alone"`
		ResultURL string `json:"result_url"`
	}
	form = url.Values{"scope": {"filter"}, "stage": {"a"}, "status": {"failed"}, "q": {"BOOM 3"}, "format": {"json"}}
	postJSON(t, s, "/retry", form, &c)
	if c.Done || c.Count != 1 {
		t.Fatalf("text filter, confirmation: %+v", c)
	}
	form.Set("confirm", "yes")
	postJSON(t, s, "/retry", form, &c)
	if !c.Done || c.Count != 1 || !strings.HasPrefix(c.ResultURL, "/actions/") {
		t.Fatalf("text filter, retry: %+v", c)
	}
	wantStates(t, "boom 3", s.states(a[3:4]), cleared("a"))
	wantStates(t, "boom 4", s.states(a[4:5]), state{Stage: "a", Status: "failed", Attempts: 2, Error: strp("boom 4")})

	// Purge ticked messages: the done one goes, the pending one stays.
	form = url.Values{"scope": {"selected"}, "id": {itoa(a[6]), itoa(pend[0])}}
	r = s.do("POST", "/purge", form, alice)
	if !strings.Contains(r.text, "<strong>1</strong> message now") || !strings.Contains(r.text, "1 unfinished") {
		t.Fatalf("purge of ticked, confirmation:\n%s", r.body)
	}
	form.Set("confirm", "yes")
	if r = s.do("POST", "/purge", form, alice); r.code != http.StatusOK || !strings.Contains(r.text, "Purged 1 message: the 2 ticked messages") {
		t.Fatalf("purge of ticked: %d\n%s", r.code, r.body)
	}
	if st := s.states([]int64{a[6], pend[0]}); st[0].Status != "" || st[1].Status != "pending" {
		t.Errorf("after the purge: %+v", st)
	}
	// Purge a failure group from the failures page's form.
	form = url.Values{"scope": {"filter"}, "status": {"failed"}, "stage": {"b"}, "reason": {"upstream N after Ns"}}
	if r = s.do("POST", "/purge", form, alice); !strings.Contains(r.text, "<strong>2</strong> messages now") {
		t.Fatalf("purge of a group, confirmation:\n%s", r.body)
	}
	form.Set("confirm", "yes")
	if r = s.do("POST", "/purge", form, alice); !strings.Contains(r.text, "Purged 2 messages") {
		t.Fatalf("purge of a group:\n%s", r.body)
	}
	if st := s.states(b); st[0].Status != "" || st[1].Status != "" {
		t.Errorf("the group after its purge: %+v", st)
	}

	// Never an action on no message; mistakes are 400.
	r = s.do("POST", "/retry", url.Values{"status": {"failed"}, "stage": {"nowhere"}}, alice)
	if r.code != http.StatusOK || strings.Contains(r.body, `name="confirm"`) || !strings.Contains(r.text, "Nothing to do") {
		t.Errorf("a retry of no message offers to confirm it:\n%s", r.body)
	}
	for _, tc := range []struct {
		path string
		form url.Values
		says string
	}{
		{"/retry", url.Values{"scope": {"selected"}, "status": {"failed"}}, "no message is ticked"},
		{"/purge", url.Values{"scope": {"selected"}}, "no message is ticked"},
		{"/retry", url.Values{"scope": {"everything"}}, `scope "everything"`},
		{"/retry", url.Values{"id": {itoa(a[2])}, "to_stage": {"nowhere"}}, `to_stage "nowhere": no [stage-nowhere] in pepsi.conf`},
		{"/retry", url.Values{"id": {itoa(a[2])}, "priority": {"soon"}}, `priority "soon": want an integer`},
		{"/retry", url.Values{"scope": {"filter"}, "stage": {"a"}}, "a retry of a list's messages takes a status"},
		{"/purge", url.Values{"scope": {"filter"}, "status": {"pending"}}, "the dashboard purges done, failed or cancelled messages only"},
	} {
		if r := s.do("POST", tc.path, tc.form, alice); r.code != http.StatusBadRequest || !strings.Contains(r.text, tc.says) {
			t.Errorf("POST %s %v: %d, want 400 saying %q\n%s", tc.path, tc.form, r.code, tc.says, r.body)
		}
	}
	logs := s.logs.String()
	if n := strings.Count(logs, `msg="dashboard: retried" user=alice`); n != 2 {
		t.Errorf("%d retries logged, want 2:\n%s", n, logs)
	}
	if n := strings.Count(logs, `msg="dashboard: purged" user=alice`); n != 2 {
		t.Errorf("%d purges logged, want 2:\n%s", n, logs)
	}
}

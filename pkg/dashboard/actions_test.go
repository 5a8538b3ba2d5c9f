package dashboard_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// cleared is a row after a retry, as pepsi queue retry leaves it: pending
// at its stage, attempts, timeout and errors cleared.
func cleared(stage string) state { return state{Stage: stage, Status: "pending"} }

func wantStates(t *testing.T, what string, got []state, want ...state) {
	t.Helper()
	for i := range got {
		w := want[min(i, len(want)-1)]
		g := got[i]
		if g.Stage != w.Stage || g.Status != w.Status || g.Attempts != w.Attempts ||
			(g.Error == nil) != (w.Error == nil) || (g.DispatchError == nil) != (w.DispatchError == nil) || (g.Timeout == nil) != (w.Timeout == nil) {
			t.Errorf("%s: row %d is %+v, want %+v", what, i, g, w)
		}
	}
}

func strp(s string) *string { return &s }

// TestActionsRefused: without a web configuration the dashboard is
// read-only; with one, an action is refused without credentials, with a
// user who may not act, and from another origin; the rows stay as they are.
func TestActionsRefused(t *testing.T) {
	t.Parallel()
	retry := func(id string) url.Values { return url.Values{"id": {id}, "confirm": {"yes"}} }

	ro := newSite(t, siteOptions{})
	ids := ro.enqueue("a", 1, nil)
	ro.fail(ids, "no")
	id := itoa(ids[0])
	r := ro.do("POST", "/retry", retry(id), req{})
	if r.code != http.StatusForbidden || !strings.Contains(r.text, "the dashboard is read-only: pepsi httpd runs without a web configuration") {
		t.Errorf("no web configuration: %d\n%s", r.code, r.body)
	}
	if r := ro.do("POST", "/purge", url.Values{"status": {"failed"}, "older": {"0"}, "confirm": {"yes"}}, req{}); r.code != http.StatusForbidden {
		t.Errorf("purge without a web configuration: %d", r.code)
	}
	wantStates(t, "read-only", ro.states(ids), state{Stage: "a", Status: "failed", Attempts: 2, Error: strp("no")})

	s := newSite(t, siteOptions{users: true, actors: []string{"alice"}})
	ids = s.enqueue("a", 1, nil)
	s.fail(ids, "no")
	id = itoa(ids[0])
	for _, tc := range []struct {
		what string
		o    req
		code int
		says string
	}{
		{"no credentials", req{}, http.StatusUnauthorized, "Unauthorized"},
		{"a wrong password", req{user: "alice", pass: "guess"}, http.StatusUnauthorized, "Unauthorized"},
		{"a read-only user", bob, http.StatusForbidden, `user "bob" may not act (not in ACTION_USERS)`},
		{"another origin", req{user: "alice", pass: alicePass, origin: "http://evil.example"}, http.StatusForbidden, "cross-origin request refused"},
		{"a cross-site fetch", req{user: "alice", pass: alicePass, fetchSite: "cross-site"}, http.StatusForbidden, "cross-origin request refused"},
	} {
		r := s.do("POST", "/retry", retry(id), tc.o)
		if r.code != tc.code || !strings.Contains(r.text, tc.says) {
			t.Errorf("%s: %d, want %d saying %q\n%s", tc.what, r.code, tc.code, tc.says, r.body)
		}
	}
	wantStates(t, "refused", s.states(ids), state{Stage: "a", Status: "failed", Attempts: 2, Error: strp("no")})
	if !strings.Contains(s.logs.String(), "refused a cross-origin request") {
		t.Error("the cross-origin request was not logged")
	}
	// Every page and /metrics need a user; bob may look.
	for _, path := range []string{"/", "/failures", "/messages", "/messages/" + id, "/metrics", "/static/style.css"} {
		if r := s.do("GET", path, nil, req{}); r.code != http.StatusUnauthorized {
			t.Errorf("GET %s without credentials: %d", path, r.code)
		}
		if r := s.do("GET", path, nil, bob); r.code != http.StatusOK {
			t.Errorf("GET %s as bob: %d", path, r.code)
		}
	}
	// Bob is shown no action.
	if body := s.get("/messages?status=failed", http.StatusOK, bob); strings.Contains(body, `action="/retry"`) || !strings.Contains(body, "bob · read-only") {
		t.Error("bob is offered an action, or not told he is read-only")
	}
}

// TestRetryRunningStageSet: while a dispatcher with a stage set runs, a
// running message handed out at one of its stages is held (wherever it
// advanced to), and one at a stage no dispatcher owns is an orphan and
// retried; by id and by status, the confirmation saying what the retry
// does.
func TestRetryRunningStageSet(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{users: true, actors: []string{"alice"}})
	owned := s.enqueue("a", 1, nil)
	orphan := s.enqueue("b", 1, nil)
	s.exec(`UPDATE pepsi.state SET status = 'running' WHERE id = ANY($1)`, append(slices.Clone(owned), orphan...))
	ownStages(t, s.dsn, "a")

	r := s.do("POST", "/retry", url.Values{"id": {itoa(owned[0])}}, alice)
	if !strings.Contains(r.text, "1 running message would be left alone: held by the running dispatcher (pepsi dispatch pid") {
		t.Errorf("owned by id, confirmation:\n%s", r.body)
	}
	r = s.do("POST", "/retry", url.Values{"id": {itoa(orphan[0])}}, alice)
	if strings.Contains(r.text, "left alone") || !strings.Contains(r.body, "Retry 1 message</button>") {
		t.Errorf("orphan by id, confirmation:\n%s", r.body)
	}
	r = s.do("POST", "/retry", url.Values{"status": {"running"}}, alice)
	if !strings.Contains(r.body, "Retry 1 message</button>") || !strings.Contains(r.text, "1 running message would be left alone") {
		t.Errorf("running, confirmation:\n%s", r.body)
	}
	r = s.do("POST", "/retry", url.Values{"status": {"running"}, "confirm": {"yes"}}, alice)
	if !strings.Contains(r.body, "Retried 1 message") || !strings.Contains(r.text, "Left 1 running message alone: held by the running dispatcher") {
		t.Errorf("running, done:\n%s", r.body)
	}
	wantStates(t, "owned", s.states(owned), state{Stage: "a", Status: "running"})
	wantStates(t, "orphan", s.states(orphan), cleared("b"))

	// Handed out at a, its stage program advanced it into b: still a's.
	s.exec(`UPDATE pepsi.state SET stage = 'b', handed = 'a' WHERE id = ANY($1)`, owned)
	r = s.do("POST", "/retry", url.Values{"id": {itoa(owned[0])}}, alice)
	if !strings.Contains(r.text, "1 running message would be left alone: held by the running dispatcher (pepsi dispatch pid") {
		t.Errorf("advanced into b, by id, confirmation:\n%s", r.body)
	}
}

// TestRetry: one message, a failure group, a stage's messages of one
// status: each confirmed first with its count, then done, the rows as
// pepsi queue retry leaves them, the running rows a dispatcher holds left
// alone; each logged with its user.
func TestRetry(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{users: true, actors: []string{"alice"}})
	one := s.enqueue("a", 1, nil)
	group := s.enqueue("a", 3, nil)
	other := s.enqueue("a", 2, nil)
	paused := s.enqueue("b", 2, nil)
	running := s.enqueue("b", 1, nil)
	s.fail(one, "single")
	for i, id := range group {
		s.fail([]int64{id}, "order "+itoa(int64(i))+" lost")
	}
	s.fail(other, "something else")
	s.exec(`UPDATE pepsi.state SET status = 'paused', attempts = 1, timeout = now() + interval '1 hour', error = 'later' WHERE id = ANY($1)`, paused)
	s.exec(`UPDATE pepsi.state SET status = 'running' WHERE id = ANY($1)`, running)

	// One message: the confirmation changes nothing.
	body := s.do("POST", "/retry", url.Values{"id": {itoa(one[0])}}, alice)
	if body.code != http.StatusOK || !strings.Contains(body.body, "message "+itoa(one[0])+" (failed at stage a)") ||
		!strings.Contains(body.body, `<input type="hidden" name="confirm" value="yes">`) || !strings.Contains(body.body, "Retry 1 message</button>") {
		t.Fatalf("confirmation: %d\n%s", body.code, body.body)
	}
	wantStates(t, "after the confirmation", s.states(one), state{Stage: "a", Status: "failed", Attempts: 2, Error: strp("single")})
	r := s.do("POST", "/retry", url.Values{"id": {itoa(one[0])}, "confirm": {"yes"}}, alice)
	if r.code != http.StatusOK || !strings.Contains(r.body, "Retried 1 message: message "+itoa(one[0])) {
		t.Fatalf("retry one: %d\n%s", r.code, r.body)
	}
	wantStates(t, "retry one", s.states(one), cleared("a"))

	// A failure group, as JSON.
	var c struct {
		Done  bool  `json:"done"`
		Count int64 `json:"count"`
		Held  int64 `json:"held"`
	}
	form := url.Values{"status": {"failed"}, "stage": {"a"}, "reason": {"order N lost"}, "format": {"json"}}
	postJSON(t, s, "/retry", form, &c)
	if c.Done || c.Count != 3 {
		t.Fatalf("group confirmation: %+v", c)
	}
	form.Set("confirm", "yes")
	postJSON(t, s, "/retry", form, &c)
	if !c.Done || c.Count != 3 {
		t.Fatalf("group retry: %+v", c)
	}
	wantStates(t, "the group", s.states(group), cleared("a"))
	wantStates(t, "outside the group", s.states(other), state{Stage: "a", Status: "failed", Attempts: 2, Error: strp("something else")})

	// A stage's paused messages.
	postJSON(t, s, "/retry", url.Values{"status": {"paused"}, "stage": {"b"}, "confirm": {"yes"}, "format": {"json"}}, &c)
	if c.Count != 2 {
		t.Errorf("paused at b: %+v", c)
	}
	wantStates(t, "paused at b", s.states(paused), cleared("b"))

	// Running messages while a dispatcher holds them: left alone, and said so.
	holdLock(t, s.dsn)
	r = s.do("POST", "/retry", url.Values{"status": {"running"}, "stage": {"b"}}, alice)
	if !strings.Contains(r.text, "1 running message would be left alone: held by the running dispatcher (pepsi dispatch pid") {
		t.Errorf("running, confirmation:\n%s", r.body)
	}
	r = s.do("POST", "/retry", url.Values{"status": {"running"}, "stage": {"b"}, "confirm": {"yes"}}, alice)
	if !strings.Contains(r.body, "Retried 0 messages") || !strings.Contains(r.text, "Left 1 running message alone: held by the running dispatcher") {
		t.Errorf("running, done:\n%s", r.body)
	}
	wantStates(t, "running", s.states(running), state{Stage: "b", Status: "running"})

	for _, tc := range []struct {
		form url.Values
		code int
		says string
	}{
		{url.Values{"id": {"99999"}}, http.StatusNotFound, "no such message: 99999"},
		{url.Values{"id": {"x"}}, http.StatusBadRequest, `id "x": want a message id`},
		{url.Values{"id": {"1"}, "status": {"failed"}}, http.StatusBadRequest, "not both"},
		{url.Values{"status": {"pending"}}, http.StatusBadRequest, "pending messages are queued already"},
		{url.Values{}, http.StatusBadRequest, `status: unknown status ""`},
	} {
		if r := s.do("POST", "/retry", tc.form, alice); r.code != tc.code || !strings.Contains(r.text, tc.says) {
			t.Errorf("%v: %d, want %d saying %q", tc.form, r.code, tc.code, tc.says)
		}
	}
	logs := s.logs.String()
	if n := strings.Count(logs, `msg="dashboard: retried" user=alice`); n != 4 {
		t.Errorf("%d retries logged with their user, want 4:\n%s", n, logs)
	}
	if strings.Contains(logs, alicePass) {
		t.Error("a password in the logs")
	}
}

// TestPurge: done or failed messages older than an age, counted first.
func TestPurge(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{users: true, actors: []string{"alice"}})
	old := s.enqueue("a", 3, nil)
	young := s.enqueue("a", 2, nil)
	elsewhere := s.enqueue("b", 1, nil)
	s.exec(`UPDATE pepsi.state SET status = 'done' WHERE id = ANY($1)`, slices.Concat(old, young, elsewhere))
	s.exec(`UPDATE pepsi.state SET updated_at = now() - interval '10 days' WHERE id = ANY($1)`, slices.Concat(old, elsewhere))

	form := url.Values{"status": {"done"}, "stage": {"a"}, "older": {"7d"}}
	r := s.do("POST", "/purge", form, alice)
	if r.code != http.StatusOK || !strings.Contains(r.body, "<strong>3</strong> messages now") || !strings.Contains(r.body, "every done message at stage a unchanged for 7d") {
		t.Fatalf("confirmation: %d\n%s", r.code, r.body)
	}
	form.Set("confirm", "yes")
	r = s.do("POST", "/purge", form, alice)
	if r.code != http.StatusOK || !strings.Contains(r.body, "Purged 3 messages") {
		t.Fatalf("purge: %d\n%s", r.code, r.body)
	}
	if got := s.states(old); got[0].Status != "" || got[2].Status != "" {
		t.Errorf("old rows left: %+v", got)
	}
	wantStates(t, "young", s.states(young), state{Stage: "a", Status: "done"})
	wantStates(t, "elsewhere", s.states(elsewhere), state{Stage: "b", Status: "done"})
	if !strings.Contains(s.logs.String(), `msg="dashboard: purged" user=alice`) {
		t.Error("the purge was not logged")
	}
	for _, f := range []url.Values{
		{"status": {"pending"}, "older": {"0"}},
		{"status": {"done"}},
		{"status": {"done"}, "older": {"later"}},
	} {
		if r := s.do("POST", "/purge", f, alice); r.code != http.StatusBadRequest {
			t.Errorf("%v: %d, want 400", f, r.code)
		}
	}
}

// postJSON posts form as alice and decodes the JSON answer into v.
func postJSON(t testing.TB, s *site, path string, form url.Values, v any) {
	t.Helper()
	r := s.do("POST", path, form, alice)
	if r.code != http.StatusOK {
		t.Fatalf("POST %s %v: %d\n%s", path, form, r.code, r.body)
	}
	if err := jsonUnmarshal(r.body, v); err != nil {
		t.Fatalf("POST %s: %v\n%s", path, err, r.body)
	}
}

// TestTLS: a web configuration with a certificate serves HTTPS.
func TestTLS(t *testing.T) {
	t.Parallel()
	cert, key := selfSigned(t)
	s := newSite(t, siteOptions{users: true, tls: "tls_server_config:\n  cert_file: " + cert + "\n  key_file: " + key + "\n"})
	if !strings.HasPrefix(s.base, "https://") {
		t.Fatalf("base %s", s.base)
	}
	if body := s.get("/", http.StatusOK, bob); !strings.Contains(body, "Overview") {
		t.Error("no overview over TLS")
	}
}

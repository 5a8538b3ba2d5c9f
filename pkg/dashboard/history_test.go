package dashboard_test

import (
	"html"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// crashReason is the long reason of failTwiceThenPass's second pass.
var crashReason = "worker crashed: signal: killed; " + strings.Repeat("its last words were lost ", 20)

// failTwiceThenPass enqueues a message at stage and settles three passes
// of it as the dispatcher does (its claim done by hand): the stage answers
// 3, then its worker crashes (a reason longer than a page shows at once),
// both retried; then it finishes. It returns the message's id.
func failTwiceThenPass(t *testing.T, s *site, stage string) int64 {
	t.Helper()
	id := s.enqueue(stage, 1, []byte("x"))[0]
	retry := queue.RetryPolicy{Retries: 2, Delay: time.Millisecond, Max: time.Millisecond}
	for _, v := range []queue.Settle{
		{ID: id, Stage: stage, Verdict: queue.PassFailed, Retry: retry, Kind: queue.FailAnswer, PID: 4242, Reason: "stage " + stage + " answered 3: upstream said no"},
		{ID: id, Stage: stage, Verdict: queue.PassFailed, Retry: retry, Kind: queue.FailCrash, PID: 4243, Reason: crashReason},
		{ID: id, Stage: stage, Verdict: queue.Finish},
	} {
		s.exec(`UPDATE pepsi.state SET status = 'running', timeout = NULL, attempts = attempts + 1, handed = stage WHERE id = $1`, id)
		var res queue.TurnResult
		if err := s.db.RunTurn(ctx(t), queue.Turn{Settles: []queue.Settle{v}}, &res); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.states([]int64{id})[0]; st.Status != "done" || st.Attempts != 3 {
		t.Fatalf("the message that failed twice, then passed: %+v", st)
	}
	return id
}

// TestMessageHistory: the message page shows its history as a timeline,
// oldest first: enqueued, each failed pass (stage, attempt, kind, worker,
// reason; a long reason cut, with a control to show it, and shown once),
// and where the message is now; every text escaped. Its JSON has the
// passes as message.history. A message that never failed a pass shows
// enqueued and now; one that lost its first passes to the bound says so.
func TestMessageHistory(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{})
	const script = `<script>alert("pwned")</script>`
	const stage = `<img src=x onerror=alert(1)>`
	ids := s.enqueue("a", 3, []byte("x"))
	long := "order 7: " + strings.Repeat("the catalogue is out of date; ", 40)
	s.exec(`UPDATE pepsi.state SET status = 'done', attempts = 1 WHERE id = ANY($1)`, ids)
	s.exec(`INSERT INTO pepsi.history (id, n, at, stage, attempt, kind, reason, pid, host) VALUES
		($1, 1, now() - interval '2 minutes', $2, 1, 'answer', $3, 4242, $3),
		($1, 2, now() - interval '1 minute', 'a', 2, 'crash', $4, 4250, NULL),
		($5, 7, now(), 'a', 3, 'timeout', 'timeout: no answer within MAX_RUNTIME (5m0s)', NULL, NULL)`,
		ids[0], stage, script, long, ids[2])

	id := strconv.FormatInt(ids[0], 10)
	body := s.get("/messages/"+id, http.StatusOK, req{})
	if strings.Contains(body, "<img") || strings.Contains(body, `alert("pwned")`) || !strings.Contains(body, "&lt;script&gt;") {
		t.Errorf("hostile history unescaped or not shown:\n%s", body)
	}
	i := strings.Index(body, `<ol class="timeline">`)
	j := strings.Index(body, "</ol>")
	if i < 0 || j < i {
		t.Fatalf("no timeline:\n%s", body)
	}
	tl := html.UnescapeString(body[i:j])
	order := []string{"enqueued", "failed pass 1 at <b>" + stage + "</b>, attempt 1:", ">answer</span>", "worker pid 4242 on " + script,
		"passed <b>" + stage + "</b>", "failed pass 2 at <b>a</b>, attempt 2:", ">crash</span>", "worker pid 4250</span>",
		"passed <b>a</b>, finishing it", "now done at <b>a</b>, attempt 1 there"}
	at := 0
	for _, w := range order {
		k := strings.Index(tl[at:], w)
		if k < 0 {
			t.Fatalf("the timeline lacks %q after position %d (oldest first):\n%s", w, at, tl)
		}
		at += k + len(w)
	}
	if n := strings.Count(tl, long); n != 1 || !strings.Contains(tl, `<details class="long"><summary><pre class="error head">order 7: the catalogue`) {
		t.Errorf("the long reason: shown %d times, or not behind the expand control:\n%s", n, tl)
	}
	if strings.Contains(tl, "are not kept") {
		t.Error("a whole history says passes are not kept")
	}

	var m struct {
		Message struct {
			History []struct {
				N       int    `json:"n"`
				Stage   string `json:"stage"`
				Attempt int    `json:"attempt"`
				Kind    string `json:"kind"`
				Reason  string `json:"reason"`
				PID     *int32 `json:"pid"`
				Host    *string
			} `json:"history"`
		} `json:"message"`
	}
	s.getJSON("/messages/"+id, req{}, &m)
	h := m.Message.History
	if len(h) != 2 || h[0].Stage != stage || h[0].Reason != script || *h[0].Host != script || h[1].Kind != "crash" || h[1].Reason != long || h[1].Host != nil || *h[1].PID != 4250 {
		t.Errorf("history as JSON: %+v", h)
	}

	body = s.get("/messages/"+strconv.FormatInt(ids[1], 10), http.StatusOK, req{})
	if strings.Contains(body, "failed pass") || !strings.Contains(body, "enqueued") || !strings.Contains(body, "now done at <b>a</b>") {
		t.Errorf("a message that never failed:\n%s", body)
	}
	s.getJSON("/messages/"+strconv.FormatInt(ids[1], 10), req{}, &m)
	if m.Message.History == nil || len(m.Message.History) != 0 {
		t.Errorf("a message that never failed: history %v, want []", m.Message.History)
	}
	body = html.UnescapeString(s.get("/messages/"+strconv.FormatInt(ids[2], 10), http.StatusOK, req{}))
	if !strings.Contains(body, "the failed passes before pass 7 are not kept") || !strings.Contains(body, ">timeout</span>") {
		t.Errorf("a history that lost its first passes:\n%s", body)
	}
}

// TestRetryKeepsFailReason: a message its stage failed with pepsi.fail()
// and retried from the dashboard keeps the reason: its page's timeline
// shows it as a pass of kind fail, though its error is cleared.
func TestRetryKeepsFailReason(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{users: true, actors: []string{"alice"}})
	id := s.enqueue("a", 1, []byte("x"))[0]
	s.exec(`UPDATE pepsi.state SET status = 'running', attempts = 1, handed = stage WHERE id = $1`, id)
	s.exec(`SELECT pepsi.fail($1, 'the <order> is void')`, id)
	if r := s.do("POST", "/retry", url.Values{"id": {itoa(id)}, "confirm": {"yes"}}, alice); r.code != http.StatusOK {
		t.Fatalf("retry: %d\n%s", r.code, r.body)
	}
	wantStates(t, "retried", s.states([]int64{id}), cleared("a"))
	body := s.get("/messages/"+itoa(id), http.StatusOK, alice)
	i, j := strings.Index(body, `<ol class="timeline">`), strings.Index(body, "</ol>")
	if i < 0 || j < i {
		t.Fatalf("no timeline:\n%s", body)
	}
	tl := html.UnescapeString(body[i:j])
	for _, w := range []string{"failed pass 1 at <b>a</b>, attempt 1:", `title="the stage failed it with pepsi.fail(): kept when a retry cleared its error">fail</span>`,
		`<pre class="error">the <order> is void</pre>`, "now pending at <b>a</b>"} {
		if !strings.Contains(tl, w) {
			t.Errorf("the timeline lacks %q:\n%s", w, tl)
		}
	}
}

// TestMessageErrors: the message page shows as its error the one that
// says why it is as it is, and the others in its history; its timeline
// shows the passes that succeeded that the failed ones imply. A done
// message whose pass failed at parse, then passed parse, enrich (after a
// failed pass there) and notify shows no error, its last failed pass's
// answer in the history alone, and passed parse, enrich and notify; a
// message that failed a pass at parse, passed it, and was failed at
// enrich by pepsi.fail() shows that reason as its error, and parse's
// answer in its history, not beside it; a dispatch_error the history
// lacks is shown in it, muted.
func TestMessageErrors(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{})
	retry := queue.RetryPolicy{Retries: 2, Delay: time.Millisecond, Max: time.Millisecond}
	settle := func(id int64, v queue.Settle) {
		t.Helper()
		v.ID = id
		s.exec(`UPDATE pepsi.state SET status = 'running', timeout = NULL, attempts = attempts + 1, handed = stage WHERE id = $1`, id)
		var res queue.TurnResult
		if err := s.db.RunTurn(ctx(t), queue.Turn{Settles: []queue.Settle{v}}, &res); err != nil {
			t.Fatal(err)
		}
	}
	page := func(id int64) (fields, tl string, m struct {
		Current string `json:"current_error"`
		Passed  []struct {
			Stage    string `json:"stage"`
			Finished bool   `json:"finished"`
		} `json:"passed"`
	}) {
		t.Helper()
		body := html.UnescapeString(s.get("/messages/"+itoa(id), http.StatusOK, req{}))
		i, j := strings.Index(body, `<table class="fields">`), strings.Index(body, `<ol class="timeline">`)
		k := strings.Index(body, "</ol>")
		if i < 0 || j < i || k < j {
			t.Fatalf("no fields or no timeline:\n%s", body)
		}
		s.getJSON("/messages/"+itoa(id), req{}, &m)
		return body[i:j], body[j:k], m
	}
	inOrder := func(what, text string, want ...string) {
		t.Helper()
		at := 0
		for _, w := range want {
			k := strings.Index(text[at:], w)
			if k < 0 {
				t.Errorf("%s lacks %q after position %d:\n%s", what, w, at, text)
				return
			}
			at += k + len(w)
		}
	}

	// Done, after failed passes at parse and enrich.
	done := s.enqueue("parse", 1, []byte("x"))[0]
	settle(done, queue.Settle{Stage: "parse", Verdict: queue.PassFailed, Retry: retry, Kind: queue.FailAnswer, Reason: "parse answered 3: bad json"})
	settle(done, queue.Settle{Stage: "parse", Verdict: queue.Advance, Next: "enrich"})
	settle(done, queue.Settle{Stage: "enrich", Verdict: queue.PassFailed, Retry: retry, Kind: queue.FailAnswer, Reason: "enrich answered 1: upstream 503"})
	settle(done, queue.Settle{Stage: "enrich", Verdict: queue.Advance, Next: "notify"})
	settle(done, queue.Settle{Stage: "notify", Verdict: queue.Finish})
	if st := s.states([]int64{done})[0]; st.Status != "done" || st.DispatchError == nil {
		t.Fatalf("the done message: %+v, want done with the dispatch_error of its last failed pass kept", st)
	}
	fields, tl, m := page(done)
	if strings.Contains(fields, `class="error`) || !strings.Contains(fields, "<th>dispatch_error</th><td><span class=\"quiet\">– (of an earlier failed pass: in its history)</span>") {
		t.Errorf("a done message shows an error as its own:\n%s", fields)
	}
	inOrder("the done message's timeline", tl, "enqueued", "passes that succeeded are not recorded", "failed pass 1 at <b>parse</b>", "bad json",
		"passed <b>parse</b> <span class=\"quiet\">(after", "failed pass 2 at <b>enrich</b>", "upstream 503",
		"passed <b>enrich</b> <span class=\"quiet\">(after", "passed <b>notify</b>, finishing it", "now done at <b>notify</b>")
	if n := strings.Count(tl, "upstream 503"); n != 1 {
		t.Errorf("the last failed pass's answer is shown %d times in the timeline, want once:\n%s", n, tl)
	}
	if m.Current != "" || len(m.Passed) != 3 || m.Passed[0].Stage != "parse" || m.Passed[2].Stage != "notify" || !m.Passed[2].Finished {
		t.Errorf("the done message as JSON: %+v", m)
	}

	// Failed by pepsi.fail() at enrich, after a failed pass at parse.
	failed := s.enqueue("parse", 1, []byte("x"))[0]
	settle(failed, queue.Settle{Stage: "parse", Verdict: queue.PassFailed, Retry: retry, Kind: queue.FailTimeout, Reason: "timeout: no answer within MAX_RUNTIME (5s)"})
	settle(failed, queue.Settle{Stage: "parse", Verdict: queue.Advance, Next: "enrich"})
	// The stage's pass at enrich, which fails the message itself.
	s.exec(`UPDATE pepsi.state SET status = 'running', attempts = 1, handed = stage WHERE id = $1`, failed)
	s.exec(`SELECT pepsi.fail($1, 'no such customer: c-42')`, failed)
	if st := s.states([]int64{failed})[0]; st.Status != "failed" || st.Stage != "enrich" || st.DispatchError == nil || st.Error == nil {
		t.Fatalf("the failed message: %+v, want failed at enrich with both errors", st)
	}
	fields, tl, m = page(failed)
	if !strings.Contains(fields, `<th>error</th><td><pre class="error">no such customer: c-42</pre>`) || strings.Contains(fields, "MAX_RUNTIME") ||
		!strings.Contains(fields, "– (of an earlier failed pass: in its history)") {
		t.Errorf("the failed message's error, or a stale one beside it:\n%s", fields)
	}
	inOrder("the failed message's timeline", tl, "failed pass 1 at <b>parse</b>", "MAX_RUNTIME", "passed <b>parse</b>", "now failed at <b>enrich</b>")
	if strings.Contains(tl, "finishing") || m.Current != "error" || len(m.Passed) != 1 {
		t.Errorf("the failed message: %+v\n%s", m, tl)
	}

	// A dispatch_error the history lacks (a stage that answered 0 with a
	// reason, a row from before the history): shown in it, muted.
	s.exec(`UPDATE pepsi.state SET dispatch_error = 'answered 0: partial' WHERE id = $1`, failed)
	fields, tl, _ = page(failed)
	if strings.Contains(fields, "partial") || !strings.Contains(tl, `its dispatch_error, the answer of an earlier failed pass, not of the fail move that ended it: <pre class="old">answered 0: partial</pre>`) {
		t.Errorf("a dispatch_error the history lacks:\n%s\n%s", fields, tl)
	}

	// Failed out of retries: the last failed pass's answer is its error.
	spent := s.enqueue("parse", 1, []byte("x"))[0]
	settle(spent, queue.Settle{Stage: "parse", Verdict: queue.PassFailed, Kind: queue.FailAnswer, Reason: "parse answered 2: no"})
	fields, _, m = page(spent)
	if !strings.Contains(fields, `<th>dispatch_error</th><td><pre class="error">parse answered 2: no</pre>`) || m.Current != "dispatch_error" {
		t.Errorf("a message out of retries: %+v\n%s", m, fields)
	}
}

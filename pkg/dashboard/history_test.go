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
		"failed pass 2 at <b>a</b>, attempt 2:", ">crash</span>", "worker pid 4250</span>", "now done at <b>a</b>, attempt 1 there"}
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

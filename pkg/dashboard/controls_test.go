package dashboard_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// TestControls: the controls of pepsi queue as the dashboard's actions,
// each confirmed with its count, done as alice (a cancelled message says
// so), logged, and answered with its result's page: hold the ticked
// messages and a list's paused ones, release a list's held ones (back to
// pending, or paused until their time), cancel one message, a running one
// only by force while a dispatcher holds it, and a failure group of paused
// messages; pause a stage with a reason (a banner, a badge, a resume
// button), and resume it. Bob may not.
func TestControls(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{users: true, actors: []string{"alice"}, stages: []string{"a", "b"}})
	pend := s.enqueue("a", 3, nil)
	paused := s.enqueue("a", 1, nil)
	s.exec(`UPDATE pepsi.state SET status = 'paused', attempts = 1, timeout = now() + interval '1 hour' WHERE id = ANY($1)`, paused)
	done := s.enqueue("a", 1, nil)
	s.exec(`UPDATE pepsi.state SET status = 'done' WHERE id = ANY($1)`, done)
	confirm := func(path string, form url.Values, wantCount string) string {
		t.Helper()
		r := s.do("POST", path, form, alice)
		if r.code != http.StatusOK || !strings.Contains(r.text, wantCount) {
			t.Fatalf("POST %s %v, confirmation: %d, want %q\n%s", path, form, r.code, wantCount, r.body)
		}
		f := url.Values{}
		for k, v := range form {
			f[k] = v
		}
		f.Set("confirm", "yes")
		r = s.do("POST", path, f, req{user: "alice", pass: alicePass, noFollow: true})
		if r.code != http.StatusSeeOther {
			t.Fatalf("POST %s %v: %d, not a redirect to its result\n%s", path, f, r.code, r.body)
		}
		return s.get(r.header.Get("Location"), http.StatusOK, alice)
	}

	// Hold two ticked pending messages (the done one is left alone), then
	// the list's paused one.
	body := confirm("/hold", url.Values{"scope": {"selected"}, "id": {itoa(pend[0]), itoa(pend[1]), itoa(done[0])}}, "<strong>2</strong> messages now")
	if !strings.Contains(body, "Held 2 messages: the 3 ticked messages") || !strings.Contains(body, "1 left alone: not pending or paused") {
		t.Errorf("hold, result:\n%s", body)
	}
	confirm("/hold", url.Values{"scope": {"filter"}, "stage": {"a"}, "status": {"paused"}}, "<strong>1</strong> message now")
	for i, st := range s.states(append(append(pend[:2:2], paused...), pend[2])) {
		if want := []string{"held", "held", "held", "pending"}[i]; st.Status != want {
			t.Errorf("after the holds, message %d is %s, want %s", i, st.Status, want)
		}
	}
	if body := s.get("/messages?stage=a&status=held", http.StatusOK, alice); !strings.Contains(body, `formaction="/release" class="all"`) ||
		strings.Contains(body, `formaction="/hold"`) {
		t.Errorf("the held messages' list offers no release, or a hold:\n%s", body)
	}
	// Release them all: pending again, the paused one paused.
	confirm("/release", url.Values{"scope": {"filter"}, "stage": {"a"}, "status": {"held"}}, "<strong>3</strong> messages now")
	for i, st := range s.states(append(pend[:2:2], paused...)) {
		if want := []string{"pending", "pending", "paused"}[i]; st.Status != want || st.Timeout == nil && want == "paused" {
			t.Errorf("after the release, message %d is %+v, want %s", i, st, want)
		}
	}

	// A paused message says when it runs again, on the list and its page.
	if body := s.get("/messages?stage=a&status=paused", http.StatusOK, alice); !regexp.MustCompile(`<span class="due" title="it runs again at [^"]+">retry in (59 min|1 h)</span>`).MatchString(body) {
		t.Errorf("the paused message's list does not say when it runs:\n%s", body)
	}
	if body := s.get("/messages/"+itoa(paused[0]), http.StatusOK, alice); !regexp.MustCompile(`UTC \(a retry: it runs in (59 min|1 h)\)`).MatchString(body) {
		t.Errorf("the paused message's page does not say when it runs:\n%s", body)
	}

	// Cancel one pending message, from its page.
	if page := s.get("/messages/"+itoa(pend[2]), http.StatusOK, alice); !strings.Contains(page, `formaction="/cancel" class="cancel">Cancel…</button>`) ||
		!strings.Contains(page, `formaction="/hold"`) || strings.Contains(page, `formaction="/release"`) {
		t.Errorf("a pending message's controls:\n%s", page)
	}
	confirm("/cancel", url.Values{"id": {itoa(pend[2])}}, "<strong>1</strong> message now")
	if st := s.states(pend[2:]); st[0].Status != "cancelled" || st[0].Error == nil || *st[0].Error != "cancelled by alice" {
		t.Errorf("the cancelled message: %+v", st[0])
	}
	// A running message, while a dispatcher holds it: by force only.
	running := s.enqueue("b", 1, nil)
	s.exec(`UPDATE pepsi.state SET status = 'running' WHERE id = ANY($1)`, running)
	holdLock(t, s.dsn)
	r := s.do("POST", "/cancel", url.Values{"id": {itoa(running[0])}}, alice)
	if !strings.Contains(r.text, "1 running message would be left alone: held by the running dispatcher") || strings.Contains(r.body, `name="confirm"`) {
		t.Errorf("cancel of a held running message, confirmation:\n%s", r.body)
	}
	if page := s.get("/messages/"+itoa(running[0]), http.StatusOK, alice); !strings.Contains(page, `name="force" value="yes"`) {
		t.Errorf("a running message's page offers no forced cancel:\n%s", page)
	}
	confirm("/cancel", url.Values{"id": {itoa(running[0])}, "force": {"yes"}}, "<strong>1</strong> message now")
	if st := s.states(running); st[0].Status != "cancelled" || *st[0].Error != "cancelled by alice" {
		t.Errorf("the forced cancel: %+v", st[0])
	}
	// A failure group of paused messages: a filter pepsi queue cancel
	// does not take, done by id.
	later := s.enqueue("b", 3, nil)
	for i, id := range later {
		s.exec(`UPDATE pepsi.state SET status = 'paused', timeout = now() + interval '1 hour', error = $2 WHERE id = $1`, id, "busy, retry in "+itoa(int64(10+i))+" s")
	}
	s.exec(`UPDATE pepsi.state SET error = 'other' WHERE id = $1`, later[2])
	confirm("/cancel", url.Values{"scope": {"filter"}, "stage": {"b"}, "status": {"paused"}, "reason": {"busy, retry in N s"}}, "<strong>2</strong> messages now")
	if st := s.states(later); st[0].Status != "cancelled" || st[1].Status != "cancelled" || st[2].Status != "paused" {
		t.Errorf("the group's cancel: %+v", st)
	}

	// Pause stage a, with a reason.
	r = s.do("POST", "/pause", url.Values{"stage": {"a"}}, alice)
	if !strings.Contains(r.text, "<strong>2</strong> pending messages at it now") || !strings.Contains(r.body, `<input name="reason" value=""`) {
		t.Fatalf("pause, confirmation:\n%s", r.body)
	}
	body = confirm("/pause", url.Values{"stage": {"a"}, "reason": {"the shop's API is down"}}, "pending messages at it now")
	if !strings.Contains(html.UnescapeString(body), `Paused stage a ("the shop's API is down").`) {
		t.Errorf("pause, result:\n%s", body)
	}
	var o bannersJSON
	testkit.Wait(t, "the paused stage's banner", time.Minute, func() bool {
		o = bannersJSON{}
		s.getJSON("/", alice, &o)
		return o.banner("paused") != ""
	})
	if got := o.banner("paused"); !strings.HasPrefix(got, "Stage a is paused, by alice since ") || !strings.Contains(got, ": the shop's API is down. Nothing new is handed to it: its 2 pending messages wait.") {
		t.Errorf("the paused stage's banner: %q", got)
	}
	overview := s.get("/", http.StatusOK, alice)
	if !strings.Contains(overview, `<span class="badge paused"`) || !strings.Contains(overview, `<form class="stagectl" method="post" action="/resume"><input type="hidden" name="stage" value="a">`) {
		t.Errorf("the overview lacks the paused badge or the resume button:\n%s", overview)
	}
	if r := s.do("POST", "/pause", url.Values{"stage": {"a"}}, alice); !strings.Contains(r.text, "Nothing to do: it is paused already") || strings.Contains(r.body, `name="confirm"`) {
		t.Errorf("a second pause:\n%s", r.body)
	}
	confirm("/resume", url.Values{"stage": {"a"}}, "pending messages at it now")
	testkit.Wait(t, "the banner gone", time.Minute, func() bool {
		o = bannersJSON{}
		s.getJSON("/", alice, &o)
		return o.banner("paused") == ""
	})

	for _, tc := range []struct {
		path string
		form url.Values
		o    req
		code int
		says string
	}{
		{"/pause", url.Values{"stage": {"nowhere"}}, alice, http.StatusBadRequest, `stage "nowhere": not configured, and the database knows no such stage`},
		{"/pause", url.Values{}, alice, http.StatusBadRequest, "stage: give the stage to pause"},
		{"/hold", url.Values{"scope": {"filter"}, "status": {"done"}}, alice, http.StatusBadRequest, `status "done": a hold of a list's messages takes a status of pending or paused`},
		{"/cancel", url.Values{"id": {"999999"}}, alice, http.StatusNotFound, "no such message: 999999"},
		{"/pause", url.Values{"stage": {"a"}, "confirm": {"yes"}}, bob, http.StatusForbidden, `user "bob" may not act`},
		{"/hold", url.Values{"id": {itoa(pend[0])}, "confirm": {"yes"}}, bob, http.StatusForbidden, `user "bob" may not act`},
	} {
		if r := s.do("POST", tc.path, tc.form, tc.o); r.code != tc.code || !strings.Contains(r.text, tc.says) {
			t.Errorf("POST %s %v as %s: %d, want %d saying %q\n%s", tc.path, tc.form, tc.o.user, r.code, tc.code, tc.says, r.body)
		}
	}
	logs := s.logs.String()
	for _, want := range []string{`msg="dashboard: held" user=alice`, `msg="dashboard: released" user=alice`, `msg="dashboard: cancelled" user=alice`,
		`msg="dashboard: paused" user=alice`, `msg="dashboard: resumed" user=alice`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the logs lack %s", want)
		}
	}
}

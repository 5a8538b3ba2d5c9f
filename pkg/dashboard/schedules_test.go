package dashboard_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/config"
	"github.com/pepsi-dev/pepsi/pkg/dashboard"
)

// scheduleConf is a pepsi.conf with stage a and two schedules of it.
const scheduleConf = `[stage-a]
PROGRAM = a
[schedule-nightly]
STAGE = a
CRON = 0 3 * * *
[schedule-tick]
STAGE = a
EVERY = 5m
`

// withSchedules gives a dashboard the schedules of conf.
func withSchedules(t *testing.T, conf string) func(*dashboard.Options) {
	t.Helper()
	cfg, err := config.Parse("pepsi.conf", []byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	return func(o *dashboard.Options) { o.Schedules = cfg.Schedules }
}

// TestSchedulesPage: each [schedule-NAME] with its last slot (and its
// message) and its next one, as pepsi doctor computes it; one no
// dispatcher has run yet; a row of pepsi.schedule no section configures.
func TestSchedulesPage(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{stages: []string{"a"}, noSampler: true, options: withSchedules(t, scheduleConf)})
	id := s.enqueue("a", 1, nil)[0]
	s.exec(`INSERT INTO pepsi.schedule (name, since, last_slot, last_id, last_at) VALUES
		('tick', now() - interval '1 hour', to_timestamp(floor(extract(epoch FROM now()) / 300) * 300), $1, now()),
		('gone', now() - interval '2 days', now() - interval '1 day', NULL, now() - interval '1 day')`, id)
	var page struct {
		Schedules []struct {
			Name, When, Stage, State string
			Configured, Seen         bool
			LastID                   *int64     `json:"last_id"`
			Next                     *time.Time `json:"next"`
		} `json:"schedules"`
	}
	s.getJSON("/schedules", req{}, &page)
	if len(page.Schedules) != 3 {
		t.Fatalf("schedules: %+v, want nightly, tick and gone", page.Schedules)
	}
	night, tick, gone := page.Schedules[0], page.Schedules[1], page.Schedules[2]
	if night.Name != "nightly" || night.State != "never_run" || night.When != "CRON 0 3 * * *" || night.Next == nil ||
		night.Next.UTC().Hour() != 3 || night.Next.Before(time.Now()) {
		t.Errorf("nightly: %+v, want never run, next at 03:00 UTC", night)
	}
	if tick.Name != "tick" || tick.State != "ok" || tick.LastID == nil || *tick.LastID != id || tick.Next == nil ||
		tick.Next.Unix()%300 != 0 || time.Until(*tick.Next) > 5*time.Minute+time.Second {
		t.Errorf("tick: %+v, want ok, its message %d, next within 5 min on a multiple of 5 min", tick, id)
	}
	if gone.Name != "gone" || gone.State != "not_configured" || gone.Configured || gone.Next != nil {
		t.Errorf("gone: %+v, want not configured, no next slot", gone)
	}
	body := s.get("/schedules", http.StatusOK, req{})
	for _, want := range []string{
		`<a href="/schedules" aria-current="page">Schedules</a>`,
		`<th scope="row">tick</th>`, `<code>EVERY 5m0s</code>`, `<a href="/messages/` + itoa(id) + `">message ` + itoa(id) + `</a>`,
		`never run`, `not configured`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the schedules page lacks %s:\n%s", want, body)
		}
	}
	if !regexp.MustCompile(`<td class="when next"><span title="[^"]+">[^<]+</span> <span class="due">\(in (\d+ min( \d+ s)?|\d+ s)\)</span></td>`).MatchString(body) {
		t.Errorf("tick's next slot, and in how long:\n%s", body)
	}
	// Without schedules: the page says so.
	s2 := newSite(t, siteOptions{noSampler: true})
	if body := s2.get("/schedules", http.StatusOK, req{}); !strings.Contains(body, "No [schedule-NAME] in pepsi.conf, and none ran.") {
		t.Errorf("no schedules:\n%s", body)
	}
}

// TestScheduledApart: a scheduled message (paused for its time, never run)
// is shown apart from a retry's wait, with when it runs to the minute
// ("in 1 h 47 min", not "in 1 h"), on the list, in its JSON and on its
// page; the overview's next due is the stage's earliest.
func TestScheduledApart(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{stages: []string{"a"}, noSampler: true})
	ids := s.enqueue("a", 3, nil)
	s.exec(`UPDATE pepsi.state SET status = 'paused', attempts = 0, timeout = now() + interval '1 hour 47 minutes 30 seconds' WHERE id = $1`, ids[0])
	s.exec(`UPDATE pepsi.state SET status = 'paused', attempts = 1, error = 'upstream 503', timeout = now() + interval '5 minutes' WHERE id = $1`, ids[1])
	body := s.get("/messages?stage=a&status=paused", http.StatusOK, req{})
	for _, re := range []string{
		`<td class="status"><span class="scheduled" title="[^"]+">scheduled</span> <span class="due" title="it runs at [^"]+">in 1 h 47 min</span></td>`,
		`<td class="status">paused <span class="due" title="it runs again at [^"]+">retry in (4 min \d+ s|5 min)</span></td>`,
	} {
		if !regexp.MustCompile(re).MatchString(body) {
			t.Errorf("the paused list lacks %s:\n%s", re, body)
		}
	}
	var list struct {
		Rows []struct {
			ID   int64  `json:"id"`
			Wait string `json:"wait"`
		} `json:"rows"`
	}
	s.getJSON("/messages?stage=a", req{}, &list)
	waits := map[int64]string{}
	for _, r := range list.Rows {
		waits[r.ID] = r.Wait
	}
	if waits[ids[0]] != "scheduled" || waits[ids[1]] != "retry" || waits[ids[2]] != "" {
		t.Errorf("the list's waits: %v, want scheduled, retry and none", waits)
	}
	if page := s.get("/messages/"+itoa(ids[0]), http.StatusOK, req{}); !strings.Contains(page, `(<span class="scheduled">scheduled</span>: it runs in 1 h 47 min)`) {
		t.Errorf("the scheduled message's page:\n%s", page)
	}
	if page := s.get("/messages/"+itoa(ids[1]), http.StatusOK, req{}); !regexp.MustCompile(`\(a retry: it runs in (4 min \d+ s|5 min)\)`).MatchString(page) {
		t.Errorf("the retried message's page:\n%s", page)
	}
	// The overview: the earliest of them, the retry.
	var o struct {
		Stages []struct {
			Stage   string     `json:"stage"`
			NextDue *time.Time `json:"next_due"`
		} `json:"stages"`
	}
	s.getJSON("/", req{}, &o)
	if len(o.Stages) != 1 || o.Stages[0].NextDue == nil || time.Until(*o.Stages[0].NextDue) > 5*time.Minute || time.Until(*o.Stages[0].NextDue) < 4*time.Minute {
		t.Errorf("the overview's next due: %+v, want the retry's, in 5 min", o.Stages)
	}
	overview := s.get("/", http.StatusOK, req{})
	if !strings.Contains(overview, `<th class="n" title="when the earliest paused message (a retry, or a scheduled message) falls due">next due</th>`) ||
		!regexp.MustCompile(`<td class="n due"><span title="[^"]+">in (4 min \d+ s|5 min)</span></td>`).MatchString(overview) {
		t.Errorf("the overview's next due column:\n%s", overview)
	}
}

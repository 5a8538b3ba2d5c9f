package dashboard_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/dashboard"
)

// banners is the overview's JSON, as much as its banners.
type bannersJSON struct {
	Banners []struct {
		Kind string `json:"kind"`
		Text string `json:"text"`
		Link string `json:"link"`
	} `json:"banners"`
	Stages []struct {
		Stage   string `json:"stage"`
		Orphans int64  `json:"running_without_dispatcher"`
		Backlog struct {
			Trend string `json:"trend"`
		} `json:"backlog"`
		Failures struct {
			Known bool `json:"known"`
		} `json:"failures"`
	} `json:"stages"`
	Lost []struct {
		LastSeen time.Time `json:"last_seen"`
	} `json:"lost_standbys"`
}

func (b bannersJSON) kinds() []string {
	var out []string
	for _, x := range b.Banners {
		out = append(out, x.Kind)
	}
	return out
}

func (b bannersJSON) banner(kind string) string {
	for _, x := range b.Banners {
		if x.Kind == kind {
			return x.Text
		}
	}
	return ""
}

// looker returns a function that waits until ok holds of the overview
// read into b, reading it again meanwhile.
func (b *bannersJSON) looker(t *testing.T, s *site) func(what string, ok func() bool) {
	return func(what string, ok func() bool) {
		t.Helper()
		testkit.Wait(t, what, time.Minute, func() bool {
			*b = bannersJSON{}
			s.getJSON("/", req{}, b)
			return ok()
		})
	}
}

// TestOverviewBanners: the overview says what is wrong, each thing in a
// banner that comes and goes with it: no dispatcher, running messages
// none holds, a stage with unfinished messages that pepsi.conf does not
// configure, a dispatcher whose standby is gone.
func TestOverviewBanners(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{stages: []string{"a", "b"}, options: func(o *dashboard.Options) { o.SampleEvery = 100 * time.Millisecond }})
	var o bannersJSON
	look := o.looker(t, s)
	look("no dispatcher", func() bool { return strings.Join(o.kinds(), " ") == "no_dispatcher" })

	running := s.enqueue("a", 3, nil)
	s.exec(`UPDATE pepsi.state SET status = 'running' WHERE id = ANY($1)`, running)
	s.exec(`UPDATE pepsi.state SET handed = 'b', stage = 'a' WHERE id = $1`, running[0]) // advanced from b into a
	// The counts come from the sampler, which may have read the rows
	// between the two updates: wait for what both made.
	look("the running messages none holds, by the stage they were handed at", func() bool {
		return strings.HasPrefix(o.banner("orphans"), "3 messages are running with no dispatcher to hold them (stage a: 2, b: 1)")
	})
	if o.Stages[0].Orphans != 2 || o.Stages[1].Orphans != 1 {
		t.Errorf("orphans by stage: %+v", o.Stages)
	}

	// A dispatcher with a standby: the running messages are its.
	disp := holdLock(t, s.dsn)
	_, stopStandby := stoppableStandby(t, s.dsn, "")
	look("a dispatcher and its standby", func() bool { return len(o.Banners) == 0 })

	s.enqueue("old", 2, nil)
	s.fail(s.enqueue("gone", 1, nil), "no") // failed only: history, not work
	// (The sampler may count gone's message before it fails: then it
	// holds unfinished work for a moment.)
	look("the stage no section configures", func() bool { return strings.Join(o.kinds(), " ") == "unconfigured" })
	if got := o.banner("unconfigured"); got != "Stage old holds 2 unfinished messages, and no [stage-old] section of pepsi.conf configures it: no worker runs them." {
		t.Errorf("unconfigured: %q", got)
	}
	if len(o.Banners) != 1 {
		t.Errorf("banners: %v", o.kinds())
	}
	body := s.get("/", http.StatusOK, req{})
	if !strings.Contains(body, `no section</span>`) || !strings.Contains(body, `<li class="banner unconfigured warning" title="warning">Stage old holds 2`) {
		t.Errorf("the overview's unconfigured stage:\n%s", body)
	}

	stopStandby()
	look("the lost standby", func() bool { return o.banner("no_standby") != "" })
	if got := o.banner("no_standby"); !regexp.MustCompile(`^Dispatcher pid \d+ on .+ \(every stage\) runs without a standby: the last one, pid \d+ on .+, was seen waiting at .+ UTC \(\d+ s ago\)\.$`).MatchString(got) ||
		len(o.Lost) != 1 {
		t.Errorf("no standby: %q, %+v", got, o.Lost)
	}
	disp.Close(ctx(t))
	look("no dispatcher again", func() bool {
		return o.banner("no_dispatcher") != "" && o.banner("orphans") != "" && o.banner("no_standby") == ""
	})
}

// TestOverviewCells: zero is never red, the failed and pending counts come
// first, the failures of the last minutes and the backlog's trend are
// there (unknown at first); ?refresh turns reloading on and off.
func TestOverviewCells(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{stages: []string{"a"}, noSampler: true, options: func(o *dashboard.Options) { o.Refresh = 0 }})
	s.fail(s.enqueue("a", 1, nil), "no")
	body := s.get("/", http.StatusOK, req{})
	for _, want := range []string{
		`<th>stage</th><th class="n">failed</th><th class="n">pending</th><th class="n" title="failed passes`,
		`<td class="n failed"><a href="/messages?stage=a&amp;status=failed">1</a></td>`,
		`<td class="n zero"><a href="/messages?stage=a&amp;status=pending">0</a></td>`,
		// The failures of the last minutes: no failed pass sampled yet,
		// and the failed message.
		`<td class="n failing"><a class="dead" href="/messages?newer=900&amp;stage=a&amp;status=failed" title="messages that failed over the last 15 min and are failed still`,
		`>1 failed message</a></td>`,
		`<td class="trend unknown">`,
		`data-refresh="10"`, `<noscript><meta http-equiv="refresh" content="10"></noscript>`,
		`updated <time datetime="`, `<a class="refresh" href="/?refresh=0">stop</a>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview lacks %s", want)
		}
	}
	body = s.get("/?refresh=0", http.StatusOK, req{})
	if strings.Contains(body, "data-refresh") || strings.Contains(body, `http-equiv="refresh"`) || !strings.Contains(body, `<a class="refresh" href="/?refresh=10">auto-refresh every 10 s</a>`) {
		t.Errorf("refresh=0 refreshes:\n%s", body)
	}
	// The lists: off unless asked for, kept in the filters and the pager.
	body = s.get("/messages?status=failed", http.StatusOK, req{})
	if strings.Contains(body, "data-refresh") || !strings.Contains(body, `href="/messages?refresh=10&amp;status=failed">auto-refresh every 10 s</a>`) {
		t.Errorf("the list refreshes by default, or cannot be asked to:\n%s", body)
	}
	body = s.get("/messages?status=failed&refresh=30", http.StatusOK, req{})
	if !strings.Contains(body, `data-refresh="30"`) || !strings.Contains(body, `<input type="hidden" name="refresh" value="30">`) {
		t.Errorf("refresh=30 on the list:\n%s", body)
	}
	if body := s.get("/failures?refresh=5", http.StatusOK, req{}); !strings.Contains(body, `data-refresh="5"`) {
		t.Errorf("refresh=5 on the failures")
	}
	for _, q := range []string{"/?refresh=1", "/messages?refresh=x", "/failures?refresh=99999"} {
		if r := s.do("GET", q, nil, req{}); r.code != http.StatusBadRequest || !strings.Contains(r.text, "want 0 (off) or seconds from 5 to 3600") {
			t.Errorf("%s: %d %s", q, r.code, r.body)
		}
	}
}

// TestLongText: a long reason or error shows its start, the whole behind
// a control that opens it, once; a failure group is named by the first
// admin.GroupReasonMax characters of its error; the group of a failed
// message is linked, not written out again.
func TestLongText(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{})
	long := "order 7: " + strings.Repeat("the catalogue said no, ", 60) + "the end"
	ids := s.enqueue("a", 1, nil)
	s.fail(ids, long)
	folded := ("order N: " + strings.Repeat("the catalogue said no, ", 60) + "the end")[:admin.GroupReasonMax]
	body := s.get("/failures", http.StatusOK, req{})
	if n := strings.Count(body, folded); n != 1 || !strings.Contains(body, `<details class="long"><summary><code class="reason head">order N: the catalogue`) ||
		!strings.Contains(body, "show all "+itoa(int64(len(folded)))+" bytes") {
		t.Errorf("the failures page shows the long reason %d times, or not behind a control:\n%s", n, body)
	}
	body = s.get("/messages/"+itoa(ids[0]), http.StatusOK, req{})
	if n := strings.Count(body, long); n != 1 || strings.Contains(body, folded) || !strings.Contains(body, `<details class="long"><summary><pre class="error head">order 7: the catalogue`) {
		t.Errorf("the message page shows its long error %d times, or its group's reason, or not behind a control:\n%s", n, body)
	}
}

// TestOverviewNotRun: a stage whose latest statistics say it answered
// mostly 75 (not run) gets a banner, with its messages' list; the
// banner goes when a write says otherwise, or when the write is older
// than two STATS_INTERVALs.
func TestOverviewNotRun(t *testing.T) {
	t.Parallel()
	s := newSite(t, siteOptions{stages: []string{"a"}})
	holdLock(t, s.dsn) // a dispatcher runs: no banner of its own
	var o bannersJSON
	look := o.looker(t, s)
	look("no banner", func() bool { return len(o.Banners) == 0 })
	s.exec(`INSERT INTO pepsi.stage_stats (stage, not_run, recent_not_run, recent_passes, processed) VALUES ('a', 7, 7, 1, 1)`)
	look("the not-run banner", func() bool { return o.banner("not_run") != "" })
	if got, want := o.banner("not_run"), "Stage a answered 75 (not run) in 7 of its last 8 answers: those messages go back and are tried again every second, "+
		"with no attempt counted. A stage should answer 75 only when it cannot reach its database; their errors say why."; got != want {
		t.Errorf("not_run: %q, want %q", got, want)
	}
	for _, b := range o.Banners {
		if b.Kind == "not_run" && b.Link != "/messages?stage=a&status=paused" {
			t.Errorf("not_run links to %q", b.Link)
		}
	}
	s.exec(`UPDATE pepsi.stage_stats SET recent_not_run = 1, recent_passes = 30`)
	look("no banner once it runs its messages", func() bool { return len(o.Banners) == 0 })
	s.exec(`UPDATE pepsi.stage_stats SET recent_not_run = 7, recent_passes = 0, updated_at = now() - interval '3 minutes'`)
	look("no banner for an old write", func() bool { return len(o.Banners) == 0 })
}

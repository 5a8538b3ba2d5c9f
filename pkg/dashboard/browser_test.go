package dashboard_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// chromium finds Debian's Chromium: $PEPSI_CHROMIUM, else chromium on
// PATH, else /usr/bin/chromium; "" when there is none.
func chromium() string {
	if p := os.Getenv("PEPSI_CHROMIUM"); p != "" {
		return p
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	return ""
}

// needChromium is chromium(), or the test's end when there is none: a
// failure under .ci/run (CI=true), which installs it, else a skip.
func needChromium(t *testing.T) string {
	t.Helper()
	bin := chromium()
	if bin == "" {
		const msg = "no Chromium: the browser test needs it (apt-get install chromium; .ci/run installs it)"
		if os.Getenv("CI") == "true" { // .ci/run has installed it: its absence is a failure
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// screenshotEnv names a file that also gets the overview's screenshot
// (make screenshot: docs/dashboard.png for the README).
const screenshotEnv = "PEPSI_DASHBOARD_SCREENSHOT"

// TestBrowser drives the dashboard in headless Chromium as an operator
// would: the overview (its screenshot saved under the test's artifact
// directory, and by make screenshot for the README) with the failures of
// the last minutes, the backlogs' trends and the charts on one scale; its
// banners, each provoked one at a time (a standby gone, a stage no section
// configures, running messages no dispatcher holds); a failure group's
// messages, three of them ticked and retried through the confirmation, the
// result a page of its own that a reload does not post again, the rest
// retried at another stage with a priority; the controls (a stage paused
// from the overview with a reason, its banner, resumed; ticked messages
// held, then released; one cancelled from its page); the history timeline
// of a message that failed twice and then passed; the pages at a phone's width
// (390 px: the overview's failed column in view without scrolling, the
// page not scrolling sideways) and in the dark. Issue 54: the charts larger,
// with the scale's values; the banners' severities (no dispatcher an
// error, a pause a notice); the way back of a confirmation away from its
// red button; scheduled messages apart from retries, due to the minute;
// the overview's next due; the schedules page; the theme switch,
// remembered over a reload; and at 390 px, a failure group's Retry… and
// Purge…, a failed list's errors and a message's history on the first
// screen.
func TestBrowser(t *testing.T) {
	bin := needChromium(t)
	t.Parallel()
	s := newSite(t, siteOptions{users: true, actors: []string{"alice"}, stages: []string{"parse", "enrich", "deliver"}, noSampler: true,
		options: withSchedules(t, browserConf)})
	seed := seedPipeline(t, s)
	lost := seed.lost

	profile := t.TempDir()
	var out bytes.Buffer
	actx, stopBrowser := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // root in CI
		chromedp.DisableGPU,
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 1000),
		chromedp.CombinedOutput(&out),
	)...)
	browser, closeTab := chromedp.NewContext(actx)
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			closeTab()
			stopBrowser()
		}
	}
	defer stop()
	// Every step within three minutes: Chromium starts slowly on a busy machine.
	c, cancel := context.WithTimeout(browser, 3*time.Minute)
	defer cancel()
	fatal := func(step string, err error) {
		t.Helper()
		t.Fatalf("%s: %v\nChromium said:\n%s", step, err, out.String())
	}
	shot := func(name string) []byte {
		t.Helper()
		png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
		if err != nil {
			fatal("screenshot "+name, err)
		}
		path := filepath.Join(t.ArtifactDir(), name+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
		return png
	}
	// overview loads the overview until sel is on it (the counts it shows
	// may be a moment old).
	overview := func(step, sel string) {
		t.Helper()
		testkit.Wait(t, step, 2*time.Minute, func() bool {
			if err := chromedp.Do(c, chromedp.Navigate(s.base+"/"), chromedp.WaitVisible(chromedp.CSS("table.stages"))); err != nil {
				fatal(step, err)
			}
			n, err := chromedp.Run(c, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(sel)+`).length`))
			if err != nil {
				fatal(step, err)
			}
			return n > 0
		})
	}

	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+alicePass))
	if err := chromedp.Do(c, func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
			return chromedp.Void{}, err
		}
		_, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}})
		return chromedp.Void{}, err
	}); err != nil {
		fatal("sign in", err)
	}

	// The overview, all well, and its screenshot.
	overview("open the overview", "section.charts svg.chart")
	text, err := chromedp.Run(c, chromedp.Text(chromedp.CSS("section.dispatcher")))
	if err != nil || !strings.Contains(text, "owns every stage") || !strings.Contains(text, "Standbys waiting") {
		t.Errorf("the overview's dispatcher: %q, %v", text, err)
	}
	if n := len(columnTexts(t, c, "li.banner")); n != 0 {
		t.Errorf("all is well, and the overview has %d banners: %v", n, columnTexts(t, c, "li.banner"))
	}
	// Per stage: failed first, the failures of the last 15 minutes with
	// their share, the backlog's trend.
	heads := columnTexts(t, c, "table.stages thead th")
	if len(heads) < 4 || heads[1] != "failed" || heads[2] != "pending" || !strings.HasPrefix(heads[3], "failures") {
		t.Errorf("the overview's columns: %v", heads)
	}
	trends := columnTexts(t, c, "table.stages tbody td.trend")
	if len(trends) != 3 || !strings.HasPrefix(trends[1], "▼") || !strings.Contains(trends[1], "empty in") || !strings.HasPrefix(trends[2], "▲") {
		t.Errorf("the backlogs' trends (enrich draining, deliver growing): %v", trends)
	}
	if f := columnTexts(t, c, "table.stages tbody td.failing"); len(f) != 3 || !strings.Contains(f[0], "%") {
		t.Errorf("the failures of the last 15 minutes: %v", f)
	}
	if z := columnTexts(t, c, "table.stages tbody td.zero a"); len(z) == 0 {
		t.Error("no count of 0 on the overview")
	}
	// Zero is never red: a failed count of 0 is drawn as any zero.
	if red, err := chromedp.Run(c, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("td.zero a"), a => getComputedStyle(a).color)`)); err != nil ||
		slices.Contains(red, "rgb(192, 57, 43)") {
		t.Errorf("a zero drawn red: %v, %v", red, err)
	}
	// The charts: larger, the scale's values beside them.
	type size struct{ W, H float64 }
	if sz, err := chromedp.Run(c, chromedp.Evaluate[size](`(() => { const r = document.querySelector("svg.chart").getBoundingClientRect(); return {W: r.width, H: r.height}; })()`)); err != nil || sz.W < 300 || sz.H < 90 {
		t.Errorf("the chart is %+v px, want at least 300 × 90 (%v)", sz, err)
	}
	if v := columnTexts(t, c, "figure.chart:first-of-type svg.chart text.value"); len(v) < 3 || !strings.HasSuffix(v[0], "/s") || v[2] != "0" {
		t.Errorf("the chart's scale: %q, want its top, its half and 0", v)
	}
	// Every chart in view at 1280 px, none scrolled sideways.
	if r, err := chromedp.Run(c, chromedp.Evaluate[[]float64](`Array.from(document.querySelectorAll("svg.chart"), e => e.getBoundingClientRect().right)`)); err != nil || len(r) != 3 || slices.ContainsFunc(r, func(x float64) bool { return x > 1280 }) {
		t.Errorf("the charts end at %v px of a 1280 px window (%v)", r, err)
	}
	// The next due: deliver's scheduled messages and retries.
	if !slices.Contains(heads, "next due") {
		t.Errorf("the overview has no next due column: %v", heads)
	}
	if due := columnTexts(t, c, "table.stages tbody td.due"); len(due) != 3 || due[0] != "–" || !regexp.MustCompile(`^in [1-5] min`).MatchString(due[2]) {
		t.Errorf("the next due of parse, enrich, deliver: %q, want none, …, in 5 min or less (a retry before the scheduled ones)", due)
	}
	png := shot("overview")
	if p := os.Getenv(screenshotEnv); p != "" {
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The banners, each provoked one at a time. The standby goes: the dispatcher
	// it waited for runs without one.
	seed.stopStandby()
	overview("the lost standby's banner", "li.banner.no_standby")
	if b := columnTexts(t, c, "li.banner.no_standby"); len(b) != 1 || !strings.Contains(b[0], "runs without a standby: the last one, pid ") {
		t.Errorf("the lost standby's banner: %v", b)
	}
	// Messages at a stage no section configures.
	s.enqueue("legacy", 3, nil)
	overview("the unconfigured stage's banner", "li.banner.unconfigured")
	if b := columnTexts(t, c, "li.banner.unconfigured"); len(b) != 1 || !strings.Contains(b[0], "Stage legacy holds 3 unfinished messages, and no [stage-legacy] section") {
		t.Errorf("the unconfigured stage's banner: %v", b)
	}
	// The dispatcher stops: its running messages are held by none.
	seed.stopDispatcher()
	overview("the banner of running messages without a dispatcher", "li.banner.orphans")
	if b := columnTexts(t, c, "li.banner.orphans"); len(b) != 1 || !strings.HasPrefix(b[0], "20 messages are running with no dispatcher to hold them (stage parse: 4, enrich: 8, deliver: 8)") {
		t.Errorf("the orphans' banner: %q", b)
	}
	if b := columnTexts(t, c, "li.banner.no_dispatcher"); len(b) != 1 {
		t.Errorf("no dispatcher, and no banner says so: %v", columnTexts(t, c, "li.banner"))
	}
	before := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(c, chromedp.Evaluate[string](`getComputedStyle(document.querySelector(`+strconv.Quote(sel)+`), "::before").content`))
		if err != nil {
			fatal("the severity of "+sel, err)
		}
		return v
	}
	if e, w := before("li.banner.no_dispatcher.error"), before("li.banner.orphans.warning"); e != `"error"` || w != `"warning"` {
		t.Errorf("the banners' severities: no dispatcher %s, orphans %s", e, w)
	}
	if first := columnTexts(t, c, "li.banner:first-child.error"); len(first) != 1 {
		t.Errorf("the first banner is not an error: %v", columnTexts(t, c, "li.banner"))
	}
	shot("overview-banners")

	// Failures; the group of lost orders; its messages.
	if err := chromedp.Do(c,
		chromedp.Click(chromedp.CSS(`header nav a[href="/failures"]`)),
		chromedp.WaitVisible(chromedp.CSS("table.groups")),
		chromedp.Click(chromedp.CSS(`a.group[href*="reason=order"]`)),
		chromedp.WaitVisible(chromedp.CSS("table.messages")),
	); err != nil {
		fatal("follow the failure group", err)
	}
	if got := columnTexts(t, c, "table.messages td.status"); len(got) != len(lost) || slices.ContainsFunc(got, func(s string) bool { return s != "failed" }) {
		t.Fatalf("the group's messages: %v, want %d failed", got, len(lost))
	}
	if total := columnTexts(t, c, "p.total strong"); len(total) != 1 || total[0] != strconv.Itoa(len(lost)) {
		t.Errorf("the group's total: %v", total)
	}
	// The action bar is above the list; with nothing ticked, its buttons
	// for the ticked messages are off.
	if above, err := chromedp.Run(c, chromedp.Evaluate[bool](`document.querySelector("form.bulk").getBoundingClientRect().bottom <= document.querySelector("table.messages").getBoundingClientRect().top`)); err != nil || !above {
		t.Errorf("the action bar is not above the list: %v", err)
	}
	if off, err := chromedp.Run(c, chromedp.Evaluate[bool](`document.querySelector("button.ticked").disabled`)); err != nil || !off {
		t.Errorf("Retry of the ticked messages is offered with none ticked: %v", err)
	}

	// Tick three, and retry them: a confirmation that counts them, then the
	// retry, its result a page of its own.
	ids := columnTexts(t, c, "table.messages td.n a")
	ticked := ids[:3]
	for _, id := range ticked {
		if err := chromedp.Do(c, chromedp.Click(chromedp.CSS(`input[name="id"][value="`+id+`"]`))); err != nil {
			fatal("tick "+id, err)
		}
	}
	shot("messages-ticked")
	if err := chromedp.Do(c, chromedp.Click(chromedp.CSS(`button.ticked[formaction="/retry"]`)), chromedp.WaitVisible(chromedp.CSS("p.count"))); err != nil {
		fatal("ask to retry the ticked messages", err)
	}
	if text, err := chromedp.Run(c, chromedp.Text(chromedp.CSS("p.count"))); err != nil || !strings.Contains(text, "3 messages now") {
		t.Fatalf("the confirmation says %q, %v", text, err)
	}
	if st := s.states(lost); st[0].Status != "failed" {
		t.Fatalf("the confirmation retried: %+v", st[0])
	}
	backAway := func(where string) {
		t.Helper()
		gap, err := chromedp.Run(c, chromedp.Evaluate[float64](`document.querySelector("a.back").getBoundingClientRect().top - document.querySelector("form.confirm button.danger").getBoundingClientRect().bottom`))
		if err != nil || gap < 30 {
			t.Errorf("%s: the way back is %v px below the red button, not away from it (%v)", where, gap, err)
		}
	}
	backAway("the confirmation")
	shot("confirmation")
	if err := chromedp.Do(c, chromedp.Click(chromedp.CSS("form.confirm button.danger")), chromedp.WaitVisible(chromedp.CSS("a.next"))); err != nil {
		fatal("confirm", err)
	}
	shot("result")
	if text, err := chromedp.Run(c, chromedp.Text(chromedp.CSS("main p.ok"))); err != nil || !strings.HasPrefix(text, "Retried 3 messages") {
		t.Errorf("the result says %q, %v", text, err)
	}
	loc, err := chromedp.Run(c, chromedp.Location())
	if err != nil || !strings.HasPrefix(loc, s.base+"/actions/") {
		t.Errorf("the result is at %q, not a page of its own (%v)", loc, err)
	}
	retried := func() (n int) {
		for _, st := range s.states(lost) {
			if st.Status == "pending" {
				n++
			}
		}
		return n
	}
	if n := retried(); n != 3 {
		t.Errorf("%d of the group retried, want the 3 ticked", n)
	}
	// A reload shows the result again, and does nothing.
	s.exec(`UPDATE pepsi.state SET status = 'failed', error = 'again' WHERE id = $1`, atoi(t, ticked[0]))
	if err := chromedp.Do(c, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("a.next"))); err != nil {
		fatal("reload the result", err)
	}
	if text, err := chromedp.Run(c, chromedp.Text(chromedp.CSS("main p.ok"))); err != nil || !strings.HasPrefix(text, "Retried 3 messages") {
		t.Errorf("the result, reloaded, says %q, %v", text, err)
	}
	if st := s.states([]int64{atoi(t, ticked[0])}); st[0].Status != "failed" {
		t.Errorf("the reload retried again: %+v", st[0])
	}
	s.exec(`UPDATE pepsi.state SET status = 'pending', error = NULL WHERE id = $1`, atoi(t, ticked[0]))

	// The rest of the group, at stage deliver with priority -5: every
	// message the list's filter matches.
	if err := chromedp.Do(c, chromedp.Navigate(s.base+"/messages?stage=enrich&status=failed&reason=order+N%3A+sku+not+in+the+catalogue"),
		chromedp.WaitVisible(chromedp.CSS("table.messages")),
		chromedp.SetValue(chromedp.CSS(`form.bulk select[name="to_stage"]`), "deliver"),
		chromedp.SetValue(chromedp.CSS(`form.bulk input[name="priority"]`), "-5"),
		chromedp.Click(chromedp.CSS(`button.all[formaction="/retry"]`)),
		chromedp.WaitVisible(chromedp.CSS("p.count")),
	); err != nil {
		fatal("ask to retry the rest of the group", err)
	}
	rest := strconv.Itoa(len(lost) - 3)
	if text, err := chromedp.Run(c, chromedp.Text(chromedp.CSS("main"))); err != nil || !strings.Contains(text, rest+" messages now") || !strings.Contains(text, "at stage deliver with priority -5") {
		t.Fatalf("the confirmation of the rest says %q, %v", text, err)
	}
	if err := chromedp.Do(c, chromedp.Click(chromedp.CSS("form.confirm button.danger")), chromedp.WaitVisible(chromedp.CSS("a.next"))); err != nil {
		fatal("confirm the rest", err)
	}
	for i, st := range s.states(lost) {
		want := "deliver"
		if slices.Contains(ticked, strconv.FormatInt(lost[i], 10)) {
			want = "enrich"
		}
		if st.Status != "pending" || st.Error != nil || st.Attempts != 0 || st.Stage != want {
			t.Errorf("message %d after the retries: %+v, want pending at %s", lost[i], st, want)
		}
	}
	// The messages, pending.
	if err := chromedp.Do(c, chromedp.Click(chromedp.CSS("a.next")), chromedp.WaitVisible(chromedp.CSS("table.messages"))); err != nil {
		fatal("see the messages", err)
	}
	if got := columnTexts(t, c, "table.messages td.status"); len(got) == 0 || slices.ContainsFunc(got, func(s string) bool { return s != "pending" }) {
		t.Errorf("statuses after the retry: %v", got)
	}

	// The controls. Pause a stage from the overview, with a reason: its
	// banner and its badge; then resume it.
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(c, actions...); err != nil {
			fatal(what, err)
		}
	}
	resultSays := func(what, want string) {
		t.Helper()
		step(what+": confirm", chromedp.Click(chromedp.CSS("form.confirm button.danger")), chromedp.WaitVisible(chromedp.CSS("a.next")))
		if text, err := chromedp.Run(c, chromedp.Text(chromedp.CSS("main"))); err != nil || !strings.Contains(text, want) {
			t.Errorf("%s: the result says %q, want %q (%v)", what, text, want, err)
		}
	}
	overview("the overview's controls", `form[action="/pause"]`)
	step("ask to pause parse", chromedp.Click(chromedp.CSS(`form[action="/pause"]:has(input[value="parse"]) button`)),
		chromedp.WaitVisible(chromedp.CSS(`form.confirm input[name="reason"]`)),
		chromedp.SendKeys(chromedp.CSS(`form.confirm input[name="reason"]`), "the parser's schema is changing"))
	resultSays("pause parse", `Paused stage parse ("the parser's schema is changing")`)
	overview("the paused stage's banner", "li.banner.paused")
	if b := columnTexts(t, c, "li.banner.paused"); len(b) != 1 || !strings.Contains(b[0], "Stage parse is paused, by alice since") || !strings.Contains(b[0], "the parser's schema is changing") {
		t.Errorf("the paused stage's banner: %v", b)
	}
	if n := before("li.banner.paused.notice"); n != `"notice"` {
		t.Errorf("the pause's severity: %s", n)
	}
	if bg, err := chromedp.Run(c, chromedp.Evaluate[[]string](`["li.banner.paused", "li.banner.no_dispatcher"].map(s => getComputedStyle(document.querySelector(s)).backgroundColor)`)); err != nil || len(bg) != 2 || bg[0] == bg[1] {
		t.Errorf("a pause looks like no dispatcher: %v, %v", bg, err)
	}
	if badge := columnTexts(t, c, "table.stages span.badge.paused"); len(badge) != 1 {
		t.Errorf("paused badges: %v", badge)
	}
	shot("overview-paused")
	step("ask to resume parse", chromedp.Click(chromedp.CSS(`form[action="/resume"]:has(input[value="parse"]) button`)), chromedp.WaitVisible(chromedp.CSS("p.count")))
	resultSays("resume parse", "Resumed stage parse")
	overview("the overview without the pause", `form[action="/pause"]:has(input[value="parse"])`)

	// Hold two ticked pending messages, then release every held one.
	step("the pending messages of parse", chromedp.Navigate(s.base+"/messages?stage=parse&status=pending"), chromedp.WaitVisible(chromedp.CSS("table.messages")))
	pendingIDs := columnTexts(t, c, "table.messages td.n a")
	for _, id := range pendingIDs[:2] {
		step("tick "+id, chromedp.Click(chromedp.CSS(`input[name="id"][value="`+id+`"]`)))
	}
	step("ask to hold them", chromedp.Click(chromedp.CSS(`button.ticked[formaction="/hold"]`)), chromedp.WaitVisible(chromedp.CSS("p.count")))
	resultSays("hold", "Held 2 messages")
	step("the held messages", chromedp.Navigate(s.base+"/messages?stage=parse&status=held"), chromedp.WaitVisible(chromedp.CSS("table.messages")))
	if held := columnTexts(t, c, "table.messages td.n a"); len(held) != 2 {
		t.Errorf("held: %v, want the 2 ticked", held)
	}
	step("ask to release them", chromedp.Click(chromedp.CSS(`button.all[formaction="/release"]`)), chromedp.WaitVisible(chromedp.CSS("p.count")))
	resultSays("release", "Released 2 messages")

	// Cancel one message from its page.
	step("a pending message", chromedp.Navigate(s.base+"/messages/"+pendingIDs[2]), chromedp.WaitVisible(chromedp.CSS(`button.cancel`)))
	step("ask to cancel it", chromedp.Click(chromedp.CSS(`button.cancel`)), chromedp.WaitVisible(chromedp.CSS("p.count")))
	resultSays("cancel", "Cancelled 1 message")
	if st := s.states([]int64{atoi(t, pendingIDs[2])}); st[0].Status != "cancelled" || st[0].Error == nil || *st[0].Error != "cancelled by alice" {
		t.Errorf("the cancelled message: %+v", st[0])
	}

	// Scheduled messages apart from retries, due to the minute.
	step("deliver's paused messages", chromedp.Navigate(s.base+"/messages?stage=deliver&status=paused"), chromedp.WaitVisible(chromedp.CSS("table.messages")))
	var scheduled, retries int
	for _, st := range columnTexts(t, c, "table.messages td.status") {
		switch {
		case regexp.MustCompile(`^scheduled in 1 h 4[4-7] min$`).MatchString(st):
			scheduled++
		case regexp.MustCompile(`^paused retry in ([1-5] min( \d+ s)?|\d+ s|now)$`).MatchString(st):
			retries++
		default:
			t.Errorf("a paused message's status: %q", st)
		}
	}
	if scheduled != 2 || retries != 3 {
		t.Errorf("%d scheduled and %d retries, want 2 and 3", scheduled, retries)
	}
	shot("scheduled")

	// The schedules.
	step("the schedules", chromedp.Click(chromedp.CSS(`header nav a[href="/schedules"]`)), chromedp.WaitVisible(chromedp.CSS("table.schedules")))
	if names := columnTexts(t, c, "table.schedules tbody th"); !slices.Equal(names, []string{"nightly-report", "tick"}) {
		t.Errorf("the schedules: %v", names)
	}
	if next := columnTexts(t, c, "table.schedules td.next"); len(next) != 2 || !strings.Contains(next[0], " 02:30:00 UTC (in ") || !strings.Contains(next[1], "(in ") {
		t.Errorf("the next slots: %q", next)
	}
	if last := columnTexts(t, c, "table.schedules td.last"); len(last) != 2 || last[0] != "–" || !strings.Contains(last[1], "message "+strconv.FormatInt(seed.tickID, 10)) {
		t.Errorf("the last slots: %q", last)
	}
	shot("schedules")

	// The theme switch: light, dark, and the system's again; remembered
	// over a reload.
	background := func() string {
		t.Helper()
		bg, err := chromedp.Run(c, chromedp.Evaluate[string](`getComputedStyle(document.body).backgroundColor`))
		if err != nil {
			fatal("the background", err)
		}
		return bg
	}
	themeIs := func(want, bg string) {
		t.Helper()
		if got := columnTexts(t, c, "button.theme"); len(got) != 1 || got[0] != "theme: "+want || background() != bg {
			t.Errorf("the theme: %v on %s, want %s on %s", got, background(), want, bg)
		}
	}
	const light, dark = "rgb(255, 255, 255)", "rgb(22, 25, 28)"
	themeIs("auto", light)
	step("the theme: light", chromedp.Click(chromedp.CSS("button.theme")))
	themeIs("light", light)
	step("the theme: dark", chromedp.Click(chromedp.CSS("button.theme")))
	themeIs("dark", dark)
	step("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("table.schedules")))
	themeIs("dark", dark)
	shot("schedules-dark")
	step("the theme: the system's", chromedp.Click(chromedp.CSS("button.theme")))
	themeIs("auto", light)

	// The history of a message that failed twice and then passed: a
	// timeline, oldest first; the long reason cut until asked for.
	hist := strconv.FormatInt(failTwiceThenPass(t, s, "deliver"), 10)
	step("a message's history", chromedp.Navigate(s.base+"/messages/"+hist), chromedp.WaitVisible(chromedp.CSS("ol.timeline")))
	entries := columnTexts(t, c, "ol.timeline > li")
	if len(entries) != 6 || !strings.HasSuffix(entries[0], "enqueued") || !strings.HasPrefix(entries[1], "passes that succeeded are not recorded") ||
		!strings.Contains(entries[2], "failed pass 1 at deliver, attempt 1: answer worker pid 4242") || !strings.Contains(entries[2], "upstream said no") ||
		!strings.Contains(entries[3], "failed pass 2 at deliver, attempt 2: crash worker pid 4243") ||
		!strings.Contains(entries[4], "passed deliver, finishing it") ||
		!strings.Contains(entries[5], "now done at deliver, attempt 3 there") {
		t.Errorf("the history timeline: %q", entries)
	}
	// Done: the crash's answer its row keeps is not shown as its error.
	if f := columnTexts(t, c, "table.fields pre.error"); len(f) != 0 {
		t.Errorf("a done message shows an error as its own: %q", f)
	}
	crashShown := func() bool {
		t.Helper()
		v, err := chromedp.Run(c, chromedp.Evaluate[bool](`document.querySelector("ol.timeline li.pass:nth-of-type(4) details").open && document.querySelector("ol.timeline li.pass:nth-of-type(4) details > pre").offsetHeight > 0`))
		if err != nil {
			fatal("the crash's reason", err)
		}
		return v
	}
	if crashShown() {
		t.Error("the long reason is shown whole before it is asked for")
	}
	step("show the crash's whole reason", chromedp.Click(chromedp.CSS("ol.timeline li.pass:nth-of-type(4) summary")))
	if !crashShown() {
		t.Error("the long reason is not shown once asked for")
	}
	shot("message-history")

	// A phone: 390 px wide. The page does not scroll sideways; the
	// overview's stage, failed and pending columns are in view.
	if err := chromedp.Do(c, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateTouch, chromedp.EmulatePortrait)); err != nil {
		fatal("a phone's viewport", err)
	}
	overview("the overview on a phone", "table.stages")
	type box struct{ Right, Width, Scroll float64 }
	for _, col := range []string{"th[scope=row]", "td:nth-of-type(1)", "td:nth-of-type(2)"} { // stage, failed, pending
		b, err := chromedp.Run(c, chromedp.Evaluate[box](`(() => { const r = document.querySelector("table.stages tbody tr").querySelector(`+strconv.Quote(col)+`).getBoundingClientRect();
			return {Right: r.right, Width: window.innerWidth, Scroll: document.documentElement.scrollWidth}; })()`))
		if err != nil {
			fatal("measure "+col, err)
		}
		if b.Width != 390 || b.Right > b.Width || b.Scroll > b.Width {
			t.Errorf("at 390 px, %s ends at %v px of a %v px window, the page %v px wide", col, b.Right, b.Width, b.Scroll)
		}
	}
	if r, err := chromedp.Run(c, chromedp.Evaluate[float64](`document.querySelector("li.banner.error").getBoundingClientRect().right`)); err != nil || r > 390 || before("li.banner.error") != `"error"` {
		t.Errorf("at 390 px, the error banner ends at %v px, or does not say error (%v)", r, err)
	}
	shot("overview-phone")
	// In view at 390 px without scrolling: a failure group's Retry… and
	// Purge…, a failed list's errors, a message's history.
	inView := func(what, sel string, minWidth float64) {
		t.Helper()
		b, err := chromedp.Run(c, chromedp.Evaluate[[]float64](`Array.from(document.querySelectorAll(`+strconv.Quote(sel)+`)).slice(0, 3).map(e => { const r = e.getBoundingClientRect(); return [r.left, r.right, r.width, r.top]; }).flat()`))
		if err != nil || len(b) == 0 {
			t.Errorf("at 390 px, %s: none (%v)", what, err)
			return
		}
		for i := 0; i+3 < len(b); i += 4 {
			if b[i] < 0 || b[i+1] > 390 || b[i+2] < minWidth || b[i+3] > 844 {
				t.Errorf("at 390 px, %s is at [%v, %v] px, %v px wide, %v px down: not in view", what, b[i], b[i+1], b[i+2], b[i+3])
			}
		}
	}
	step("the failures on a phone", chromedp.Navigate(s.base+"/failures"), chromedp.WaitVisible(chromedp.CSS("table.groups")))
	inView("a failure group's Retry…", "table.groups td.acts button:first-of-type", 40)
	inView("a failure group's Purge…", `table.groups td.acts button[formaction="/purge"]`, 40)
	step("the failed on a phone", chromedp.Navigate(s.base+"/messages?status=failed"), chromedp.WaitVisible(chromedp.CSS("table.messages")))
	inView("a failed message's error", "table.messages td.error", 200)
	failedIDs := columnTexts(t, c, "table.messages td.n a")
	if len(failedIDs) == 0 {
		t.Fatal("no failed message")
	}
	step("a failed message on a phone", chromedp.Navigate(s.base+"/messages/"+failedIDs[0]), chromedp.WaitVisible(chromedp.CSS("ol.timeline")))
	inView("a failed message's history", "ol.timeline > li.now", 200)
	step("a confirmation on a phone", chromedp.Navigate(s.base+"/messages?stage=parse&status=pending"), chromedp.WaitVisible(chromedp.CSS("table.messages")),
		chromedp.Click(chromedp.CSS(`button.all[formaction="/cancel"]`)), chromedp.WaitVisible(chromedp.CSS("p.count")))
	backAway("the confirmation on a phone")
	shot("confirmation-phone")
	for _, path := range []string{"/messages?status=pending", "/failures", "/messages/" + strconv.FormatInt(lost[0], 10), "/messages/" + hist,
		"/messages?stage=deliver&status=paused", "/schedules"} {
		if err := chromedp.Do(c, chromedp.Navigate(s.base+path), chromedp.WaitVisible(chromedp.CSS("main h1"))); err != nil {
			fatal("open "+path+" on a phone", err)
		}
		if w, err := chromedp.Run(c, chromedp.Evaluate[float64](`document.documentElement.scrollWidth`)); err != nil || w > 390 {
			t.Errorf("%s on a phone is %v px wide (%v)", path, w, err)
		}
		shot("phone" + strings.NewReplacer("/", "-", "?", "-", "=", "-").Replace(path))
	}

	// In the dark.
	if err := chromedp.Do(c, chromedp.EmulateViewport(1280, 1000), func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
		return chromedp.Void{}, err
	}); err != nil {
		fatal("the dark", err)
	}
	overview("the overview in the dark", "table.stages")
	if bg, err := chromedp.Run(c, chromedp.Evaluate[string](`getComputedStyle(document.body).backgroundColor`)); err != nil || bg != "rgb(22, 25, 28)" {
		t.Errorf("the page's background in the dark: %q, %v", bg, err)
	}
	shot("overview-dark")

	// Chromium goes, all of it.
	stop()
	testkit.Wait(t, "Chromium's processes to exit", time.Minute, func() bool { return len(processesUsing(profile)) == 0 })
}

// browserConf is the browser test's pepsi.conf, for its schedules.
const browserConf = `[stage-parse]
PROGRAM = p
[stage-enrich]
PROGRAM = e
[stage-deliver]
PROGRAM = d
[schedule-nightly-report]
STAGE = deliver
CRON = 30 2 * * *
[schedule-tick]
STAGE = parse
EVERY = 5m
`

// atoi reads a message id the page showed.
func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// columnTexts returns the text of every element sel matches.
func columnTexts(t *testing.T, c context.Context, sel string) []string {
	t.Helper()
	got, err := chromedp.Run(c, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(`+strconv.Quote(sel)+`), e => e.textContent.trim())`))
	if err != nil {
		t.Fatalf("read %s: %v", sel, err)
	}
	return got
}

// processesUsing lists the processes whose command line names dir, as
// Chromium passes --user-data-dir to all of its own. It only reads /proc.
func processesUsing(dir string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmd, []byte("--user-data-dir="+dir)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// seeded is what seedPipeline made: the failure group the browser
// retries, and how to stop the dispatcher and its standby.
type seeded struct {
	lost                        []int64
	tickID                      int64 // the last message of schedule tick
	stopDispatcher, stopStandby func()
}

// seedPipeline fills the site with a pipeline's worth of messages, a
// dispatcher and a standby, 15 minutes of throughput and of backlog
// (enrich's draining, deliver's growing); it returns the failure group the
// browser retries.
func seedPipeline(t *testing.T, s *site) seeded {
	t.Helper()
	for _, st := range []struct {
		stage                          string
		done, pending, paused, running int
	}{{"parse", 1840, 12, 0, 4}, {"enrich", 960, 230, 6, 8}, {"deliver", 2210, 41, 3, 8}} {
		ids := s.enqueue(st.stage, st.done+st.pending+st.paused+st.running, []byte(`{"order":1}`))
		s.exec(`UPDATE pepsi.state SET status = 'done', updated_at = now() - interval '1 minute' WHERE id = ANY($1)`, ids[:st.done])
		s.exec(`UPDATE pepsi.state SET status = 'paused', attempts = 1, timeout = now() + interval '5 minutes' WHERE id = ANY($1)`, ids[st.done:st.done+st.paused])
		s.exec(`UPDATE pepsi.state SET status = 'running' WHERE id = ANY($1)`, ids[st.done+st.paused:st.done+st.paused+st.running])
		s.exec(`UPDATE pepsi.state SET updated_at = now() - interval '3 minutes' WHERE id = $1`, ids[len(ids)-1])
	}
	// Two scheduled at deliver, never run: due in 1 h 47 min.
	s.exec(`UPDATE pepsi.state SET status = 'paused', attempts = 0, timeout = now() + interval '1 hour 47 minutes 30 seconds' WHERE id = ANY($1)`, s.enqueue("deliver", 2, nil))
	tick := s.enqueue("parse", 1, nil)[0]
	s.exec(`UPDATE pepsi.state SET status = 'done' WHERE id = $1`, tick)
	s.exec(`INSERT INTO pepsi.schedule (name, since, last_slot, last_id, last_at)
		VALUES ('tick', now() - interval '1 hour', to_timestamp(floor(extract(epoch FROM now()) / 300) * 300), $1, now())`, tick)
	lost := s.enqueue("enrich", 12, []byte(`{"order":2}`))
	for i, id := range lost {
		s.fail([]int64{id}, "order "+strconv.Itoa(4100+i*7)+": sku not in the catalogue")
	}
	s.fail(s.enqueue("deliver", 3, nil), "upstream 503 after 30s")
	s.fail(s.enqueue("parse", 1, nil), `invalid JSON at byte 17: <script>`)
	disp := holdLock(t, s.dsn)
	_, stopStandby := stoppableStandby(t, s.dsn, "")

	// What the dispatcher would have written over 15 minutes, as the
	// server would have sampled it every 5 s (the site's own sampler is
	// off), ending with what the table holds; and the pending messages as
	// it would have counted them.
	now := time.Now()
	rates := map[string]float64{"parse": 6, "enrich": 3.2, "deliver": 7.5}
	share := map[string]float64{"parse": 0.004, "enrich": 0.03, "deliver": 0.012}
	ok, failed := map[string]float64{}, map[string]float64{}
	var totals []queue.StageStats
	for i := 180; i >= 0; i-- {
		totals = totals[:0]
		for j, st := range []string{"parse", "enrich", "deliver"} {
			wave := 1 + 0.6*math.Sin(float64(i+30*j)/14)
			ok[st] += rates[st] * wave * 5
			failed[st] += rates[st] * share[st] * (1 + wave) * 5
			totals = append(totals, queue.StageStats{Stage: st, Processed: int64(ok[st]), Failed: int64(failed[st])})
		}
		at := now.Add(-time.Duration(i) * 5 * time.Second)
		s.dash.AddSample(at, totals)
		if i > 0 {
			s.dash.AddBacklog(at, map[string]int64{"parse": 12, "enrich": 230 + int64(i)*2, "deliver": 41 - int64(i)/6})
		}
	}
	if err := s.db.AddStats(ctx(t), totals, queue.DispatchStats{}); err != nil {
		t.Fatal(err)
	}
	var o overviewJSON
	testkit.Wait(t, "the counts of the seeded queue", time.Minute, func() bool {
		o = overviewJSON{}
		s.getJSON("/", alice, &o)
		return o.Totals["failed"] == 16 && len(o.Standbys) == 1
	})
	return seeded{lost: lost, tickID: tick, stopStandby: stopStandby, stopDispatcher: func() { disp.Close(context.Background()) }}
}

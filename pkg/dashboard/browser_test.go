package dashboard_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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

// screenshotEnv names a file that also gets the overview's screenshot
// (make screenshot: docs/dashboard.png for the README).
const screenshotEnv = "PEPSI_DASHBOARD_SCREENSHOT"

// TestBrowser drives the dashboard in headless Chromium as an operator
// would: the overview (its screenshot saved under the test's artifact
// directory), the failures, one group's messages, the group retried
// through the confirmation, and its messages pending.
func TestBrowser(t *testing.T) {
	bin := chromium()
	if bin == "" {
		const msg = "no Chromium: the browser test needs it (apt-get install chromium; .ci/run installs it)"
		if os.Getenv("CI") == "true" { // .ci/run has installed it: its absence is a failure
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Parallel()
	s := newSite(t, siteOptions{users: true, actors: []string{"alice"}, stages: []string{"parse", "enrich", "deliver"}, noSampler: true})
	lost := seedPipeline(t, s)

	profile := t.TempDir()
	var out bytes.Buffer
	actx, stopBrowser := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // root in CI
		chromedp.DisableGPU,
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 720),
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
	// Every step within two minutes: Chromium starts slowly on a busy machine.
	c, cancel := context.WithTimeout(browser, 2*time.Minute)
	defer cancel()
	fatal := func(step string, err error) {
		t.Helper()
		t.Fatalf("%s: %v\nChromium said:\n%s", step, err, out.String())
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

	// The overview, and its screenshot.
	if err := chromedp.Do(c, chromedp.Navigate(s.base+"/"), chromedp.WaitVisible(chromedp.CSS("table.stages svg.chart"))); err != nil {
		fatal("open the overview", err)
	}
	text, err := chromedp.Run(c, chromedp.Text(chromedp.CSS("section.dispatcher")))
	if err != nil || !strings.Contains(text, "owns every stage") || !strings.Contains(text, "Standbys waiting") {
		t.Errorf("the overview's dispatcher: %q, %v", text, err)
	}
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		fatal("screenshot", err)
	}
	shot := filepath.Join(t.ArtifactDir(), "overview.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the overview: %s", shot)
	if p := os.Getenv(screenshotEnv); p != "" {
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

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

	// Retry it: a confirmation that counts them, then the retry.
	if err := chromedp.Do(c, chromedp.Click(chromedp.CSS(`form.action[action="/retry"] button`)), chromedp.WaitVisible(chromedp.CSS("p.count"))); err != nil {
		fatal("ask to retry", err)
	}
	if text, err := chromedp.Run(c, chromedp.Text(chromedp.CSS("p.count"))); err != nil || !strings.Contains(text, strconv.Itoa(len(lost))+" messages now") {
		t.Fatalf("the confirmation says %q, %v", text, err)
	}
	if st := s.states(lost); st[0].Status != "failed" {
		t.Fatalf("the confirmation retried: %+v", st[0])
	}
	if err := chromedp.Do(c, chromedp.Click(chromedp.CSS("form.confirm button.danger")), chromedp.WaitVisible(chromedp.CSS("a.next"))); err != nil {
		fatal("confirm", err)
	}
	if text, err := chromedp.Run(c, chromedp.Text(chromedp.CSS("main p.ok"))); err != nil || !strings.HasPrefix(text, "Retried "+strconv.Itoa(len(lost))+" messages") {
		t.Errorf("the result says %q, %v", text, err)
	}

	// The messages, pending.
	if err := chromedp.Do(c, chromedp.Click(chromedp.CSS("a.next")), chromedp.WaitVisible(chromedp.CSS("table.messages"))); err != nil {
		fatal("see the messages", err)
	}
	ids := columnTexts(t, c, "table.messages td:first-child")
	for _, id := range lost {
		if !slices.Contains(ids, strconv.FormatInt(id, 10)) {
			t.Errorf("message %d is not in the pending list %v", id, ids)
		}
	}
	if got := columnTexts(t, c, "table.messages td.status"); slices.ContainsFunc(got, func(s string) bool { return s != "pending" }) {
		t.Errorf("statuses after the retry: %v", got)
	}
	for i, st := range s.states(lost) {
		if st.Status != "pending" || st.Error != nil || st.Attempts != 0 {
			t.Errorf("message %d after the retry: %+v", lost[i], st)
		}
	}

	// Chromium goes, all of it.
	stop()
	testkit.Wait(t, "Chromium's processes to exit", time.Minute, func() bool { return len(processesUsing(profile)) == 0 })
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

// seedPipeline fills the site with a pipeline's worth of messages, a
// dispatcher and a standby, and 15 minutes of throughput; it returns the
// failure group the browser retries.
func seedPipeline(t *testing.T, s *site) (lost []int64) {
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
	lost = s.enqueue("enrich", 12, []byte(`{"order":2}`))
	for i, id := range lost {
		s.fail([]int64{id}, "order "+strconv.Itoa(4100+i*7)+": sku not in the catalogue")
	}
	s.fail(s.enqueue("deliver", 3, nil), "upstream 503 after 30s")
	s.fail(s.enqueue("parse", 1, nil), `invalid JSON at byte 17: <script>`)
	holdLock(t, s.dsn)
	standby(t, s.dsn)

	// What the dispatcher would have written over 15 minutes, as the
	// server would have sampled it every 5 s (the site's own sampler is
	// off), ending with what the table holds.
	now := time.Now()
	rates := map[string]float64{"parse": 6, "enrich": 3.2, "deliver": 7.5}
	ok, failed := map[string]float64{}, map[string]float64{}
	var totals []queue.StageStats
	for i := 180; i >= 0; i-- {
		totals = totals[:0]
		for j, st := range []string{"parse", "enrich", "deliver"} {
			wave := 1 + 0.6*math.Sin(float64(i+30*j)/14)
			ok[st] += rates[st] * wave * 5
			failed[st] += 0.1 * (1 - wave/2) * 5
			totals = append(totals, queue.StageStats{Stage: st, Processed: int64(ok[st]), Failed: int64(failed[st])})
		}
		s.dash.AddSample(now.Add(-time.Duration(i)*5*time.Second), totals)
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
	return lost
}

package dashboard_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserSearchCut: a page of a search cut short by its time budget
// says how far back it read ("read only the messages enqueued since …"),
// at 1280 and at 390 px, on the first screen and within the window's
// width; the messages it found are listed under it, and its link to the
// older messages leads on from where it stopped (two pages on, the other
// message found).
func TestBrowserSearchCut(t *testing.T) {
	bin := needChromium(t)
	// Not parallel: cutSearch sets admin.SearchSlice and admin.SearchBudget.
	s := newSite(t, siteOptions{stages: []string{"a"}, noSampler: true})
	ids := cutSearch(t, s)
	acme := []int64{ids[4], ids[24]}

	c, fatal := headless(t, bin)

	type note struct {
		Text                     string
		Left, Right, Top, Bottom float64
		Width, Height, Scroll    float64
		First                    string // the first row's id
	}
	for _, vp := range []struct {
		name          string
		width, height int64
		phone         bool
	}{{"1280 px", 1280, 1000, false}, {"390 px", 390, 844, true}} {
		emulate := chromedp.EmulateViewport(vp.width, vp.height)
		if vp.phone {
			emulate = chromedp.EmulateViewport(vp.width, vp.height, chromedp.EmulateMobile, chromedp.EmulateTouch, chromedp.EmulatePortrait)
		}
		if err := chromedp.Do(c, emulate, chromedp.Navigate(s.base+"/messages?header=tenant%3Dacme"), chromedp.WaitVisible(chromedp.CSS("p.cut"))); err != nil {
			fatal("the search at "+vp.name, err)
		}
		n, err := chromedp.Run(c, chromedp.Evaluate[note](`(() => { const p = document.querySelector("p.cut"), r = p.getBoundingClientRect(),
			a = document.querySelector("table.messages tbody td.n a");
			return {Text: p.textContent, Left: r.left, Right: r.right, Top: r.top, Bottom: r.bottom,
			        Width: window.innerWidth, Height: window.innerHeight, Scroll: document.documentElement.scrollWidth, First: a ? a.textContent : ""}; })()`))
		if err != nil {
			fatal("measure the note at "+vp.name, err)
		}
		if !strings.Contains(n.Text, "this page of the search read only the messages enqueued since") || !strings.Contains(n.Text, "Search older messages") {
			t.Errorf("at %s, the note says %q", vp.name, n.Text)
		}
		if n.Width != float64(vp.width) || n.Left < 0 || n.Right > n.Width || n.Bottom > n.Height || n.Scroll > n.Width {
			t.Errorf("at %s, the note is at [%v, %v] px across and [%v, %v] down, in a %v × %v px window, the page %v px wide: not in view",
				vp.name, n.Left, n.Right, n.Top, n.Bottom, n.Width, n.Height, n.Scroll)
		}
		if n.First != strconv.FormatInt(acme[1], 10) {
			t.Errorf("at %s, the page's first message is %q, want %d", vp.name, n.First, acme[1])
		}
		png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
		if err != nil {
			fatal("screenshot at "+vp.name, err)
		}
		path := filepath.Join(t.ArtifactDir(), "search-cut-"+strconv.FormatInt(vp.width, 10)+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
		// The older messages, twice: the slice with none of acme's, then the
		// one with the other.
		for range 2 {
			older, err := chromedp.Run(c, chromedp.Evaluate[string](`(() => { const a = document.querySelector("p.cut a"); return a ? a.href : ""; })()`))
			if err != nil || older == "" {
				t.Fatalf("at %s, no link to the older messages (%v)", vp.name, err)
			}
			if err := chromedp.Do(c, chromedp.Navigate(older), chromedp.WaitVisible(chromedp.CSS("main h1"))); err != nil {
				fatal("the older messages at "+vp.name, err)
			}
		}
		first, err := chromedp.Run(c, chromedp.Evaluate[string](`(() => { const a = document.querySelector("table.messages tbody td.n a"); return a ? a.textContent : ""; })()`))
		if err != nil || first != strconv.FormatInt(acme[0], 10) {
			t.Errorf("at %s, two pages older the first message is %q (%v), want %d", vp.name, first, err, acme[0])
		}
	}
}

// headless starts Chromium (bin) for a test, at 1280 × 1000 px until a
// test emulates another viewport, stopped when the test ends; fatal ends
// the test with what Chromium said.
func headless(t *testing.T, bin string) (c context.Context, fatal func(step string, err error)) {
	t.Helper()
	var out bytes.Buffer
	actx, stopBrowser := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // root in CI
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
		chromedp.CombinedOutput(&out),
	)...)
	browser, closeTab := chromedp.NewContext(actx)
	c, cancel := context.WithTimeout(browser, 3*time.Minute) // Chromium starts slowly on a busy machine
	t.Cleanup(func() {
		cancel()
		closeTab()
		stopBrowser()
	})
	return c, func(step string, err error) {
		t.Helper()
		t.Fatalf("%s: %v\nChromium said:\n%s", step, err, out.String())
	}
}

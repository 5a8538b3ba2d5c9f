package dashboard_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
)

// TestBrowserCounting: the first overview after a quiet spell, its counts
// still on their way (held back here by a lock on their partitions), says
// so at 1280 and at 390 px: a notice banner in view, "counting…" in the
// count cells, never a 0, the page no wider than the window; the next
// load, the count in, shows the counts.
func TestBrowserCounting(t *testing.T) {
	bin := needChromium(t)
	t.Parallel()
	s := newSite(t, siteOptions{stages: []string{"a"}, noSampler: true, countWait: true})
	s.enqueue("a", 3, []byte("x"))
	lock, err := pgx.Connect(ctx(t), s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(context.Background())
	if _, err := lock.Exec(ctx(t), "BEGIN; LOCK TABLE pepsi.state_live, pepsi.state_done IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}

	c, fatal := headless(t, bin)

	type look struct {
		Banner                string
		Right, Bottom         float64
		Counting, Zeros       int
		Width, Height, Scroll float64
	}
	for _, vp := range []struct {
		name          string
		width, height int64
		phone         bool
	}{{"1280 px", 1280, 1000, false}, {"390 px", 390, 844, true}} {
		s.dash.ForgetCounts()
		emulate := chromedp.EmulateViewport(vp.width, vp.height)
		if vp.phone {
			emulate = chromedp.EmulateViewport(vp.width, vp.height, chromedp.EmulateMobile, chromedp.EmulateTouch, chromedp.EmulatePortrait)
		}
		if err := chromedp.Do(c, emulate, chromedp.Navigate(s.base+"/"), chromedp.WaitVisible(chromedp.CSS("table.stages"))); err != nil {
			fatal("the overview at "+vp.name, err)
		}
		l, err := chromedp.Run(c, chromedp.Evaluate[look](`(() => { const b = document.querySelector("li.banner.counting"), r = b ? b.getBoundingClientRect() : {right: 0, bottom: 0};
			return {Banner: b ? b.textContent : "", Right: r.right, Bottom: r.bottom,
			        Counting: document.querySelectorAll("table.stages tbody td.counting").length,
			        Zeros: document.querySelectorAll("table.stages tbody td.zero").length,
			        Width: window.innerWidth, Height: window.innerHeight, Scroll: document.documentElement.scrollWidth}; })()`))
		if err != nil {
			fatal("look at the overview at "+vp.name, err)
		}
		if !strings.Contains(l.Banner, "Counting the queue") || l.Right > l.Width || l.Bottom > l.Height || l.Scroll > l.Width {
			t.Errorf("at %s, the notice %q ends at %v px across and %v down, in a %v × %v px window, the page %v px wide",
				vp.name, l.Banner, l.Right, l.Bottom, l.Width, l.Height, l.Scroll)
		}
		if l.Counting != 8 || l.Zeros != 0 {
			t.Errorf("at %s, %d counts say counting…, %d say 0; want 8 and none", vp.name, l.Counting, l.Zeros)
		}
		png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
		if err != nil {
			fatal("screenshot at "+vp.name, err)
		}
		path := filepath.Join(t.ArtifactDir(), "overview-counting-"+strconv.FormatInt(vp.width, 10)+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}

	if _, err := lock.Exec(ctx(t), "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if err := s.dash.CountsIn(ctx(t)); err != nil {
		t.Fatal(err)
	}
	s.get("/", http.StatusOK, req{}) // the count after the last ForgetCounts
	if err := s.dash.CountsIn(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(c, chromedp.Navigate(s.base+"/"), chromedp.WaitVisible(chromedp.CSS("table.stages"))); err != nil {
		fatal("the overview, counted", err)
	}
	n, err := chromedp.Run(c, chromedp.Evaluate[int](`document.querySelectorAll("td.counting, li.banner.counting").length`))
	if err != nil || n != 0 {
		t.Errorf("counted, the overview still says counting in %d places (%v)", n, err)
	}
	pending, err := chromedp.Run(c, chromedp.Evaluate[string](`document.querySelector("table.stages tbody td.pending a").textContent`))
	if err != nil || pending != "3" {
		t.Errorf("counted, pending shows %q (%v), want 3", pending, err)
	}
}

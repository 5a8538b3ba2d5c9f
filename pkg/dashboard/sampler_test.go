package dashboard

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestSamplerBins: a bar is the passes between the samples that bound it,
// per second; bars before the first sample are unknown; a counter that
// went down (its row deleted) counts as none; old samples are forgotten.
func TestSamplerBins(t *testing.T) {
	s := newSampler(150*time.Second, 10*time.Second) // bars of 10 s
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := func(sec int, ok, failed int64) {
		s.add(t0.Add(time.Duration(sec)*time.Second), []queue.StageStats{{Stage: "a", Processed: ok, Failed: failed}})
	}
	at(0, 100, 10)
	at(10, 150, 10) // 5/s ok
	at(20, 150, 30) // 2/s failed
	at(30, 90, 30)  // reset: nothing
	at(40, 190, 30) // 10/s
	bins := s.bins("a", t0.Add(40*time.Second))
	if len(bins) != chartBins {
		t.Fatalf("%d bins", len(bins))
	}
	last := bins[len(bins)-4:]
	want := []struct{ ok, failed float64 }{{5, 0}, {0, 2}, {0, 0}, {10, 0}}
	for i, b := range last {
		if !b.Known || b.OK != want[i].ok || b.Failed != want[i].failed {
			t.Errorf("bar %d from the end: %+v, want %+v", 3-i, b, want[i])
		}
	}
	for _, b := range bins[:len(bins)-4] {
		if b.Known {
			t.Errorf("a bar before the first sample is known: %+v", b)
		}
	}
	if b := s.bins("other", t0.Add(40*time.Second)); b[len(b)-1].OK != 0 || !b[len(b)-1].Known {
		t.Errorf("a stage without statistics: %+v", b[len(b)-1])
	}
	if st := s.stages(); len(st) != 1 || st[0] != "a" {
		t.Errorf("stages %v", st)
	}

	// Much later: the old samples go, the one before the window stays.
	at(1000, 200, 30)
	at(1010, 260, 30)
	if len(s.samples) > 3 {
		t.Errorf("%d samples kept", len(s.samples))
	}
	if b := s.bins("a", t0.Add(1010*time.Second)); b[len(b)-1].OK != 6 {
		t.Errorf("after the gap: %+v", b[len(b)-1])
	}
}

// TestSamplerSumsWriters: a sample is each stage's sum over the rows of
// every writer (a dispatcher per stage set, and the one of every stage).
func TestSamplerSumsWriters(t *testing.T) {
	t.Parallel()
	db, dsn := pgtest.New(t)
	ctx := context.Background()
	set, err := queue.Open(ctx, dsn, queue.Options{App: pgtest.App, Writer: queue.SetName([]string{"a"})})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if err := db.AddStats(ctx, []queue.StageStats{{Stage: "a", Processed: 7, Failed: 1}, {Stage: "b", Processed: 4}}, queue.DispatchStats{}); err != nil {
		t.Fatal(err)
	}
	if err := set.AddStats(ctx, []queue.StageStats{{Stage: "a", Processed: 5, Failed: 2}}, queue.DispatchStats{}); err != nil {
		t.Fatal(err)
	}
	adb, err := admin.Open(ctx, dsn, queue.Options{App: pgtest.App})
	if err != nil {
		t.Fatal(err)
	}
	defer adb.Close()
	s := newSampler(time.Minute, time.Second)
	if _, _, err := s.take(ctx, adb); err != nil {
		t.Fatal(err)
	}
	if x := s.samples[0]; x.ok["a"] != 12 || x.failed["a"] != 3 || x.ok["b"] != 4 {
		t.Errorf("sample %+v, want a: 12 ok and 3 failed, b: 4 ok", x)
	}
}

// TestChart: bars on the scale given (one for every stage), ok below
// failed, titles with the rates and the failed share, unknown bars drawn
// flat, the failed share in its lane under the axis (2 % visible), the
// failed messages in theirs under it, an axis
// with ticks and the window's ends, the scale's values on its left.
func TestChart(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	bins := []bin{
		{Start: t0, End: t0.Add(time.Minute)},
		{Start: t0.Add(time.Minute), End: t0.Add(2 * time.Minute), Known: true, OK: 3, Failed: 1},
		{Start: t0.Add(2 * time.Minute), End: t0.Add(3 * time.Minute), Known: true, OK: 2, FailedMessages: 6}, // of 120 passes: 5 %
		{Start: t0.Add(3 * time.Minute), End: t0.Add(4 * time.Minute), Known: true, OK: 4.9, Failed: 0.1},
	}
	if top := chartTop(bins, []bin{{Known: true, OK: 7}}); top != 8 {
		t.Errorf("the scale's top: %v, want 8 (7/s rounded up)", top)
	}
	svg := string(chartSVG(bins, 10, "15 min"))
	for _, want := range []string{
		`<svg class="chart" width="119" height="96"`,
		`aria-label="throughput, 5.0/s in the last bar; scale to 10/s"`,
		`<title>12:00:00–12:01:00 UTC: not sampled</title>`,
		`<title>12:01:00–12:02:00 UTC: 3.0/s ok, 1.0/s failed passes (25` + nnbsp + `%)</title>`,
		`<title>12:02:00–12:03:00 UTC: 2.0/s ok, 0/s failed passes (0` + nnbsp + `%); 6 failed messages</title>`,
		`<rect class="dead" x="82" y="75.5" width="16" height="4.0"`, // 5 % of the passes: half the lane
		`<rect class="ok" x="63" y="42.0" width="16" height="18.0"`,  // 3 of 10: 30 % of 60 px
		`<rect class="failed" x="63" y="36.0" width="16" height="6.0"`,
		`<rect class="share" x="63" y="61.5" width="16" height="14.0"`, // 25 %: the lane full
		`<rect class="ok" x="82" y="48.0" width="16" height="12.0"`,
		`<rect class="share" x="101" y="61.5" width="16" height="2.8"`, // 2 %: a fifth of the lane
		`<line class="axis"`, `<line class="tick" x1="44.5"`, `>−15 min</text>`, `>now</text>`,
		// The scale's values: its top, its half, 0.
		`text-anchor="end" dominant-baseline="middle">10/s</text>`, `>5.0/s</text>`, `>0</text>`,
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %s:\n%s", want, svg)
		}
	}
	if strings.Count(svg, `class="share"`) != 2 || strings.Count(svg, `class="dead"`) != 1 {
		t.Errorf("a failed share where none failed, or failed messages where none failed:\n%s", svg)
	}
	// The same rates on a larger scale draw smaller bars.
	if small := string(chartSVG(bins, 100, "15 min")); !strings.Contains(small, `<rect class="ok" x="63" y="58.2" width="16" height="1.8"`) {
		t.Errorf("3/s on a scale to 100/s:\n%s", small)
	}
}

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1\u202f000", 1234567: "1\u202f234\u202f567", -45000: "-45\u202f000"} {
		if got := number(n); got != want {
			t.Errorf("number(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{0: "0 s", 59 * time.Second: "59 s", 90 * time.Minute: "1 h", 47 * time.Hour: "47 h", 72 * time.Hour: "3 d", -time.Second: "0 s"} {
		if got := span(d); got != want {
			t.Errorf("span(%v) = %q, want %q", d, got, want)
		}
	}
	for f, want := range map[float64]string{0: "0" + nnbsp + "%", 0.0004: "<" + nnbsp + "0.1" + nnbsp + "%", 0.021: "2.1" + nnbsp + "%", 0.5: "50" + nnbsp + "%"} {
		if got := percent(f); got != want {
			t.Errorf("percent(%v) = %q, want %q", f, got, want)
		}
	}
	for v, want := range map[float64]string{0: "0/min", 2.5: "+2.5/min", -1234: "−1" + nnbsp + "234/min"} {
		if got := perMinute(v); got != want {
			t.Errorf("perMinute(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[float64]float64{0: 0, 0.7: 0.8, 3: 3, 3.1: 4, 2800: 3000, 410: 500, 1000: 1000, 9.4: 10, 11: 15} {
		if got := niceTop(v); got != want {
			t.Errorf("niceTop(%v) = %v, want %v", v, got, want)
		}
	}
	for r, want := range map[float64]string{0: "0/s", 0.05: "3.0/min", 2.345: "2.3/s", 123.4: "123/s"} {
		if got := rate(r); got != want {
			t.Errorf("rate(%v) = %q, want %q", r, got, want)
		}
	}
	if got := queryOf("/m", "b", "2", "a", "x y", "c", ""); got != "/m?a=x+y&b=2" {
		t.Errorf("queryOf: %s", got)
	}
}

package dispatch

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReadCapped: lines come back without their line ends, cut to the
// limit at a character boundary, with the count of what was cut; a long
// line is read past, not held.
func TestReadCapped(t *testing.T) {
	const limit = 16
	type line struct {
		text string
		cut  int
	}
	for _, c := range []struct {
		name, in string
		want     []line
	}{
		{"short", "a\nbc\r\n\n", []line{{"a", 0}, {"bc", 0}, {"", 0}}},
		{"last line without newline", "a\nlast", []line{{"a", 0}, {"last", 0}}},
		{"exactly the limit", strings.Repeat("x", 16) + "\nnext\n", []line{{strings.Repeat("x", 16), 0}, {"next", 0}}},
		{"one over", strings.Repeat("x", 17) + "\nnext\n", []line{{strings.Repeat("x", 16), 1}, {"next", 0}}},
		{"long", strings.Repeat("y", 100) + "\r\nnext\n", []line{{strings.Repeat("y", 16), 84}, {"next", 0}}},
		{"long at end of input", strings.Repeat("z", 40), []line{{strings.Repeat("z", 16), 24}}},
		// "é" is two bytes: the 16th byte would split the eighth.
		{"cut splits a character", "a" + strings.Repeat("é", 10) + "\n", []line{{"a" + strings.Repeat("é", 7), 6}}},
		{"invalid bytes", "a\xffb\n", []line{{"a\uFFFDb", 0}}},
		// Each invalid byte is three bytes of output: five fit in 16.
		{"invalid bytes over the limit", strings.Repeat("\xff", 10) + "\n", []line{{strings.Repeat("\uFFFD", 5), 5}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(c.in), limit)
			var got []line
			for {
				l, cut, err := readCapped(br, limit)
				if err != nil {
					if err != io.EOF {
						t.Fatal(err)
					}
					break
				}
				got = append(got, line{string(l), cut})
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Errorf("line %d: %+v, want %+v", i, got[i], c.want[i])
				}
			}
		})
	}
}

// TestStderrRelayRate: a burst goes through whole, then the sustained
// rate; dropping is logged when it starts, at most every stderrReport while
// it lasts, when the worker has slowed down and when stderr closes, and
// every dropped line is counted.
func TestStderrRelayRate(t *testing.T) {
	var logs bytes.Buffer
	now := time.Unix(1e9, 0)
	rec := &recorder{}
	s := newStderrRelay(slog.New(slog.NewTextHandler(&logs, nil)), "s", rec, func() time.Time { return now })

	// A flood: 1 000 lines a second for 30 s.
	relayed := 0
	for range 30_000 {
		now = now.Add(time.Millisecond)
		before := logs.Len()
		s.relay([]byte("line"), 0)
		if strings.Contains(logs.String()[before:], `msg="worker: line"`) {
			relayed++
		}
	}
	// The burst, then 50 a second for 30 s (give or take the rounding).
	if want := stderrBurst + 30*stderrRate; relayed < want-2 || relayed > want+2 {
		t.Errorf("relayed %d lines of the flood, want about %d", relayed, want)
	}
	summaries := strings.Count(logs.String(), "dropped_total=")
	if summaries < 2 || summaries > 3 {
		t.Errorf("%d reports of dropped lines in 30 s, want one every %v:\n%s", summaries, stderrReport, logs.String())
	}
	if n := strings.Count(logs.String(), "worker stderr: over the rate limit; dropping lines"); n != 1 {
		t.Errorf("dropping started %d times, want once", n)
	}

	// Quiet long enough to refill the burst: the next line says so.
	now = now.Add(time.Duration(stderrBurst/stderrRate+1) * time.Second)
	s.relay([]byte("after"), 0)
	out := logs.String()
	if !strings.Contains(out, "worker stderr: under the rate limit again") || !strings.Contains(out, `msg="worker: after"`) {
		t.Errorf("no end of the episode, or the next line missing:\n%s", out)
	}
	total := lastTotal(t, out)
	if total != int64(30_000-relayed) || rec.stderrLines != total {
		t.Errorf("dropped_total %d, observer %d, want %d", total, rec.stderrLines, 30_000-relayed)
	}

	// A cut line is logged marked and its bytes counted.
	s.relay([]byte("head"), 5_000)
	if !strings.Contains(logs.String(), `msg="worker: head… [cut 5000 bytes]"`) || rec.stderrBytes != 5_000 {
		t.Errorf("cut line: observer %d bytes; logs:\n%s", rec.stderrBytes, logs.String())
	}
}

// lastTotal returns the dropped_total of the last report in logs.
func lastTotal(t *testing.T, logs string) int64 {
	t.Helper()
	m := regexp.MustCompile(`dropped_total=(\d+)`).FindAllStringSubmatch(logs, -1)
	if m == nil {
		t.Fatalf("no report of dropped lines:\n%s", logs)
	}
	n, _ := strconv.ParseInt(m[len(m)-1][1], 10, 64)
	return n
}

// workerLines returns the log lines that relay the test worker's spew.
func workerLines(logs string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `msg="worker: spew `) {
			out = append(out, l)
		}
	}
	return out
}

// TestStderrLongLines: a stage that writes eight 5 MB lines to stderr adds
// eight log lines of about 4 KiB, each marked as cut.
func TestStderrLongLines(t *testing.T) {
	const size = 5_000_000
	rec := &recorder{handed: map[string]int{}, passed: map[Result]int{}}
	b := setup(t, fast, "work\nPARALLELISM = 1")
	b.obs = rec
	ids := b.enqueue("work", "work=stderr:8x"+strconv.Itoa(size))
	b.start()
	b.waitSettled(time.Minute)
	if st, _, derr := b.row(ids[0]); st != "done" {
		t.Fatalf("status %s (%s), want done", st, derr)
	}
	cut := "… [cut " + strconv.Itoa(size-stderrLineMax) + ` bytes]"`
	b.waitFor("eight cut lines logged", time.Minute, func() bool { return len(workerLines(b.logs.String())) == 8 })
	for i, l := range workerLines(b.logs.String()) {
		if len(l) > 4300 || !strings.Contains(l, cut) || !strings.Contains(l, `msg="worker: spew `+strconv.Itoa(i)+" ") {
			t.Errorf("log line %d: %d bytes, want at most 4300, ending in %q: %.120s…", i, len(l), cut, l)
		}
	}
	if n := len(b.logs.String()); n > 100<<10 {
		t.Errorf("the log grew to %d bytes for 40 MB of stderr", n)
	}
	rec.get(func() {
		if want := int64(8 * (size - stderrLineMax)); rec.stderrBytes != want || rec.stderrLines != 0 {
			t.Errorf("observer: %d bytes cut, %d lines dropped; want %d, 0", rec.stderrBytes, rec.stderrLines, want)
		}
	})
	b.checkInvariants()
}

// TestStderrFlood: a stage that writes 100 000 lines to stderr at once
// gets its burst and the rate logged; the rest is dropped, counted and
// reported, and nothing is lost from the count.
func TestStderrFlood(t *testing.T) {
	const n = 100_000
	rec := &recorder{handed: map[string]int{}, passed: map[Result]int{}}
	b := setup(t, fast, "work\nPARALLELISM = 1")
	b.obs = rec
	ids := b.enqueue("work", "work=stderr:"+strconv.Itoa(n)+"x20")
	began := time.Now()
	b.start()
	b.waitSettled(time.Minute)
	if st, _, derr := b.row(ids[0]); st != "done" {
		t.Fatalf("status %s (%s), want done", st, derr)
	}
	// Stopping ends the worker, and its stderr: the last report follows.
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	b.waitFor("the report at the end of stderr", time.Minute, func() bool {
		return strings.Contains(b.logs.String(), "worker stderr: closed; lines dropped")
	})
	elapsed := time.Since(began).Seconds()
	logs := b.logs.String()
	relayed := len(workerLines(logs))
	if most := stderrBurst + int(elapsed*stderrRate) + 1; relayed < stderrBurst || relayed > most {
		t.Errorf("%d lines relayed in %.1fs, want %d to %d", relayed, elapsed, stderrBurst, most)
	}
	if total := lastTotal(t, logs); total != int64(n-relayed) {
		t.Errorf("dropped_total %d + relayed %d != %d lines written", total, relayed, n)
	}
	if reports := strings.Count(logs, "dropped_total="); reports > 2+int(elapsed/stderrReport.Seconds()) {
		t.Errorf("%d reports of dropped lines in %.1fs", reports, elapsed)
	}
	if lines := strings.Count(logs, "\n"); lines > 1000 {
		t.Errorf("%d log lines for a flood of %d", lines, n)
	}
	rec.get(func() {
		if rec.stderrLines != int64(n-relayed) {
			t.Errorf("observer: %d lines dropped, want %d", rec.stderrLines, n-relayed)
		}
	})
	b.checkInvariants()
}

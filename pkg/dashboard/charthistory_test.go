package dashboard_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/dashboard"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestChartHistory: the sampler writes a sample a bar to
// pepsi.throughput, and a dashboard that starts (pepsi httpd restarted)
// reads the window's back: its chart has the minutes before it started.
func TestChartHistory(t *testing.T) {
	t.Parallel()
	// This server's charts span a minute: it writes a sample every 4 s.
	s := newSite(t, siteOptions{stages: []string{"a"}, options: func(o *dashboard.Options) {
		o.SampleEvery, o.Window = 100*time.Millisecond, time.Minute
	}})
	// Ten minutes of an earlier server's samples, one a minute: 2 passes
	// a second, one in ten failed.
	s.exec(`INSERT INTO pepsi.throughput (at, stage, processed, failed)
		SELECT now() - make_interval(mins => m), 'a', (10 - m) * 108, (10 - m) * 12 FROM generate_series(1, 10) AS m`)
	if err := s.db.AddStats(ctx(t), []queue.StageStats{{Stage: "a", Processed: 1200, Failed: 130}}, queue.DispatchStats{}); err != nil {
		t.Fatal(err)
	}
	// This one writes its own.
	testkit.Wait(t, "a sample written", time.Minute, func() bool {
		var n int
		if err := s.conn.QueryRow(ctx(t), `SELECT count(*) FROM pepsi.throughput WHERE stage = 'a' AND processed = 1200 AND failed = 130 AND at > now() - interval '1 minute'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	// A restart: the new server's chart has the last ten minutes at once.
	s2 := s.again(siteOptions{stages: []string{"a"}, options: func(o *dashboard.Options) { o.SampleEvery = 100 * time.Millisecond }})
	var o overviewJSON
	testkit.Wait(t, "the restarted server's chart", time.Minute, func() bool {
		o = overviewJSON{}
		s2.getJSON("/", req{}, &o)
		known := 0
		for _, b := range o.Stages[0].Throughput {
			if b.Known && b.OK > 1.7 && b.OK < 1.9 && b.Failed > 0.19 && b.Failed < 0.21 {
				known++
			}
		}
		return known >= 8
	})
	if strings.Contains(s.logs.String(), "cannot be kept") || strings.Contains(s2.logs.String(), "cannot be kept") {
		t.Errorf("the history could not be kept:\n%s\n%s", s.logs.String(), s2.logs.String())
	}
	// Samples older than an hour are deleted by the next write.
	s.exec(`INSERT INTO pepsi.throughput (at, stage, processed, failed) VALUES (now() - interval '2 hours', 'a', 0, 0)`)
	testkit.Wait(t, "the old sample deleted", time.Minute, func() bool {
		var n int
		if err := s.conn.QueryRow(ctx(t), `SELECT count(*) FROM pepsi.throughput WHERE at < now() - interval '1 hour'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
}

package dispatch

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

const fast = "POLL_INTERVAL = 30\nSTATS_INTERVAL = 60\nWORKER_IDLE_TIMEOUT = 30\nSHUTDOWN_GRACE = 5"

// TestPipeline drives 2 000 messages through three stages.
func TestPipeline(t *testing.T) {
	b := setup(t, fast,
		"parse\nPARALLELISM = 2\nQUEUE_LIMIT = 4",
		"enrich\nPARALLELISM = 2\nQUEUE_LIMIT = 4",
		"deliver\nPARALLELISM = 2\nQUEUE_LIMIT = 4")
	const n = 2000
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = "parse=advance:enrich enrich=advance:deliver deliver=finish"
	}
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.start()
	start := time.Now()
	b.enqueue("parse", payloads...)
	b.waitFor("all done", 3*time.Minute, func() bool { return b.count("done") == n })
	elapsed := time.Since(start)
	// A row is done when the last stage commits, a moment before the
	// dispatcher reads its answer: stopping then would leave that pass
	// out of the statistics. The flush when the pipeline goes idle shows
	// every answer booked.
	b.waitFor("every pass booked", time.Minute, func() bool {
		_, g, err := b.db.ReadStats(context.Background())
		return err == nil && g.StagePasses == 3*n
	})
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	t.Logf("%d messages × 3 stages in %v: %.0f messages/s, %.0f stage passes/s; this process (dispatcher and test) used %v CPU",
		n, elapsed, n/elapsed.Seconds(), 3*n/elapsed.Seconds(), cpu)
	b.checkInvariants()
	if got := b.int64("SELECT count(*) FROM test_passes"); got != 3*n {
		t.Errorf("stage passes recorded = %d, want %d", got, 3*n)
	}
	stages, g, err := b.db.ReadStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stages {
		if s.Processed != n || s.Failed != 0 {
			t.Errorf("stage %s: processed %d failed %d, want %d 0", s.Stage, s.Processed, s.Failed, n)
		}
	}
	if len(stages) != 3 || g.StagePasses != 3*n || g.Requeued != 2*n || g.Done != n {
		t.Errorf("stats: %d stages, passes %d requeued %d done %d", len(stages), g.StagePasses, g.Requeued, g.Done)
	}
	if strings.Count(b.logs.String(), "\n") > 200 {
		t.Errorf("too many log lines for %d messages:\n%s", n, b.logs)
	}
}

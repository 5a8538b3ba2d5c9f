package dispatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// TestChaosOutageDefaults: the server crashes (an immediate stop) under
// load and comes back a few seconds later, with the default configuration
// (no RETRIES). The stage programs whose connections broke answer 75 or
// exit, and the passes the outage cost are not the messages' fault: every
// message ends done, none failed, none left running, and the statistics
// hold what an outage leaves exact (checkAfterOutage).
func TestChaosOutageDefaults(t *testing.T) {
	const total = 600
	c, b := underWay(t, total, "MAX_RUNTIME = 20")
	if n := b.count("done"); n == total {
		t.Fatal("everything finished before the outage: the test proves nothing")
	}
	b.crashServer(c)
	b.waitSettledTolerant(3 * time.Minute)
	if n := b.count("failed"); n != 0 {
		t.Errorf("%d messages failed, want none: %v", n, b.failures())
	}
	if n := b.count("done"); n != total {
		t.Errorf("%d done, want %d", n, total)
	}
	b.checkAfterOutage()
}

// underWay starts a dispatcher of the chaos configuration (with settings)
// on a cluster of its own, with total messages of 10 ms a pass through
// three stages, and returns once a quarter of them are done.
func underWay(t *testing.T, total int64, settings ...string) (*cluster, *bundle) {
	t.Helper()
	c := newCluster(t)
	c.durable()
	t.Setenv("PEPSI_TEST_DSN", c.dsn)
	b := setup(t, chaosWith(settings...), chaosStages("", "", "")...)
	payloads := make([]string, total)
	for i := range payloads {
		payloads[i] = through("10ms")
	}
	b.enqueue("parse", payloads...)
	b.start()
	b.waitCount("progress", 2*time.Minute, total/4, "SELECT count(*) FROM pepsi.state WHERE status = 'done'")
	return c, b
}

// checkAfterOutage stops the dispatcher and checks the rows as
// checkInvariants does, and the statistics exactly: done and failed equal
// to the rows (they are counted whoever moved the row), and every pass
// claimed booked once: claimed = done + failed + paused + requeued +
// reset + cancelled. A settle whose commit went through unacknowledged is
// sent again and books what its first sending did (the pass token, and
// the row's ended/ended_as); a claim the crash lost is booked reset.
func (b *bundle) checkAfterOutage() {
	b.t.Helper()
	if b.cancel != nil {
		if err := b.stop(); err != nil {
			b.t.Errorf("dispatcher returned %v", err)
		}
	}
	if !b.site.Check(testkit.Settled, testkit.RowsOnly) {
		b.showLogs()
	}
	_, g, err := b.db.ReadStats(context.Background())
	if err != nil {
		b.t.Fatal(err)
	}
	if done := b.count("done"); g.Done != done {
		b.t.Errorf("dispatch_stats.done = %d, rows done = %d", g.Done, done)
	}
	if failed := b.count("failed"); g.Failed != failed {
		b.t.Errorf("dispatch_stats.failed = %d, rows failed = %d", g.Failed, failed)
	}
	if sum := g.Done + g.Failed + g.Paused + g.Requeued + g.Reset + g.Cancelled; sum != g.Claimed {
		b.t.Errorf("settled %d (done %d + failed %d + paused %d + requeued %d + reset %d + cancelled %d) != claimed %d",
			sum, g.Done, g.Failed, g.Paused, g.Requeued, g.Reset, g.Cancelled, g.Claimed)
	}
}

// TestStopDuringOutage: the dispatcher is told to stop (as by SIGTERM)
// while the server is down, and the server comes back within
// SHUTDOWN_GRACE. The stop waits for the dispatcher's lock to come back,
// settles what its workers answered and writes its statistics: no message
// is left running for the next start to reset, and, once a second
// dispatcher has finished the rest, every pass claimed is booked once.
func TestStopDuringOutage(t *testing.T) {
	const total = 600
	c, b := underWay(t, total, "SHUTDOWN_GRACE = 30")
	c.stopImmediate()
	b.waitLog("listener: reconnect failed", 1, time.Minute)
	b.cancel()
	b.cancel = nil
	c.start()
	select {
	case err := <-b.done:
		if err != nil {
			t.Errorf("dispatcher returned %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("dispatcher did not stop; logs:\n%s", b.logs)
	}
	logs := b.logs.String()
	if strings.Contains(logs, "giving up") || strings.Contains(logs, "statistics of the last passes not written") {
		t.Errorf("the stop gave up on its messages or its statistics; logs:\n%s", logs)
	}
	// The test's own pooled connections died with the server: count once
	// a query goes through again.
	var running int64
	b.waitFor("a query after the restart", time.Minute, func() bool {
		n, err := b.try64("SELECT count(*) FROM pepsi.state WHERE status = 'running'")
		running = n
		return err == nil
	})
	if running != 0 {
		t.Errorf("%d messages left running", running)
	}
	if n := b.count("done"); n == total {
		t.Error("everything finished before the stop: the test proves nothing")
	}
	// The next dispatcher finishes the rest; the statistics of both add up.
	b.start()
	b.waitSettledTolerant(3 * time.Minute)
	b.checkAfterOutage()
}

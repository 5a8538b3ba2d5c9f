package dispatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// stallDispatch is the [pepsi-dispatch] section of the stall tests: the
// statistics flush and the orphan sweep fall due during the stall, as do
// the hung message's MAX_RUNTIME and the workers' answers.
const stallDispatch = `POLL_INTERVAL = 2
STATS_INTERVAL = 1
ORPHAN_SWEEP = 1
MAX_RUNTIME = 6
SHUTDOWN_GRACE = 3
RECONNECT_MIN = 0.1
RECONNECT_MAX = 1
WORKER_IDLE_TIMEOUT = 60`

// stall holds, in a session of its own, the locks an operator's
// maintenance would: the queue and statistics tables, against every
// write (reads go on, so the workers still read their payloads and the
// test its rows). It waits until one of the dispatcher's own sessions is
// blocked behind them, so that the stall is proven to have hit it, and
// returns the release.
func (b *bundle) stall() (release func()) {
	b.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.dsn)
	if err != nil {
		b.t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, "LOCK TABLE pepsi.state, pepsi.stage_stats, pepsi.dispatch_stats IN EXCLUSIVE MODE")
	}
	if err != nil {
		b.t.Fatal(err)
	}
	released := false
	release = func() {
		if !released {
			released = true
			_ = tx.Rollback(ctx)
			_ = conn.Close(ctx)
		}
	}
	b.t.Cleanup(release)
	b.waitFor("a dispatcher statement waiting for the locks", time.Minute, func() bool {
		return b.int64(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE 'pepsi dispatch %'
			AND wait_event_type = 'Lock'`) > 0
	})
	return release
}

// TestStallKeepsTime: while another session holds the queue's locks, the
// loop still kills a hung worker at MAX_RUNTIME, notices a crashed one,
// takes answers and reaps exited workers; the verdicts wait, and are
// settled once the locks are released. Nothing lost, statistics equal to
// the rows.
func TestStallKeepsTime(t *testing.T) {
	b := setup(t, stallDispatch, "work\nPARALLELISM = 4\nQUEUE_LIMIT = 1")
	rec := &recorder{handed: map[string]int{}, passed: map[Result]int{}}
	b.obs = rec
	hung := b.enqueue("work", "work=hang")[0]
	crashed := b.enqueue("work", "@sleep=4s work=crash")[0]
	answered := b.enqueue("work", "@sleep=4s work=tdone", "@sleep=4s work=tdone")
	b.start()
	b.waitFor("every message handed out", time.Minute, func() bool { return b.count("running") == 4 })
	b.waitFor("four workers", time.Minute, func() bool { return len(b.liveWorkers("")) == 4 })

	release := b.stall()
	stalled := time.Now()
	// MAX_RUNTIME is 6 s from the hand-out, which came before the stall;
	// the locks are held for as long as this takes, 20 s at most.
	within := 20 * time.Second
	b.waitLog("message timed out; killing worker", 1, within)
	b.waitLog("worker crashed", 1, within)
	b.waitFor("both answers heard", within, func() bool {
		n := 0
		rec.get(func() { n = rec.passed[ResultOK] })
		return n == 2
	})
	b.waitFor("the workers of the hung and crashed messages reaped", within, func() bool {
		return len(b.liveWorkers("")) == 2
	})
	if took := time.Since(stalled); took >= within {
		t.Fatalf("the loop waited for the database: %s", took)
	}
	// The database has not moved: the verdicts wait in the dispatcher.
	if n := b.count("running"); n != 4 {
		t.Fatalf("%d messages running during the stall, want 4", n)
	}
	release()

	b.waitSettled(time.Minute)
	if st, _, derr := b.row(hung); st != "failed" || !strings.Contains(derr, "timeout") {
		t.Errorf("hung message: %s %q, want failed by timeout", st, derr)
	}
	if st, _, derr := b.row(crashed); st != "failed" || !strings.Contains(derr, "crashed") {
		t.Errorf("crashed message: %s %q, want failed by the crash", st, derr)
	}
	for _, id := range answered {
		if st, _, _ := b.row(id); st != "done" {
			t.Errorf("answered message %d: %s, want done", id, st)
		}
	}
	b.checkInvariants()
}

// TestStallStop: SIGTERM while the database is stalled. The workers are
// stopped within SHUTDOWN_GRACE and the dispatcher returns within
// SHUTDOWN_GRACE and stopSlack, though it could write nothing; its rows
// stay running. The next start's orphan reset puts them back, and they
// finish.
func TestStallStop(t *testing.T) {
	// The answers come after the stop: MAX_RUNTIME must not end them first.
	b := setup(t, strings.Replace(stallDispatch, "MAX_RUNTIME = 6", "MAX_RUNTIME = 30", 1), "work\nPARALLELISM = 3\nQUEUE_LIMIT = 1")
	b.enqueue("work", "work=hangonce", "@sleep=6s work=tdone", "@sleep=6s work=tdone")
	b.start()
	b.waitFor("every message handed out", time.Minute, func() bool { return b.count("running") == 3 })
	// The claims are written to the statistics before the stall, so that
	// what the stalled run books is known: its claims, nothing else.
	b.waitFor("the claims flushed", time.Minute, func() bool {
		return b.int64("SELECT claimed FROM pepsi.dispatch_stats") == 3
	})
	release := b.stall()
	stopped := time.Now()
	b.cancel()
	b.cancel = nil
	limit := b.cfg.Dispatch.ShutdownGrace + stopSlack + 10*time.Second
	select {
	case err := <-b.done:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
	case <-time.After(limit):
		t.Fatalf("the dispatcher did not return within %s of SIGTERM during a stall; logs:\n%s", limit, b.logs)
	}
	took := time.Since(stopped)
	t.Logf("returned %s after SIGTERM", took.Round(time.Millisecond))
	b.waitLog("giving up: the database did not answer in time", 1, time.Second)
	for _, pid := range b.liveWorkers("") {
		t.Errorf("worker %d still runs after the dispatcher returned", pid)
	}
	if n := b.count("running"); n != 3 {
		t.Errorf("%d messages running after the stalled stop, want 3 (left for the next start)", n)
	}
	release()

	b.start()
	b.waitSettled(time.Minute)
	if n := b.count("done"); n != 3 {
		t.Errorf("%d messages done, want 3", n)
	}
	if err := b.stop(); err != nil {
		t.Errorf("second run: %v", err)
	}
	_, g, err := b.db.ReadStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if g.Done != 3 || g.Orphans != 3 || g.Claimed != 6 || g.Reset+g.Requeued+g.Failed+g.Paused != 0 {
		t.Errorf("stats: %+v; want 6 claimed (3 before the stop, 3 after), 3 orphans reset, 3 done", g)
	}
	if n := b.count("running"); n != 0 {
		t.Errorf("%d messages left running", n)
	}
}

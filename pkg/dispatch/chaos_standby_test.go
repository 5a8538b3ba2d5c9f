package dispatch

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// TestChaosLockLost: a standby waits while the active dispatcher works;
// the active one's lock session is terminated, the standby takes the lock
// over, and the active one, when it reconnects and finds the lock gone,
// stops with an error without touching the queue again. The standby resets
// what the other had in flight and finishes everything. Only messages in
// flight at the takeover ran twice, and the statistics count nothing twice.
func TestChaosLockLost(t *testing.T) {
	// The first reconnect comes late: the dispatcher that lost its lock
	// must not go on working meanwhile, side by side with the new one.
	b := setup(t, chaosWith("MAX_RUNTIME = 20", "RECONNECT_MIN = 1", "RECONNECT_MAX = 2"),
		chaosStages(chaosRetries, chaosRetries, chaosRetries)...)
	f := newFaults(b)
	const total = 400
	payloads := make([]string, total)
	for i := range payloads {
		// Slow enough that the takeover comes well before the end.
		payloads[i] = through("20ms")
	}
	b.enqueue("parse", payloads...)
	b.start()
	b.waitLog("dispatcher started", 1, time.Minute)

	logs2 := &testkit.Buffer{}
	standby, err := New(Options{Config: b.cfg, Standby: true,
		Log: slog.New(slog.NewTextHandler(logs2, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan error, 1)
	go func() { done2 <- standby.Run(ctx2) }()
	stopStandby := func() error {
		cancel2()
		select {
		case err := <-done2:
			return err
		case <-time.After(time.Minute):
			t.Fatalf("standby did not stop; its log:\n%s", logs2)
			return nil
		}
	}
	defer func() {
		if ctx2.Err() == nil {
			_ = stopStandby()
		}
		if t.Failed() {
			t.Logf("standby log:\n%s", logs2)
		}
	}()
	b.waitFor("the standby waiting", time.Minute, func() bool {
		return strings.Contains(logs2.String(), "standby: waiting for the dispatcher lock")
	})

	b.waitCount("progress", 2*time.Minute, total/4, "SELECT count(*) FROM pepsi.state WHERE status = 'done'")
	var s sessions
	b.waitFor("the lock holder", time.Minute, func() bool { s = b.sessions(); return s.lock != 0 })
	workers1 := b.liveWorkers("")
	var at time.Time
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&at); err != nil {
		t.Fatal(err)
	}
	f.mark("lock session terminated")
	b.terminate([]int32{s.lock})

	select {
	case err := <-b.done:
		b.cancel = nil
		if err == nil || !strings.Contains(err.Error(), "lost the dispatcher lock") {
			t.Errorf("the dispatcher that lost its lock returned %v, want an error saying so", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the dispatcher that lost its lock did not stop; log:\n%s", b.logs)
	}
	b.waitFor("the standby taking over", time.Minute, func() bool {
		return strings.Contains(logs2.String(), "standby: took over the dispatcher lock")
	})
	if b.count("done") == total {
		t.Fatal("everything finished before the takeover: the test proves nothing")
	}
	b.waitSettled(3 * time.Minute)
	if err := stopStandby(); err != nil {
		t.Errorf("standby returned %v", err)
	}
	f.log()
	b.checkExplained()
	if n := b.count("failed"); n != 0 {
		t.Errorf("%d messages failed, want none: %v", n, b.failures())
	}
	if n := b.count("running"); n != 0 {
		t.Errorf("%d messages running after both stopped", n)
	}
	// Once it has lost its lock the first dispatcher hands out nothing new:
	// at most one claim (up to every stage's capacity) may have been on its
	// way when the session ended. Those messages were in flight at the
	// fault too, only not yet running: they may run twice.
	var inflight []int64
	for id := range f.inflight {
		inflight = append(inflight, id)
	}
	late := b.ids("SELECT DISTINCT id FROM test_passes WHERE pid = ANY ($1) AND at > $2 AND NOT (id = ANY ($3))", workers1, at, inflight)
	t.Logf("the first dispatcher's workers passed %d messages not running at the fault", len(late))
	if capacity := 3 * 2 * 4; len(late) > capacity {
		t.Errorf("after it lost its lock the first dispatcher's workers passed %d messages that were not in flight then, more than one claim's worth (%d)", len(late), capacity)
	}
	for _, id := range late {
		f.inflight[id] = true
	}
	f.checkDuplicates(false)

	// The statistics: what the first dispatcher had in flight may go
	// uncounted (it cannot settle once it has lost the lock), but nothing
	// may be counted twice.
	_, g, err := b.db.ReadStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done, failed := b.count("done"), b.count("failed")
	t.Logf("dispatch_stats: done %d failed %d claimed %d orphans %d; rows: done %d failed %d", g.Done, g.Failed, g.Claimed, g.Orphans, done, failed)
	if g.Done > done || g.Failed > failed {
		t.Errorf("dispatch_stats count done %d, failed %d: more than the rows (%d, %d)", g.Done, g.Failed, done, failed)
	}
	if done-g.Done > int64(len(f.inflight)) {
		t.Errorf("dispatch_stats.done %d: %d short of the rows, more than were in flight (%d)", g.Done, done-g.Done, len(f.inflight))
	}
	// The rows the first dispatcher held are the standby's orphans, unless
	// the first settled them all in the milliseconds its terminated
	// session still held the lock (seen on a loaded machine: 0 reset, and
	// dispatch_stats.done one short, the first's last tally not written).
	// Either way none may be left running, nor counted twice (above).
	t.Logf("the standby reset %d orphans", g.Orphans)
}

package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// slowPoll is a heartbeat far longer than any deadline below: a message
// that only the heartbeat could find fails the test.
const slowPoll = "POLL_INTERVAL = 600\nSTATS_INTERVAL = 60\nWORKER_IDLE_TIMEOUT = 30\nSHUTDOWN_GRACE = 5"

// armed reads the wake flag.
func (b *bundle) armed() bool {
	b.t.Helper()
	var on bool
	if err := b.db.Pool.QueryRow(context.Background(), "SELECT pepsi.armed()").Scan(&on); err != nil {
		b.t.Fatal(err)
	}
	return on
}

// TestWakeNotified: an idle dispatcher arms, and a message enqueued then
// wakes it through the trigger's notification; a stopped dispatcher leaves
// the flag off.
func TestWakeNotified(t *testing.T) {
	b := setup(t, slowPoll, "a\nQUEUE_LIMIT = 4")
	b.start()
	b.waitFor("the dispatcher to arm", time.Minute, b.armed)
	for range 5 {
		id := b.enqueue("a", "a=tdone")[0]
		b.waitFor("the message to be done", 30*time.Second, func() bool {
			st, _, _ := b.row(id)
			return st == "done"
		})
		// Idle again, it arms again.
		b.waitFor("the dispatcher to arm again", time.Minute, b.armed)
	}
	b.checkInvariants()
	if b.armed() {
		t.Error("the wake flag is on after the dispatcher stopped; producers would notify no one")
	}
}

// TestWakeHorizon: a producer whose trigger read the flag as off (so it
// sends no notification) and that commits only after the dispatcher armed
// is still claimed at once: the dispatcher keeps polling until a snapshot
// is past every transaction that may have read the old flag.
func TestWakeHorizon(t *testing.T) {
	b := setup(t, slowPoll, "a\nQUEUE_LIMIT = 4")
	ctx := context.Background()
	if _, err := b.db.Pool.Exec(ctx, "UPDATE pepsi.wake SET armed = false; SELECT setval('pepsi.wake_armed', 0)"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, b.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := tx.QueryRow(ctx, "SELECT pepsi.enqueue('a', 'a=tdone')").Scan(&id); err != nil {
		t.Fatal(err)
	}
	b.start()
	b.waitFor("the dispatcher to arm", time.Minute, b.armed)
	if n := b.int64("SELECT count(*) FROM pepsi.state WHERE id = $1", id); n != 0 {
		t.Fatalf("the uncommitted message is visible (%d rows)", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	b.waitFor("the skipped producer's message to be done", 30*time.Second, func() bool {
		st, _, _ := b.row(id)
		return st == "done"
	})
	b.checkInvariants()
}

// TestWakeHeartbeat: a message whose notification never comes (the flag
// is cleared behind the armed dispatcher's back) waits at most
// POLL_INTERVAL.
func TestWakeHeartbeat(t *testing.T) {
	b := setup(t, "POLL_INTERVAL = 1\nSTATS_INTERVAL = 60\nWORKER_IDLE_TIMEOUT = 30\nSHUTDOWN_GRACE = 5", "a\nQUEUE_LIMIT = 4")
	b.start()
	b.waitFor("the dispatcher to arm", time.Minute, b.armed)
	if _, err := b.db.Pool.Exec(context.Background(), "UPDATE pepsi.wake SET armed = false; SELECT setval('pepsi.wake_armed', 0)"); err != nil {
		t.Fatal(err)
	}
	id := b.enqueue("a", "a=tdone")[0]
	b.waitFor("the message to be done", 30*time.Second, func() bool {
		st, _, _ := b.row(id)
		return st == "done"
	})
	b.checkInvariants()
}

// TestWaker walks the wake modes without a database.
func TestWaker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	var w waker
	w.start(t0)
	var tr queue.Turn
	w.turn(&tr)
	if tr.Arm != queue.ArmOff || tr.Snapshot {
		t.Fatalf("first turn: arm %v snapshot %v, want the flag written off", tr.Arm, tr.Snapshot)
	}
	// Busy turns keep it hot, polling.
	w.done(&tr, &queue.TurnResult{}, true, false, at(time.Millisecond))
	if w.mode != wakeHot || !w.pollAt.Equal(at(time.Millisecond+pollGap)) {
		t.Fatalf("after a busy turn: mode %d poll at %v", w.mode, w.pollAt)
	}
	// A quiet turn before armAfter: poll again.
	w.turn(&tr)
	w.done(&tr, &queue.TurnResult{}, false, false, at(2*time.Millisecond))
	if w.mode != wakeHot {
		t.Fatalf("quiet for 1 ms: mode %d, want hot", w.mode)
	}
	// Quiet for armAfterMin: arm.
	w.turn(&tr)
	w.done(&tr, &queue.TurnResult{}, false, false, at(time.Millisecond+armAfterMin))
	if w.mode != wakeArming || w.write != queue.ArmOn || !w.pollDue(at(time.Millisecond+armAfterMin)) {
		t.Fatalf("quiet for armAfter: mode %d write %v", w.mode, w.write)
	}
	now := at(10 * time.Millisecond)
	// The turn that writes the arm: its snapshot predates the arm's commit.
	w.turn(&tr)
	if tr.Arm != queue.ArmOn || !tr.Snapshot {
		t.Fatalf("arming turn: arm %v snapshot %v", tr.Arm, tr.Snapshot)
	}
	w.done(&tr, &queue.TurnResult{Xmin: 90, Xmax: 100}, false, false, now)
	if w.horizon != 0 {
		t.Fatalf("horizon %d from the arming turn's own snapshot", w.horizon)
	}
	// The next gives the horizon.
	w.turn(&tr)
	w.done(&tr, &queue.TurnResult{Xmin: 95, Xmax: 120}, false, false, now)
	if w.horizon != 120 || w.mode != wakeArming {
		t.Fatalf("horizon %d mode %d, want 120 arming", w.horizon, w.mode)
	}
	// An old transaction stays open: the polls back off, up to armGapMax.
	last := time.Duration(0)
	for range 20 {
		w.turn(&tr)
		w.done(&tr, &queue.TurnResult{Xmin: 110, Xmax: 130}, false, false, now)
		gap := w.pollAt.Sub(now)
		if w.mode != wakeArming || gap < last || gap > armGapMax {
			t.Fatalf("xmin below the horizon: mode %d gap %v (last %v)", w.mode, gap, last)
		}
		last = gap
	}
	if last != armGapMax {
		t.Fatalf("polls backed off to %v, want %v", last, armGapMax)
	}
	// It ended: armed, no more polls.
	w.turn(&tr)
	w.done(&tr, &queue.TurnResult{Xmin: 120, Xmax: 130}, false, false, now)
	if w.mode != wakeArmed || !w.pollAt.IsZero() {
		t.Fatalf("xmin at the horizon: mode %d poll at %v, want armed and waiting", w.mode, w.pollAt)
	}
	if w.needsTurn(now.Add(time.Hour)) {
		t.Fatal("armed and waiting, yet it wants a turn")
	}
	// A notification: hot, the flag written off.
	w.woken(now)
	if w.mode != wakeHot || w.write != queue.ArmOff || !w.pollDue(now) {
		t.Fatalf("woken: mode %d write %v", w.mode, w.write)
	}
	// A failed turn writes the flag again.
	w.turn(&tr)
	w.failed(&tr)
	if w.write != queue.ArmOff {
		t.Fatalf("after a failed turn: write %v, want ArmOff again", w.write)
	}
}

// TestWakerAdapts: the first claim after an arm ended judges it. Finding
// armCrowd rows or more (busy producers notified meanwhile), or none (the
// wake brought nothing to take), doubles the quiet before the next arm,
// up to armAfterMax; finding a few (a trickle) halves it, down to
// armAfterMin. While hot and quiet the polls back off to quietGap, and
// a full stage with more work waiting keeps the dispatcher from arming.
func TestWakerAdapts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var w waker
	w.start(t0)
	now := t0
	var tr queue.Turn
	claimed := func(n int) *queue.TurnResult { return &queue.TurnResult{Claimed: make([]queue.Claimed, n)} }
	// quietFor runs quiet turns at every poll until the dispatcher arms
	// or until d has passed, and returns how long it took (-1: never).
	quietFor := func(d time.Duration) time.Duration {
		t.Helper()
		from := now
		w.turn(&tr)
		w.done(&tr, claimed(1), true, false, now) // work: quiet from now
		for now.Sub(from) < d {
			if w.mode != wakeHot {
				return now.Sub(from)
			}
			gap := w.pollAt.Sub(now)
			if gap < pollGap || gap > max(busyGapMax, w.quietGap()) {
				t.Fatalf("quiet for %v: next poll in %v, want within [%v, %v]", now.Sub(from), gap, pollGap, max(busyGapMax, w.quietGap()))
			}
			now = w.pollAt
			w.turn(&tr)
			w.done(&tr, &queue.TurnResult{}, false, false, now)
		}
		if w.mode != wakeHot {
			return now.Sub(from)
		}
		return -1
	}
	// wake ends the arm with a notification; the next claim finds n rows.
	wake := func(n int) {
		now = now.Add(10 * time.Millisecond)
		w.woken(now)
		w.turn(&tr)
		w.done(&tr, claimed(n), n > 0, false, now)
	}
	if got := quietFor(time.Second); got != armAfterMin {
		t.Fatalf("armed after %v of quiet, want armAfterMin %v", got, armAfterMin)
	}
	// A trickle (one row a wake) keeps it at armAfterMin.
	for range 5 {
		wake(1)
		if got := quietFor(time.Second); got != armAfterMin {
			t.Fatalf("a trickle: armed after %v of quiet, want %v", got, armAfterMin)
		}
	}
	// Busy producers (a crowd of rows at each wake): the quiet doubles.
	want := armAfterMin
	for range 10 {
		wake(armCrowd)
		want = min(2*want, armAfterMax)
		if got := quietFor(2 * armAfterMax); got < want || got > want+max(busyGapMax, w.quietGap()) {
			t.Fatalf("after a crowded wake: armed after %v of quiet, want %v", got, want)
		}
	}
	if w.armAfter != armAfterMax {
		t.Fatalf("armAfter %v after ten crowded wakes, want armAfterMax %v", w.armAfter, armAfterMax)
	}
	// A trickle again: it halves back.
	for range 10 {
		wake(1)
		if got := quietFor(time.Second); got < 0 {
			t.Fatal("never armed")
		}
	}
	if w.armAfter != armAfterMin {
		t.Fatalf("armAfter %v after ten trickling wakes, want armAfterMin %v", w.armAfter, armAfterMin)
	}
	// Wakes that bring nothing to take double it too.
	wake(0)
	if w.armAfter != 2*armAfterMin {
		t.Fatalf("armAfter %v after a wake that found nothing, want %v", w.armAfter, 2*armAfterMin)
	}
	// A claim that started before the wake says nothing of it: the next
	// one judges.
	if got := quietFor(time.Second); got < 0 {
		t.Fatal("never armed")
	}
	now = now.Add(10 * time.Millisecond)
	w.woken(now)
	w.turn(&tr)
	w.done(&tr, &queue.TurnResult{}, false, true, now)
	if w.armAfter != 2*armAfterMin || !w.judging {
		t.Fatalf("a stale claim judged the arm: armAfter %v, judging %v", w.armAfter, w.judging)
	}
	w.done(&tr, claimed(1), true, false, now)
	if w.armAfter != armAfterMin {
		t.Fatalf("armAfter %v after the wake's own claim found one, want %v", w.armAfter, armAfterMin)
	}
	quietFor(time.Second)
	// A backlog: no arm however long the quiet; once it is gone, it arms.
	wake(1)
	w.backlog = true
	if got := quietFor(time.Second); got >= 0 {
		t.Fatalf("armed after %v with a backlog", got)
	}
	w.backlog = false
	w.turn(&tr)
	w.done(&tr, &queue.TurnResult{}, false, false, now)
	if w.mode != wakeArming {
		t.Fatalf("backlog gone after a long quiet: mode %d, want arming", w.mode)
	}
}

// TestWakerBatches: polls that find only a few rows space out to
// busyGapMax, so that a slow feed comes in batches; one that finds a
// batch worth a round trip brings the gap back to pollGap, and so does a
// notification after an arm.
func TestWakerBatches(t *testing.T) {
	now := time.Unix(1000, 0)
	var w waker
	w.start(now)
	var tr queue.Turn
	few := &queue.TurnResult{Claimed: make([]queue.Claimed, 2)}
	many := &queue.TurnResult{Claimed: make([]queue.Claimed, batchWorth)}
	poll := func(res *queue.TurnResult) time.Duration {
		w.turn(&tr)
		w.done(&tr, res, true, false, now)
		gap := w.pollAt.Sub(now)
		now = w.pollAt
		return gap
	}
	want := []time.Duration{pollGap, 2 * pollGap, 4 * pollGap, busyGapMax, busyGapMax}
	for i, g := range want {
		if got := poll(few); got != min(g, busyGapMax) {
			t.Fatalf("poll %d finding a few: next in %v, want %v", i, got, min(g, busyGapMax))
		}
	}
	poll(many)
	if got := poll(few); got != pollGap {
		t.Fatalf("after a poll that found a batch: next in %v, want %v", got, pollGap)
	}
	for range 5 {
		poll(few)
	}
	// Quiet until it arms, then a notification: the next gap is pollGap.
	for w.mode == wakeHot {
		w.turn(&tr)
		w.done(&tr, &queue.TurnResult{}, false, false, now)
		now = now.Add(time.Millisecond)
	}
	w.woken(now)
	if got := poll(few); got != pollGap {
		t.Fatalf("the first poll after a notification: next in %v, want %v", got, pollGap)
	}
}

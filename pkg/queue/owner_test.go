package queue_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/internal/testkit"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestTakeStages: sets are taken whole or not at all; a refusal names the
// stage and its holder; a dispatcher without a set excludes every set and
// is excluded by any. (Who owns what, as the operator reads it, is
// pkg/admin's TestOwners.)
func TestTakeStages(t *testing.T) {
	_, dsn, ctx := newDB(t)
	a := dial(t, dsn, "c")
	if err := a.TakeStages(ctx, []string{"parse", "enrich"}, false, queue.NewToken()); err != nil {
		t.Fatalf("first set: %v", err)
	}
	b := dial(t, dsn, "c")
	err := b.TakeStages(ctx, []string{"deliver", "enrich"}, false, queue.NewToken())
	var oe *queue.OwnedError
	if !errors.As(err, &oe) || !errors.Is(err, queue.ErrLocked) || oe.Stage != "enrich" || oe.Holder == nil || oe.Holder.PID != int32(a.PID()) {
		t.Fatalf("overlapping set: %v (%+v), want enrich owned by server pid %d", err, oe, a.PID())
	}
	if !strings.HasPrefix(err.Error(), "stage enrich is owned by pepsi dispatch pid ") {
		t.Errorf("refusal %q", err)
	}
	// Not at all: deliver, tried first, was given back.
	c := dial(t, dsn, "c")
	if err := c.TakeStages(ctx, []string{"deliver"}, false, queue.NewToken()); err != nil {
		t.Fatalf("deliver after the refused set: %v", err)
	}
	// A dispatcher of every stage is refused by a running set, even one
	// of stages it does not have.
	d := dial(t, dsn, "c")
	err = d.TakeStages(ctx, []string{"other"}, true, queue.NewToken())
	if !errors.As(err, &oe) || oe.Stage != "" || !oe.Shared {
		t.Fatalf("every stage while sets run: %v, want the database-wide lock refused", err)
	}
}

// TestFence: once the lock session that holds the token is gone, every
// fenced write fails and changes nothing.
func TestFence(t *testing.T) {
	db, dsn, ctx := newDB(t)
	ids := seed(t, db, "a", queue.Running, 2)
	l := dial(t, dsn, "c")
	token := queue.NewToken()
	if err := l.TakeStages(ctx, []string{"a"}, false, token); err != nil {
		t.Fatal(err)
	}
	db.SetFence(token, []string{"a"})
	if err := db.SetArmed(ctx, "a", false); err != nil {
		t.Fatalf("fenced write while the lock session lives: %v", err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := db.ResetRunning(ctx, "a")
	if !queue.IsFenced(err) || n != 0 {
		t.Fatalf("ResetRunning after the lock session closed = %d, %v; want the fence's error", n, err)
	}
	// A turn's later statements are not run, nor their results read.
	seed(t, db, "a", queue.Pending, 1)
	res := queue.TurnResult{Claimed: []queue.Claimed{{ID: -1}}}
	err = db.RunTurn(ctx, queue.Turn{Resume: true, Stages: []string{"a"}, Snapshot: true, Admit: true,
		Settles: []queue.Settle{{ID: ids[0], Stage: "a", Verdict: queue.Finish}},
		Caps:    []queue.StageCap{{Stage: "a", Cap: 10}}}, &res)
	if !queue.IsFenced(err) || len(res.Settled) != 0 || len(res.Claimed) != 0 || res.Xmax != 0 {
		t.Fatalf("RunTurn after the lock session closed = %+v, %v; want nothing done and the fence's error", res, err)
	}
	if got := count(t, db, "SELECT count(*) FROM pepsi.state WHERE status = 'running' AND id = ANY($1)", ids); got != 2 {
		t.Errorf("%d rows still running, want 2", got)
	}
	if got := count(t, db, "SELECT count(*) FROM pepsi.state WHERE status = 'pending'"); got != 1 {
		t.Errorf("%d rows pending, want the 1 not claimed", got)
	}
}

// TestFenceIdle: a fenced transaction left idle (its dispatcher frozen or
// cut off halfway through it) is ended by the server, which gives up its
// fence locks for a standby to take over; the timeout is the
// transaction's own, not the session's.
func TestFenceIdle(t *testing.T) {
	db, dsn, ctx := newDB(t)
	l := dial(t, dsn, "c")
	token := queue.NewToken()
	if err := l.TakeStages(ctx, []string{"a"}, false, token); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	fenced := func() pgx.Tx {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, queue.FenceSQL, token, []string{"a"}); err != nil {
			t.Fatalf("fence: %v", err)
		}
		return tx
	}
	if err := fenced().Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var after string
	if err := conn.QueryRow(ctx, "SHOW idle_in_transaction_session_timeout").Scan(&after); err != nil || after != "0" {
		t.Fatalf("idle_in_transaction_session_timeout after a fenced transaction = %q, %v; want the session's 0", after, err)
	}
	pid := conn.PgConn().PID()
	tx := fenced()
	fenceLocks := "SELECT count(*) FROM pg_locks l WHERE l.pid = $1 AND " + testkit.FenceLock
	if n := count(t, db, fenceLocks, pid); n != 1 {
		t.Fatalf("%d fence locks held in the open transaction, want 1", n)
	}
	testkit.Wait(t, "the server to end the idle fenced transaction", time.Minute, func() bool {
		return count(t, db, fenceLocks, pid) == 0
	})
	if count(t, db, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid) != 0 {
		t.Error("the idle fenced transaction's session lives on")
	}
	if err := tx.Commit(ctx); err == nil {
		t.Error("the ended transaction committed")
	}
}

// TestHandedOwnsRunning: a running row belongs to the owner of the stage
// it was handed out at, even once its stage program moved it into another
// set's stage by hand (pepsi.advance requeues it): that stage's resets
// leave it alone (so does the
// retry guard: pkg/admin's TestRedriveHandedRunning); its own stage's
// reset takes it back.
func TestHandedOwnsRunning(t *testing.T) {
	db, dsn, ctx := newDB(t)
	id := seed1(t, db, "a", queue.Pending)
	claimed, err := queue.Claim(ctx, db.Pool, []queue.StageCap{{Stage: "a", Cap: 1}}, nil)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("Claim = %v, %v", claimed, err)
	}
	exec(t, db, "UPDATE pepsi.state SET stage = 'b' WHERE id = $1", id) // running at b now, handed out at a
	if n, err := db.ResetRunning(ctx, "b"); err != nil || n != 0 {
		t.Errorf("ResetRunning(b) = %d, %v; want the row handed out at a left alone", n, err)
	}
	if n, err := db.ResetOrphans(ctx, nil, 0, "b"); err != nil || n != 0 {
		t.Errorf("ResetOrphans(b) = %d, %v; want the row handed out at a left alone", n, err)
	}
	l := dial(t, dsn, "c")
	if err := l.TakeStages(ctx, []string{"a"}, false, queue.NewToken()); err != nil {
		t.Fatal(err)
	}
	if n, err := db.ResetRunning(ctx, "a"); err != nil || n != 1 {
		t.Errorf("ResetRunning(a) = %d, %v; want the row back", n, err)
	}
	if st := getState(t, db, id); st.Status != queue.Pending || st.Stage != "b" {
		t.Errorf("after the reset: %+v, want pending at b", st)
	}
}

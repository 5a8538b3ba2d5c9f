package admin_test

import (
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// settleAs claims message id at its stage by hand (as the claim does) and
// settles v as the dispatcher does.
func settleAs(t *testing.T, db *testDB, v queue.Settle) {
	t.Helper()
	ctx := testCtx(t)
	if _, err := db.Pool.Exec(ctx, `UPDATE pepsi.state SET status = 'running', timeout = NULL, attempts = attempts + 1, handed = stage
		WHERE id = $1`, v.ID); err != nil {
		t.Fatal(err)
	}
	var res queue.TurnResult
	if err := db.Store.RunTurn(ctx, queue.Turn{Settles: []queue.Settle{v}}, &res); err != nil {
		t.Fatal(err)
	}
}

// failBySQL claims message id by hand and has its stage call pepsi.fail
// with reason in its own transaction, as a stage does; the dispatcher's
// settle of the pass (ok) then leaves the row alone.
func failBySQL(t *testing.T, db *testDB, id int64, reason string) {
	t.Helper()
	ctx := testCtx(t)
	if _, err := db.Pool.Exec(ctx, `UPDATE pepsi.state SET status = 'running', timeout = NULL, attempts = attempts + 1, handed = stage
		WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "SELECT pepsi.fail($1, $2)", id, reason); err != nil {
		t.Fatal(err)
	}
	var res queue.TurnResult
	if err := db.Store.RunTurn(ctx, queue.Turn{Settles: []queue.Settle{{ID: id, Stage: "s", Verdict: queue.PassOK}}}, &res); err != nil {
		t.Fatal(err)
	}
}

// TestRedriveKeepsReasons: a retry clears a message's error and
// dispatch_error, and writes to its history first what the history does
// not hold: a stage's pepsi.fail() reason as kind fail, with the attempt
// and when it failed; a dispatch_error no settle recorded (a stage that
// answered 0 without moving its message) as kind answer; a dispatch_error
// the history holds already (a failed pass's) not again. By id and by
// status alike; a second retry adds nothing; the history stays bounded.
func TestRedriveKeepsReasons(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	retry := queue.RetryPolicy{Retries: 1, Delay: time.Millisecond, Max: time.Millisecond}
	ids := seed(t, db, "s", queue.Pending, 4)
	failed, notMoved, full, quiet := ids[0], ids[1], ids[2], ids[3]

	// failed: its first pass answered 3 (recorded, retried), its second
	// called pepsi.fail.
	settleAs(t, db, queue.Settle{ID: failed, Stage: "s", Verdict: queue.PassFailed, Retry: retry, Kind: queue.FailAnswer, PID: 7, Reason: "stage s answered 3: no"})
	if _, err := db.Pool.Exec(ctx, "UPDATE pepsi.state SET status = 'pending', timeout = NULL WHERE id = $1", failed); err != nil {
		t.Fatal(err)
	}
	failBySQL(t, db, failed, "the order is void")
	// notMoved: its stage answered 0 without moving it.
	settleAs(t, db, queue.Settle{ID: notMoved, Stage: "s", Verdict: queue.PassOK})
	// full: 20 failed passes recorded, then pepsi.fail.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO pepsi.history (id, n, at, stage, attempt, kind, reason)
		SELECT $1, n, now(), 's', 1, 'crash', 'crash ' || n FROM generate_series(1, $2) n`, full, queue.HistoryKeep); err != nil {
		t.Fatal(err)
	}
	failBySQL(t, db, full, "gave up")
	// quiet: paused for a retry whose reason the history holds.
	settleAs(t, db, queue.Settle{ID: quiet, Stage: "s", Verdict: queue.PassFailed, Retry: retry, Kind: queue.FailTimeout, Reason: "timeout: no answer"})

	var failedAt time.Time
	if err := db.Pool.QueryRow(ctx, "SELECT updated_at FROM pepsi.state WHERE id = $1", failed).Scan(&failedAt); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Redrive(ctx, admin.RedriveParams{IDs: []int64{failed, quiet}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Redrive(ctx, admin.RedriveParams{Status: queue.Failed}); err != nil {
		t.Fatal(err)
	}
	var left int64
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM pepsi.state WHERE id = ANY($1) AND (status <> 'pending' OR error IS NOT NULL OR dispatch_error IS NOT NULL)", ids).
		Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d messages not retried with a clean slate (%v)", left, err)
	}

	h, err := db.History(ctx, failed)
	if err != nil || len(h) != 2 {
		t.Fatalf("history of the message that called pepsi.fail: %+v, %v", h, err)
	}
	if p := h[1]; p.N != 2 || p.Kind != admin.KindFail || p.Reason != "the order is void" || p.Stage != "s" || p.Attempt != 2 ||
		!p.At.Equal(failedAt) || p.PID != nil || p.Host != nil || h[0].Kind != "answer" {
		t.Errorf("its pepsi.fail reason: %+v (failed at %v)", p, failedAt)
	}
	h, err = db.History(ctx, notMoved)
	if err != nil || len(h) != 1 || h[0].Kind != "answer" || h[0].Reason != "stage reported success but did not move the message" || h[0].Attempt != 1 {
		t.Errorf("history of the message not moved: %+v, %v", h, err)
	}
	h, err = db.History(ctx, full)
	if err != nil || len(h) != queue.HistoryKeep || h[0].N != 2 || h[len(h)-1].N != queue.HistoryKeep+1 ||
		h[len(h)-1].Kind != admin.KindFail || h[len(h)-1].Reason != "gave up" {
		t.Errorf("history of the message with %d passes: %d rows, %+v, %v", queue.HistoryKeep, len(h), h[len(h)-1], err)
	}
	h, err = db.History(ctx, quiet)
	if err != nil || len(h) != 1 || h[0].Kind != "timeout" {
		t.Errorf("history of the paused message: %+v, %v", h, err)
	}

	// A second retry finds nothing to keep.
	if _, err := db.Redrive(ctx, admin.RedriveParams{IDs: ids}); err != nil {
		t.Fatal(err)
	}
	var rows int64
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM pepsi.history WHERE id = ANY($1)", ids).Scan(&rows); err != nil || rows != 2+1+int64(queue.HistoryKeep)+1 {
		t.Errorf("%d history rows after a second retry, want %d (%v)", rows, 2+1+queue.HistoryKeep+1, err)
	}
}

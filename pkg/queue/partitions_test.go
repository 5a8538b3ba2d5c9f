package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// partitionOf returns the partition of pepsi.state that holds id ("" when
// none does).
func partitionOf(t *testing.T, db *pgtest.DB, id int64) string {
	t.Helper()
	var name string
	err := db.Pool.QueryRow(testCtx(t), "SELECT tableoid::regclass::text FROM pepsi.state WHERE id = $1", id).Scan(&name)
	if err == pgx.ErrNoRows {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// expireAll runs retention batches until one says there is no more work,
// and returns the messages they deleted.
func expireAll(t *testing.T, db *pgtest.DB, keep time.Duration) int64 {
	t.Helper()
	var at queue.ExpireAt
	var total int64
	for range 1000 {
		next, n, more, err := db.ExpireDone(testCtx(t), at, keep, 100)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if !more {
			return total
		}
		at = next
	}
	t.Fatal("the retention sweep never ended")
	return 0
}

// TestDonePartitions: a row the settle makes done leaves state_live for a
// range of state_done; failed rows go to state_failed, unfinished ones
// stay; a range is dropped whole, with its messages, once RETENTION has
// passed its end, and the rows of the default partition are deleted each
// by its own age. A row made done before any range covers its time lands
// in the default partition. Deleting a message by hand still takes its
// queue row with it.
func TestDonePartitions(t *testing.T) {
	db, _, ctx := newDB(t)
	early := seed1(t, db, "a", queue.Running)
	if _, err := settle(ctx, db, []queue.Settle{{ID: early, Stage: "a", Verdict: queue.Finish}}); err != nil {
		t.Fatal(err)
	}
	if p := partitionOf(t, db, early); p != "pepsi.state_done_default" {
		t.Fatalf("done before any range: in %s, want the default partition", p)
	}

	n, err := db.DoneAhead(ctx, time.Second, 3)
	if err != nil || n != 3 {
		t.Fatalf("DoneAhead = %d, %v; want 3 ranges", n, err)
	}
	if n, err := db.DoneAhead(ctx, time.Second, 3); err != nil || n > 1 {
		t.Fatalf("DoneAhead again = %d, %v; want at most the one the clock moved on to", n, err)
	}
	// The first range starts after now: wait until the clock is in one.
	ids := seed(t, db, "a", queue.Running, 3)
	first := serverNow(t, db).Add(2 * time.Second)
	for serverNow(t, db).Before(first) {
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := db.DoneAhead(ctx, time.Second, 3); err != nil {
		t.Fatal(err)
	}
	got, err := settle(ctx, db, []queue.Settle{
		{ID: ids[0], Stage: "a", Verdict: queue.Finish},
		{ID: ids[1], Stage: "a", Verdict: queue.PassFailed, Reason: "boom"},
		{ID: ids[2], Stage: "a", Verdict: queue.Advance, Next: "b"},
	})
	if err != nil || len(got) != 3 {
		t.Fatalf("Settle = %+v, %v", got, err)
	}
	done := partitionOf(t, db, ids[0])
	if len(done) < len("pepsi.state_done_1_2") || done == "pepsi.state_done_default" {
		t.Errorf("done: in %s, want a range of state_done", done)
	}
	if p := partitionOf(t, db, ids[1]); p != "pepsi.state_failed" {
		t.Errorf("failed: in %s", p)
	}
	if p := partitionOf(t, db, ids[2]); p != "pepsi.state_live" {
		t.Errorf("advanced: in %s", p)
	}
	// Settling a row its stage finished itself reads it where it went.
	again, err := settle(ctx, db, []queue.Settle{{ID: ids[0], Stage: "a", Verdict: queue.PassOK}})
	if err != nil || len(again) != 1 || again[0].Before != queue.Done || again[0].Changed() {
		t.Fatalf("Settle of a done row = %+v, %v; want it read as done and left alone", again, err)
	}

	// An hour's retention deletes nothing yet.
	if n := expireAll(t, db, time.Hour); n != 0 {
		t.Fatalf("RETENTION 1h deleted %d messages", n)
	}
	// Once the range has ended, RETENTION 0 drops it; the default
	// partition's row goes by its own age.
	end := serverNow(t, db).Add(time.Second)
	for serverNow(t, db).Before(end) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := expireAll(t, db, 0); n != 2 {
		t.Errorf("retention deleted %d messages, want 2 (the range's, the default partition's)", n)
	}
	if n := count(t, db, "SELECT count(*) FROM pg_class WHERE relname = $1", done[len("pepsi."):]); n != 0 {
		t.Errorf("%s not dropped", done)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.message WHERE id = ANY($1)", []int64{early, ids[0]}); n != 0 {
		t.Errorf("%d messages of expired rows left", n)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE id = ANY($1)", []int64{early, ids[0]}); n != 0 {
		t.Errorf("%d expired queue rows left", n)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state") + count(t, db, "SELECT count(*) FROM pepsi.message"); n != 4 {
		t.Errorf("%d rows left, want the failed and the advanced message's 4", n)
	}
	// The cascade skipped during retention is there for anyone else.
	exec(t, db, "DELETE FROM pepsi.message WHERE id = $1", ids[1])
	if p := partitionOf(t, db, ids[1]); p != "" {
		t.Errorf("message deleted by hand: its queue row is still in %s", p)
	}
}

// TestMigrateDonePartitions: 009 on a populated database moves the done
// rows to the default partition of state_done and leaves the pending ones
// in state_live, which the claim reads; the moved rows expire by their own
// age.
func TestMigrateDonePartitions(t *testing.T) {
	ctx, _, conn, known := migratedTo(t, 8)
	rows := migrateRows(t)
	took := migratePopulated(t, ctx, conn, 8, known, rows)
	t.Logf("009 on a database of %d messages: %v", rows, took.Round(time.Millisecond))
	byPart := map[string]int64{}
	r, err := conn.Query(ctx, "SELECT tableoid::regclass::text, count(*) FROM pepsi.state GROUP BY 1")
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var p string
		var n int64
		if err := r.Scan(&p, &n); err != nil {
			t.Fatal(err)
		}
		byPart[p] = n
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	half := int64(rows / 2)
	if len(byPart) != 2 || byPart["pepsi.state_live"] != int64(rows)-half || byPart["pepsi.state_done_default"] != half {
		t.Fatalf("after 009: rows by partition %v; want %d in state_live, %d in state_done_default", byPart, int64(rows)-half, half)
	}
	c, err := queue.Claim(ctx, conn, []queue.StageCap{{Stage: "a", Cap: 2}}, nil)
	if err != nil || len(c) != 2 || c[0].ID+c[1].ID != 1+3 {
		t.Fatalf("claim after 009: %+v, %v; want ids 1 and 3", c, err)
	}
	var last, deleted int64
	var more bool
	var part string
	if err := conn.QueryRow(ctx, "SELECT part, last, deleted, more FROM pepsi.expire_done('0', '', 0, 1000000)").Scan(&part, &last, &deleted, &more); err != nil {
		t.Fatal(err)
	}
	if part != "state_done_default" || deleted != half || !more {
		t.Fatalf("retention after 009: %s, %d deleted, more %v; want %d from the default partition", part, deleted, more, half)
	}
	var left int64
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pepsi.message").Scan(&left); err != nil || left != int64(rows)-half {
		t.Fatalf("%d messages left (%v), want %d", left, err, int64(rows)-half)
	}
}

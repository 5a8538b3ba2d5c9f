package queue_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// historyRow is a row of pepsi.history read directly.
type historyRow struct {
	N       int
	Stage   string
	Attempt int
	Kind    string
	Reason  string
	PID     *int32
	Host    *string
	At      time.Time
}

func history(t testing.TB, db *pgtest.DB, id int64) []historyRow {
	t.Helper()
	rows, err := db.Pool.Query(testCtx(t), `SELECT n, stage, attempt, kind, reason, pid, host, at
		FROM pepsi.history WHERE id = $1 ORDER BY n`, id)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (historyRow, error) {
		var h historyRow
		err := r.Scan(&h.N, &h.Stage, &h.Attempt, &h.Kind, &h.Reason, &h.PID, &h.Host, &h.At)
		return h, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// TestHistory: the settle records a failed pass in pepsi.history when it
// applies the verdict (failed, or paused for a retry) with the row's
// attempts, the kind, the reason and the worker; a failed verdict the
// settle does not apply (the stage moved the row on itself, or it
// advanced) and every other verdict record nothing.
func TestHistory(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	ids := seed(t, db, "s", queue.Running, 9)
	exec(t, db, "UPDATE pepsi.state SET attempts = 3 WHERE id = ANY($1)", ids)
	exec(t, db, "SELECT pepsi.advance($1, 'next')", ids[2])
	exec(t, db, "SELECT pepsi.finish($1)", ids[3])
	exec(t, db, "SELECT pepsi.fail($1, 'stage says no')", ids[4])
	exec(t, db, "SELECT pepsi.finish($1)", ids[8])
	long := strings.Repeat("é", queue.HistoryReasonMax+10)
	retry := queue.RetryPolicy{Retries: 5, Delay: time.Hour, Max: time.Hour}
	vs := []queue.Settle{
		{ID: ids[0], Stage: "s", Verdict: queue.PassFailed, Reason: "stage s answered 3: <b>no</b>", Kind: queue.FailAnswer, PID: 4242},
		{ID: ids[1], Stage: "s", Verdict: queue.PassFailed, Reason: long, Kind: queue.FailCrash, PID: 7, Retry: retry},
		{ID: ids[2], Stage: "s", Verdict: queue.PassFailed, Reason: "advanced", Kind: queue.FailTimeout},
		{ID: ids[3], Stage: "s", Verdict: queue.PassFailed, Reason: "finished", Kind: queue.FailCrash},
		{ID: ids[4], Stage: "s", Verdict: queue.PassFailed, Reason: "failed", Kind: queue.FailProtocol},
		{ID: ids[5], Stage: "s", Verdict: queue.Advance, Next: "t"},
		{ID: ids[6], Stage: "s", Verdict: queue.PassOK},
		{ID: ids[7], Stage: "s", Verdict: queue.NotRun},
		{ID: ids[8], Stage: "s", Verdict: queue.Finish},
	}
	if _, err := settle(ctx, db, vs); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.history"); n != 2 {
		t.Fatalf("%d history rows, want 2 (the two failed passes the settle applied)", n)
	}
	h := history(t, db, ids[0])
	if len(h) != 1 || h[0].N != 1 || h[0].Stage != "s" || h[0].Attempt != 3 || h[0].Kind != "answer" ||
		h[0].Reason != vs[0].Reason || h[0].PID == nil || *h[0].PID != 4242 || h[0].Host == nil || *h[0].Host == "" {
		t.Fatalf("history of the failed message: %+v", h)
	}
	if r := getState(t, db, ids[0]); !h[0].At.Equal(r.UpdatedAt) {
		t.Errorf("history at %v, the row's updated_at %v: want the settle's time", h[0].At, r.UpdatedAt)
	}
	h = history(t, db, ids[1])
	if len(h) != 1 || h[0].Kind != "crash" || h[0].Attempt != 3 || h[0].Reason != long[:len(strings.Repeat("é", queue.HistoryReasonMax))] {
		t.Fatalf("history of the retried message: %d rows, %+v", len(h), h[0].Kind)
	}
	if r := getState(t, db, ids[1]); r.Status != queue.Paused || deref(r.DispatchError) != long {
		t.Errorf("retried message: %s, dispatch_error of %d bytes; want paused with the whole reason", r.Status, len(deref(r.DispatchError)))
	}

	// Settling the same verdicts again (a settle whose answer was lost)
	// records nothing more.
	if _, err := settle(ctx, db, vs); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.history"); n != 2 {
		t.Fatalf("%d history rows after settling again, want 2", n)
	}
}

// TestHistoryBound: a message keeps its last queue.HistoryKeep failed
// passes, numbered on across stages; each records the attempt it was.
func TestHistoryBound(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	id := seed1(t, db, "s", queue.Running)
	other := seed1(t, db, "s", queue.Running)
	retry := queue.RetryPolicy{Retries: 100, Delay: time.Hour, Max: time.Hour}
	const passes = queue.HistoryKeep + 5
	for i := 1; i <= passes; i++ {
		stage := "s"
		if i > passes-3 {
			stage = "t" // a later stage: numbered on, attempts from 1
			if i == passes-2 {
				exec(t, db, "UPDATE pepsi.state SET stage = 't', attempts = 0 WHERE id = $1", id)
			}
		}
		exec(t, db, "UPDATE pepsi.state SET status = 'running', timeout = NULL, attempts = attempts + 1 WHERE id = $1", id)
		vs := []queue.Settle{{ID: id, Stage: stage, Verdict: queue.PassFailed, Reason: fmt.Sprintf("pass %d", i), Kind: queue.FailTimeout, Retry: retry}}
		if i == 1 {
			vs = append(vs, queue.Settle{ID: other, Stage: "s", Verdict: queue.PassFailed, Reason: "other", Kind: queue.FailAnswer})
		}
		if _, err := settle(ctx, db, vs); err != nil {
			t.Fatalf("pass %d: %v", i, err)
		}
	}
	h := history(t, db, id)
	if len(h) != queue.HistoryKeep {
		t.Fatalf("%d history rows after %d failed passes, want %d", len(h), passes, queue.HistoryKeep)
	}
	for j, r := range h {
		i := passes - queue.HistoryKeep + 1 + j
		attempt, stage := i, "s"
		if i > passes-3 {
			attempt, stage = i-(passes-3), "t"
		}
		if r.N != i || r.Reason != fmt.Sprintf("pass %d", i) || r.Attempt != attempt || r.Stage != stage || r.Kind != "timeout" {
			t.Errorf("row %d: %+v, want pass %d, attempt %d at %s", j, r, i, attempt, stage)
		}
	}
	if h := history(t, db, other); len(h) != 1 {
		t.Errorf("another message's history: %d rows, want 1", len(h))
	}
}

// TestHistoryGoes: a message's history goes with it whichever way the
// message is deleted: by hand (pepsi queue purge's statement), by the
// retention sweep from a range of state_done (dropped whole) and from its
// default partition, and by TRUNCATE.
func TestHistoryGoes(t *testing.T) {
	db, _, ctx := newDB(t)
	retry := queue.RetryPolicy{Retries: 5, Delay: time.Millisecond, Max: time.Millisecond}
	failOnce := func(ids []int64, finish bool) {
		t.Helper()
		var vs []queue.Settle
		for _, id := range ids {
			vs = append(vs, queue.Settle{ID: id, Stage: "a", Verdict: queue.PassFailed, Reason: "boom", Kind: queue.FailCrash, Retry: retry})
		}
		if _, err := settle(ctx, db, vs); err != nil {
			t.Fatal(err)
		}
		if !finish {
			return
		}
		exec(t, db, "UPDATE pepsi.state SET status = 'running', timeout = NULL WHERE id = ANY($1)", ids)
		vs = vs[:0]
		for _, id := range ids {
			vs = append(vs, queue.Settle{ID: id, Stage: "a", Verdict: queue.Finish})
		}
		if _, err := settle(ctx, db, vs); err != nil {
			t.Fatal(err)
		}
	}
	// In the default partition of state_done: no range yet.
	early := seed(t, db, "a", queue.Running, 3)
	failOnce(early, true)
	keep := seed(t, db, "a", queue.Running, 2) // failed, not done: kept
	failOnce(keep, false)

	if _, err := db.DoneAhead(ctx, time.Second, 3); err != nil {
		t.Fatal(err)
	}
	waitClock(t, db, 2*time.Second) // the first range starts after now
	if _, err := db.DoneAhead(ctx, time.Second, 3); err != nil {
		t.Fatal(err)
	}
	ranged := seed(t, db, "a", queue.Running, 3)
	failOnce(ranged, true)
	if p := partitionOf(t, db, ranged[0]); p == "pepsi.state_done_default" || !strings.HasPrefix(p, "pepsi.state_done_") {
		t.Fatalf("done in %s, want a range of state_done", p)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.history"); n != 8 {
		t.Fatalf("%d history rows, want 8", n)
	}
	waitClock(t, db, time.Second) // the range has ended
	if n := expireAll(t, db, 0); n != 6 {
		t.Fatalf("retention deleted %d messages, want 6", n)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.history h WHERE NOT EXISTS (SELECT FROM pepsi.message m WHERE m.id = h.id)"); n != 0 {
		t.Fatalf("%d history rows of deleted messages after retention", n)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.history"); n != 2 {
		t.Fatalf("%d history rows after retention, want the 2 of the failed messages", n)
	}

	exec(t, db, "DELETE FROM pepsi.message WHERE id = ANY($1::bigint[])", keep[:1])
	if n := count(t, db, "SELECT count(*) FROM pepsi.history WHERE id = $1", keep[0]); n != 0 {
		t.Fatalf("purged message: %d history rows left", n)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.history WHERE id = $1", keep[1]); n != 1 {
		t.Fatalf("the other message: %d history rows, want 1", n)
	}
	exec(t, db, "TRUNCATE pepsi.message")
	if n := count(t, db, "SELECT count(*) FROM pepsi.history"); n != 0 {
		t.Fatalf("%d history rows after TRUNCATE pepsi.message", n)
	}
}

// waitClock waits until the server's clock has moved on by d.
func waitClock(t *testing.T, db *pgtest.DB, d time.Duration) {
	t.Helper()
	for end := serverNow(t, db).Add(d); serverNow(t, db).Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
}

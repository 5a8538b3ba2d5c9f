package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The operator's controls in SQL (schema 17): scheduled messages, paused
// stages, held and cancelled messages, as the claim, the resume and the
// settle see them.

// ctlState reads a message's status, timeout, flow key and error.
func ctlState(t testing.TB, db *pgtest.DB, id int64) (status string, timeout *time.Time, flowKey, errText *string) {
	t.Helper()
	if err := db.Pool.QueryRow(testCtx(t), "SELECT status, timeout, flow_key, error FROM pepsi.state WHERE id = $1", id).
		Scan(&status, &timeout, &flowKey, &errText); err != nil {
		t.Fatalf("read %d: %v", id, err)
	}
	return
}

func int64SQL(t testing.TB, db *pgtest.DB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.Pool.QueryRow(testCtx(t), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// wantSQLError fails t unless err is a PostgreSQL error with code and
// text in its message.
func wantSQLError(t testing.TB, err error, code, text string) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != code || !strings.Contains(pe.Message, text) {
		t.Errorf("error %v, want SQLSTATE %s with %q", err, code, text)
	}
}

// TestEnqueueScheduledSQL: pepsi.enqueue(p_run_at | p_delay) makes a
// paused message whose timeout is when it runs, without a flow key until
// then, and notifies whether or not a dispatcher is armed; a time not in
// the future runs now; a negative delay, or both, is refused; the old
// calls work as before.
func TestEnqueueScheduledSQL(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	exec(t, db, "INSERT INTO pepsi.flow_keys (stage, header, key_limit) VALUES ('s', 'customer', 1)")
	lis := connect(t, dsn)
	if _, err := lis.Exec(ctx, "LISTEN pepsi_ingress"); err != nil {
		t.Fatal(err)
	}
	exec(t, db, "SELECT pepsi.arm('*', false)") // nobody armed: a plain enqueue does not notify
	if armed := int64SQL(t, db, "SELECT CASE WHEN pepsi.armed() THEN 1 ELSE 0 END"); armed != 0 {
		t.Fatal("armed after pepsi.arm('*', false)")
	}

	at := serverNow(t, db).Add(time.Hour).Truncate(time.Microsecond)
	id := int64SQL(t, db, `SELECT pepsi.enqueue('s', 'x', '{"customer": "c1"}', p_run_at => $1)`, at)
	status, timeout, fk, _ := ctlState(t, db, id)
	if status != "paused" || timeout == nil || !timeout.Equal(at) || fk != nil {
		t.Errorf("scheduled: %s, timeout %v (want %v), flow key %v (want none until due)", status, timeout, at, fk)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if _, err := lis.WaitForNotification(wctx); err != nil {
		t.Errorf("a scheduled enqueue did not notify while no dispatcher is armed: %v", err)
	}
	cancel()

	before := serverNow(t, db)
	id2 := int64SQL(t, db, "SELECT pepsi.enqueue('s', 'y', p_delay => interval '90 seconds')")
	if status, timeout, _, _ := ctlState(t, db, id2); status != "paused" || timeout == nil ||
		timeout.Before(before.Add(89*time.Second)) || timeout.After(serverNow(t, db).Add(91*time.Second)) {
		t.Errorf("p_delay 90 s: %s, timeout %v", status, timeout)
	}
	// With a deduplication key: the scheduled message holds it.
	k1 := int64SQL(t, db, "SELECT pepsi.enqueue('s', 'z', p_key => 'k', p_delay => interval '1 hour')")
	if k2 := int64SQL(t, db, "SELECT pepsi.enqueue('s', 'z', p_key => 'k')"); k2 != k1 {
		t.Errorf("key held by scheduled message %d: a second enqueue made %d", k1, k2)
	}
	if status, _, _, _ := ctlState(t, db, k1); status != "paused" {
		t.Errorf("scheduled with a key: %s", status)
	}

	// Not in the future: now (through pepsi.ingress, as any enqueue).
	for _, args := range []string{"p_run_at => now() - interval '1 minute'", "p_delay => interval '0'"} {
		id := int64SQL(t, db, "SELECT pepsi.enqueue('s', 'now', "+args+")")
		admit(t, db)
		if status, timeout, _, _ := ctlState(t, db, id); status != "pending" || timeout != nil {
			t.Errorf("%s: %s, timeout %v, want pending now", args, status, timeout)
		}
	}
	_, err := db.Pool.Exec(ctx, "SELECT pepsi.enqueue('s', 'x', p_delay => interval '-5 seconds')")
	wantSQLError(t, err, "22023", "the delay must be 0 or more")
	_, err = db.Pool.Exec(ctx, "SELECT pepsi.enqueue('s', 'x', p_run_at => now() + interval '1 hour', p_delay => interval '1 hour')")
	wantSQLError(t, err, "22023", "not both")
	_, err = db.Pool.Exec(ctx, "SELECT pepsi.enqueue('s', 'x', p_run_at => 'infinity')")
	wantSQLError(t, err, "22023", "hold the message instead")

	// The calls of earlier versions.
	for _, sql := range []string{
		"SELECT pepsi.enqueue('s', 'a')",
		"SELECT pepsi.enqueue('s', 'a', '{}')",
		"SELECT pepsi.enqueue('s', 'a', '{}', 0, 'k2')",
		"SELECT id FROM pepsi.enqueue_key('s', 'a', '{}', 0, 'k3')",
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Errorf("%s: %v", sql, err)
		}
	}
}

// TestScheduledKeyPlace: at a stage with KEY (KEY_LIMIT 1), a message
// scheduled for later does not hold back its key's messages of now; when
// it falls due the resume gives it its key, and it waits behind the
// message of its key in flight like any other.
func TestScheduledKeyPlace(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	exec(t, db, "INSERT INTO pepsi.flow_keys (stage, header, key_limit) VALUES ('s', 'customer', 1)")
	sched := int64SQL(t, db, `SELECT pepsi.enqueue('s', 'later', '{"customer": "c1"}', p_delay => interval '1 hour')`)
	now := int64SQL(t, db, `SELECT pepsi.enqueue('s', 'now', '{"customer": "c1"}', p_key => 'n')`)
	caps := []queue.StageCap{{Stage: "s", Cap: 10, KeyLimit: 1}}
	got, err := queue.Claim(ctx, db.Pool, caps, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != now || got[0].Key != "c1" {
		t.Fatalf("claimed %+v, want %d of key c1: a scheduled message held its key's place", got, now)
	}
	// Due now: the resume keys it; the key is in flight (held: c1 × 1).
	exec(t, db, "UPDATE pepsi.state SET timeout = now() - interval '1 second' WHERE id = $1", sched)
	var res queue.TurnResult
	caps[0].Held = []queue.HeldKey{{Key: "c1", N: 1}}
	if err := db.RunTurn(ctx, queue.Turn{Resume: true, Caps: caps}, &res); err != nil {
		t.Fatal(err)
	}
	if status, _, fk, _ := ctlState(t, db, sched); res.Resumed != 1 || status != "pending" || fk == nil || *fk != "c1" || len(res.Claimed) != 0 {
		t.Fatalf("resumed %d, %s with key %v, claimed %+v: want pending with key c1, not claimed while c1 is in flight",
			res.Resumed, status, fk, res.Claimed)
	}
}

// TestClaimSkipsPausedStage: the claim hands a paused stage nothing, the
// keyed claim neither, and takes its messages again once it is resumed;
// other stages are claimed meanwhile.
func TestClaimSkipsPausedStage(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	a := seed(t, db, "a", queue.Pending, 3)
	b := seed(t, db, "b", queue.Pending, 2)
	k := seed(t, db, "k", queue.Pending, 2)
	var made bool
	if err := db.Pool.QueryRow(ctx, "SELECT pepsi.pause_stage('a', 'downstream is down', 'alice')").Scan(&made); err != nil || !made {
		t.Fatalf("pause_stage: %v, %v", made, err)
	}
	if err := db.Pool.QueryRow(ctx, "SELECT pepsi.pause_stage('a', 'again', 'bob')").Scan(&made); err != nil || made {
		t.Fatalf("pause_stage of a paused stage: %v, %v (want false)", made, err)
	}
	exec(t, db, "SELECT pepsi.pause_stage('k')")
	caps := []queue.StageCap{{Stage: "a", Cap: 10}, {Stage: "b", Cap: 10}, {Stage: "k", Cap: 10, KeyLimit: 1}}
	got, err := queue.Claim(ctx, db.Pool, caps, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := allClaimed(got)
	if !slices.Equal(ids, b) {
		t.Fatalf("claimed %v with a and k paused, want b's %v", ids, b)
	}
	var by, reason string
	if err := db.Pool.QueryRow(ctx, "SELECT paused_by, reason FROM pepsi.paused_stages WHERE stage = 'a'").Scan(&by, &reason); err != nil ||
		by != "alice" || reason != "downstream is down" {
		t.Errorf("pause of a: by %q, reason %q, %v", by, reason, err)
	}
	exec(t, db, "SELECT pepsi.resume_stage('a')")
	exec(t, db, "SELECT pepsi.resume_stage('k')")
	if got, err = queue.Claim(ctx, db.Pool, caps, nil); err != nil {
		t.Fatal(err)
	}
	if ids, want := allClaimed(got), slices.Concat(a, k); !slices.Equal(ids, want) {
		t.Fatalf("claimed %v after the resume, want %v", ids, want)
	}
}

// allClaimed is the ids claimed at every stage, in order.
func allClaimed(cs []queue.Claimed) []int64 {
	ids := make([]int64, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	slices.Sort(ids)
	return ids
}

// TestHoldKeepsPlace: a held message is never claimed nor resumed, keeps
// its key's place at a stage with KEY (its key's later messages wait) and
// its deduplication key; released, it goes back where it was: pending, or
// paused until its timeout.
func TestHoldKeepsPlace(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	exec(t, db, "INSERT INTO pepsi.flow_keys (stage, header, key_limit) VALUES ('s', 'customer', 1)")
	var ids []int64
	for _, c := range []string{"c1", "c1", "c2"} {
		ids = append(ids, int64SQL(t, db, `SELECT pepsi.enqueue('s', 'x', jsonb_build_object('customer', $1::text))`, c))
	}
	admit(t, db)
	p := seed1(t, db, "s", queue.Paused)
	exec(t, db, "UPDATE pepsi.state SET timeout = now() - interval '1 second' WHERE id = $1", p)
	dk := int64SQL(t, db, "SELECT pepsi.enqueue('t', 'x', p_key => 'held-key')")

	if n := int64SQL(t, db, "SELECT pepsi.hold($1)", []int64{ids[0], p, dk, 999999}); n != 3 {
		t.Fatalf("held %d, want 3", n)
	}
	if n := int64SQL(t, db, "SELECT pepsi.hold($1)", []int64{ids[0]}); n != 0 {
		t.Errorf("held a held message again: %d", n)
	}
	var res queue.TurnResult
	caps := []queue.StageCap{{Stage: "s", Cap: 10, KeyLimit: 1}, {Stage: "t", Cap: 10}}
	if err := db.RunTurn(ctx, queue.Turn{Resume: true, Caps: caps}, &res); err != nil {
		t.Fatal(err)
	}
	// c1's second message waits behind the held first; c2 passes; the
	// held paused one is not resumed, though due.
	if got := allClaimed(res.Claimed); res.Resumed != 0 || !slices.Equal(got, []int64{ids[2]}) {
		t.Fatalf("resumed %d, claimed %v; want 0 and only c2's %d", res.Resumed, got, ids[2])
	}
	if again := int64SQL(t, db, "SELECT pepsi.enqueue('t', 'x', p_key => 'held-key')"); again != dk {
		t.Errorf("held message %d lost its deduplication key: a new enqueue made %d", dk, again)
	}
	// Released: back to pending, and to paused with its timeout.
	if n := int64SQL(t, db, "SELECT pepsi.release($1)", []int64{ids[0], p, ids[1]}); n != 2 {
		t.Fatalf("released %d, want 2", n)
	}
	if st, _, _, _ := ctlState(t, db, ids[0]); st != "pending" {
		t.Errorf("released pending message: %s", st)
	}
	if st, to, _, _ := ctlState(t, db, p); st != "paused" || to == nil {
		t.Errorf("released paused message: %s, timeout %v", st, to)
	}
	if err := db.RunTurn(ctx, queue.Turn{Resume: true, Caps: caps}, &res); err != nil {
		t.Fatal(err)
	}
	if got := allClaimed(res.Claimed); res.Resumed != 1 || !slices.Contains(got, ids[0]) || slices.Contains(got, ids[1]) {
		t.Fatalf("after the release: resumed %d, claimed %v; want %d (c1's first) and not %d", res.Resumed, got, ids[0], ids[1])
	}
}

// TestCancelSQL: pepsi.cancel ends pending, paused and held messages
// cancelled, "cancelled by USER", and frees their deduplication keys; a
// running message only with p_running, and then the settle of its pass
// leaves it as it is, whatever the verdict.
func TestCancelSQL(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	pend := int64SQL(t, db, "SELECT pepsi.enqueue('s', 'x', p_key => 'k1')")
	paused := int64SQL(t, db, "SELECT pepsi.enqueue('s', 'x', p_key => 'k2', p_delay => interval '1 hour')")
	held := int64SQL(t, db, "SELECT pepsi.enqueue('s', 'x', p_key => 'k3')")
	exec(t, db, "SELECT pepsi.hold($1)", []int64{held})
	run := seed1(t, db, "s", queue.Pending)
	got, err := queue.Claim(ctx, db.Pool, []queue.StageCap{{Stage: "s", Cap: 10}}, nil)
	if err != nil || len(got) != 2 { // pend and run; then pend goes back
		t.Fatalf("claimed %+v, %v", got, err)
	}
	exec(t, db, "UPDATE pepsi.state SET status = 'pending', handed = NULL WHERE id = $1", pend)
	done := seed1(t, db, "s", queue.Done)

	all := []int64{pend, paused, held, run, done}
	if n := int64SQL(t, db, "SELECT pepsi.cancel($1, 'alice')", all); n != 3 {
		t.Fatalf("cancelled %d, want 3 (pending, paused, held)", n)
	}
	for _, id := range []int64{pend, paused, held} {
		if st, to, _, e := ctlState(t, db, id); st != "cancelled" || to != nil || e == nil || *e != "cancelled by alice" {
			t.Errorf("message %d: %s, timeout %v, error %v", id, st, to, e)
		}
	}
	if st, _, _, _ := ctlState(t, db, run); st != "running" {
		t.Errorf("running message cancelled without p_running: %s", st)
	}
	if st, _, _, _ := ctlState(t, db, done); st != "done" {
		t.Errorf("done message: %s", st)
	}
	for _, k := range []string{"k1", "k2", "k3"} {
		var created bool
		if err := db.Pool.QueryRow(ctx, "SELECT created FROM pepsi.enqueue_key('s', 'x', '{}', 0, $1)", k).Scan(&created); err != nil || !created {
			t.Errorf("key %s of a cancelled message is not free: created %v, %v", k, created, err)
		}
	}
	if n := int64SQL(t, db, "SELECT pepsi.cancel($1, 'bob', true)", []int64{run}); n != 1 {
		t.Fatalf("cancelled %d running, want 1", n)
	}
	// The pass ends, its verdict arrives: the row stays as cancel left it.
	for _, v := range []queue.Settle{
		{ID: run, Stage: "s", Verdict: queue.Advance, Next: "t"},
		{ID: run, Stage: "s", Verdict: queue.PassFailed, Reason: "exit 1"},
		{ID: run, Stage: "s", Verdict: queue.NotRun},
	} {
		out, err := settle(ctx, db, []queue.Settle{v})
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != 1 || out[0].Changed() || out[0].Before != queue.Cancelled || out[0].After != queue.Cancelled {
			t.Errorf("settle %s of a cancelled running message: %+v", v.Verdict, out)
		}
	}
	if st, _, _, e := ctlState(t, db, run); st != "cancelled" || e == nil || *e != "cancelled by bob" {
		t.Errorf("cancelled running message after its settle: %s, %v", st, e)
	}
}

// TestPlansMillionScheduled: a million messages scheduled at one stage
// cost the claim and the resume of another stage nothing: the claim walks
// state_pending, the resume reads the due rows (none) and, for a stage
// set, the next due time of each of its stages (state_paused_stage), a
// few index pages whatever the paused rows elsewhere. Checked by the
// buffers each statement reads before and after the million are there,
// not by a clock.
func TestPlansMillionScheduled(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	exec(t, db, "SELECT setval('pepsi.message_id_seq', $1)", n)
	seed(t, db, "now", queue.Pending, 1000)
	exec(t, db, `INSERT INTO pepsi.state_live (id, stage, status, timeout)
		SELECT g, 'later', 'paused', now() + interval '1 day' FROM generate_series(1, 10) g`)
	exec(t, db, "ANALYZE pepsi.state_live")
	conn := connect(t, dsn)

	explain := func(what, sql string, seqOK bool, args ...any) float64 {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // EXPLAIN ANALYZE runs the UPDATE
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(lines) != 1 {
			t.Fatalf("%s: %v", what, err)
		}
		var bufs []struct {
			Plan bufPlan `json:"Plan"`
		}
		var nodes []struct {
			Plan planNode `json:"Plan"`
		}
		if json.Unmarshal([]byte(lines[0]), &bufs) != nil || json.Unmarshal([]byte(lines[0]), &nodes) != nil || len(bufs) != 1 || len(nodes) != 1 {
			t.Fatalf("%s: cannot parse plan %s", what, lines[0])
		}
		walkPlan(nodes[0].Plan, func(p planNode) {
			if !seqOK && p.NodeType == "Seq Scan" && strings.HasPrefix(p.RelationName, "state") {
				t.Errorf("%s: scans %s sequentially:\n%s", what, p.RelationName, lines[0])
			}
		})
		return bufs[0].Plan.Hit + bufs[0].Plan.Read
	}
	stmts := []struct {
		what string
		sql  string
		args []any
	}{
		{"claim", queue.ClaimSQL, []any{[]string{"now"}, []int32{100}, int64(1)}},
		{"resume, stage set", queue.ResumeSQL, []any{[]string{"now"}}},
		{"resume, stage set with the scheduled stage", queue.ResumeSQL, []any{[]string{"now", "later"}}},
		{"resume, every stage", queue.ResumeSQL, []any{[]string(nil)}},
	}
	before := make([]float64, len(stmts))
	for i, s := range stmts {
		before[i] = explain(s.what, s.sql, true, s.args...) // a table of 1 010 rows may be read whole
	}
	exec(t, db, `INSERT INTO pepsi.state_live (id, stage, status, timeout)
		SELECT g, 'later', 'paused', now() + interval '1 day' + g * interval '1 millisecond'
		  FROM generate_series(11, $1) g`, n)
	exec(t, db, "ANALYZE pepsi.state_live")
	for i, s := range stmts {
		after := explain(s.what, s.sql, false, s.args...)
		t.Logf("%s: %v buffers with 10 scheduled messages, %v with %d", s.what, before[i], after, n)
		if after > 1.5*before[i]+20 {
			t.Errorf("%s reads %v buffers with %d scheduled messages at another stage, %v with 10", s.what, after, n, before[i])
		}
	}
}

// bufPlan is a plan node's buffer counts.
type bufPlan struct {
	Hit  float64 `json:"Shared Hit Blocks"`
	Read float64 `json:"Shared Read Blocks"`
}

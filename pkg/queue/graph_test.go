package queue_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// claimOne claims the one pending message at stage.
func claimOne(t *testing.T, ctx context.Context, db *pgtest.DB, stage string) queue.Claimed {
	t.Helper()
	c, err := queue.Claim(ctx, db.Pool, []queue.StageCap{{Stage: stage, Cap: 1}}, nil)
	if err != nil || len(c) != 1 {
		t.Fatalf("claim at %s: %v, %v", stage, c, err)
	}
	return c[0]
}

// statusOf is id's status and stage.
func statusOf(t *testing.T, ctx context.Context, db *pgtest.DB, id int64) string {
	t.Helper()
	var st, stage string
	if err := db.Pool.QueryRow(ctx, "SELECT status, stage FROM pepsi.state WHERE id = $1", id).Scan(&st, &stage); err != nil {
		t.Fatalf("status of %d: %v", id, err)
	}
	return st + "@" + stage
}

// childrenOf lists pepsi.children(parent) as id status, in order.
func childrenOf(t *testing.T, ctx context.Context, db *pgtest.DB, parent int64) []string {
	t.Helper()
	rows, err := db.Pool.Query(ctx, "SELECT status, coalesce(error, ''), coalesce(convert_from(result, 'UTF8'), '') FROM pepsi.children($1)", parent)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var st, e, res string
		err := r.Scan(&st, &e, &res)
		return strings.TrimSpace(st + " " + e + " " + res), err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGraphSQL: children spawned from SQL by a running message, its join,
// the end of each child settled by the dispatcher's turn (the settle, then
// pepsi.joins in its transaction), results, both failure policies, the
// cancel's cascade, the depth bound.
func TestGraphSQL(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	settle := func(vs ...queue.Settle) queue.TurnResult {
		t.Helper()
		var res queue.TurnResult
		if err := db.RunTurn(ctx, queue.Turn{Settles: vs, JoinAll: []string{"sum-all"}}, &res); err != nil {
			t.Fatalf("settle %+v: %v", vs, err)
		}
		return res
	}
	finish := func(c queue.Claimed, result string) {
		t.Helper()
		exec(t, db, "SELECT pepsi.finish($1, $2, $3)", c.ID, c.Pass, []byte(result))
	}

	// Fan-out of 3 at c and 1 at d, the parent waiting at sum.
	parent := seed1(t, db, "split", queue.Pending)
	p := claimOne(t, ctx, db, "split")
	var n, one int64
	if err := db.Pool.QueryRow(ctx, "SELECT pepsi.spawn_many($1, 'c', ARRAY['a', 'b', 'c']::bytea[], p_pass => $2)", parent, p.Pass).Scan(&n); err != nil || n != 3 {
		t.Fatalf("spawn_many: %d, %v", n, err)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT pepsi.spawn($1, 'd', 'x', '{"h": "1"}', 5)`, parent).Scan(&one); err != nil {
		t.Fatal(err)
	}
	exec(t, db, "SELECT pepsi.join($1, 'sum', $2)", parent, p.Pass)
	if got := statusOf(t, ctx, db, parent); got != "waiting@sum" {
		t.Fatalf("parent after its join: %s", got)
	}
	res := settle(queue.Settle{ID: parent, Stage: "split", Pass: p.Pass, Verdict: queue.PassOK})
	if len(res.Settled) != 1 || res.Settled[0].Outcome != queue.OutRequeued || res.Settled[0].After != queue.Waiting || len(res.Joined) != 0 {
		t.Fatalf("the parent's pass settled: %+v, joined %v", res.Settled, res.Joined)
	}
	// The children end one by one; the last one's settle releases the parent.
	for i := 0; i < 4; i++ {
		stage := "c"
		if i == 3 {
			stage = "d"
		}
		c := claimOne(t, ctx, db, stage)
		if c.Parent != parent {
			t.Fatalf("child %d claimed with parent %d, want %d", c.ID, c.Parent, parent)
		}
		finish(c, "r"+stage)
		res := settle(queue.Settle{ID: c.ID, Stage: stage, Pass: c.Pass, Verdict: queue.PassOK, Parent: c.Parent})
		if s := res.Settled[0]; s.Parent != parent || s.Outcome != queue.OutDone {
			t.Errorf("child settled %+v", s)
		}
		want := "waiting@sum"
		if i == 3 {
			want = "pending@sum"
			if !slices.Equal(res.Joined, []queue.Joined{{ID: parent, Stage: "sum"}}) {
				t.Errorf("the last child's settle joined %v", res.Joined)
			}
		} else if len(res.Joined) != 0 {
			t.Errorf("child %d of 4: joined %v", i+1, res.Joined)
		}
		if got := statusOf(t, ctx, db, parent); got != want {
			t.Fatalf("after child %d of 4: parent %s, want %s", i+1, got, want)
		}
	}
	if got := childrenOf(t, ctx, db, parent); !slices.Equal(got, []string{"done  rc", "done  rc", "done  rc", "done  rd"}) {
		t.Errorf("children: %q", got)
	}

	// An empty fan-out, a join on the status line: released by the settle.
	empty := seed1(t, db, "split", queue.Pending)
	e := claimOne(t, ctx, db, "split")
	exec(t, db, "SELECT pepsi.spawn_many($1, 'c', ARRAY[]::bytea[])", empty)
	res = settle(queue.Settle{ID: empty, Stage: "split", Pass: e.Pass, Verdict: queue.Join, Next: "sum"})
	if got := statusOf(t, ctx, db, empty); got != "pending@sum" || res.Settled[0].Outcome != queue.OutRequeued || len(res.Joined) != 1 {
		t.Errorf("empty fan-out: %s, %+v, joined %v", got, res.Settled, res.Joined)
	}

	// JOIN_POLICY fail (the default): a child that fails fails the parent
	// at once, and its open siblings are cancelled.
	fp := seed1(t, db, "split", queue.Pending)
	c := claimOne(t, ctx, db, "split")
	exec(t, db, "SELECT pepsi.spawn_many($1, 'f', ARRAY['1', '2']::bytea[])", fp)
	settle(queue.Settle{ID: fp, Stage: "split", Pass: c.Pass, Verdict: queue.Join, Next: "sum"})
	child := claimOne(t, ctx, db, "f")
	exec(t, db, "SELECT pepsi.fail($1, 'bad input')", child.ID)
	settle(queue.Settle{ID: child.ID, Stage: "f", Pass: child.Pass, Verdict: queue.PassOK, Parent: fp})
	var perr string
	if err := db.Pool.QueryRow(ctx, "SELECT status || ': ' || error FROM pepsi.state WHERE id = $1", fp).Scan(&perr); err != nil ||
		perr != "failed: child "+itoa(child.ID)+" failed: bad input" {
		t.Errorf("fail policy: parent %q, %v", perr, err)
	}
	if got := childrenOf(t, ctx, db, fp); !slices.Equal(got, []string{"failed bad input", "cancelled cancelled: its parent failed"}) {
		t.Errorf("fail policy: children %q", got)
	}

	// JOIN_POLICY all: the join runs when all have ended and sees the failure.
	ap := seed1(t, db, "split", queue.Pending)
	c = claimOne(t, ctx, db, "split")
	exec(t, db, "SELECT pepsi.spawn_many($1, 'g', ARRAY['1', '2']::bytea[])", ap)
	settle(queue.Settle{ID: ap, Stage: "split", Pass: c.Pass, Verdict: queue.Join, Next: "sum-all"})
	child = claimOne(t, ctx, db, "g")
	settle(queue.Settle{ID: child.ID, Stage: "g", Pass: child.Pass, Verdict: queue.PassFailed, Reason: "exit 3", Parent: ap})
	if got := statusOf(t, ctx, db, ap); got != "waiting@sum-all" {
		t.Errorf("all policy after one failed child: %s", got)
	}
	// Cancelling the other child counts as its end.
	other := claimOne(t, ctx, db, "g")
	exec(t, db, "SELECT pepsi.cancel(ARRAY[$1]::bigint[], 'alice', true)", other.ID)
	if got := statusOf(t, ctx, db, ap); got != "pending@sum-all" {
		t.Errorf("all policy after the last child's cancel: %s", got)
	}
	if got := childrenOf(t, ctx, db, ap); !slices.Equal(got, []string{"failed exit 3", "cancelled cancelled by alice"}) {
		t.Errorf("all policy: children %q", got)
	}

	// Cancelling a parent cancels its unfinished tree, running ones too.
	cp := seed1(t, db, "split", queue.Pending)
	c = claimOne(t, ctx, db, "split")
	var kid int64
	if err := db.Pool.QueryRow(ctx, "SELECT pepsi.spawn($1, 'h')", cp).Scan(&kid); err != nil {
		t.Fatal(err)
	}
	exec(t, db, "SELECT pepsi.spawn_many($1, 'h2', ARRAY['1']::bytea[])", cp)
	settle(queue.Settle{ID: cp, Stage: "split", Pass: c.Pass, Verdict: queue.Join, Next: "sum"})
	k := claimOne(t, ctx, db, "h")
	exec(t, db, "SELECT pepsi.spawn_many($1, 'h3', ARRAY['1', '2']::bytea[])", kid)
	settle(queue.Settle{ID: kid, Stage: "h", Pass: k.Pass, Verdict: queue.Join, Next: "h-sum", Parent: cp})
	exec(t, db, "SELECT pepsi.cancel(ARRAY[$1]::bigint[])", cp)
	if n := count(t, db, `WITH RECURSIVE t AS (SELECT id FROM pepsi.state WHERE parent = $1
	                        UNION ALL SELECT s.id FROM t JOIN pepsi.state s ON s.parent = t.id)
	                      SELECT count(*) FROM t JOIN pepsi.state s USING (id) WHERE s.status <> 'cancelled'`, cp); n != 0 {
		t.Errorf("after the parent's cancel, %d of its tree are not cancelled", n)
	}

	// A waiting parent keeps its deduplication key: an enqueue with it
	// finds the parent, and the parent's release is not refused.
	var keyed int64
	if err := db.Pool.QueryRow(ctx, "SELECT pepsi.enqueue('split', '', '{}', 0, 'order-7')").Scan(&keyed); err != nil {
		t.Fatal(err)
	}
	kc := claimOne(t, ctx, db, "split")
	exec(t, db, "SELECT pepsi.spawn_many($1, 'kk', ARRAY['1']::bytea[])", keyed)
	settle(queue.Settle{ID: keyed, Stage: "split", Pass: kc.Pass, Verdict: queue.Join, Next: "sum"})
	var again int64
	if err := db.Pool.QueryRow(ctx, "SELECT pepsi.enqueue('split', '', '{}', 0, 'order-7')").Scan(&again); err != nil || again != keyed {
		t.Errorf("an enqueue with a waiting parent's key: %d, %v; want the parent, %d", again, err, keyed)
	}
	kid2 := claimOne(t, ctx, db, "kk")
	finish(kid2, "x")
	settle(queue.Settle{ID: kid2.ID, Stage: "kk", Pass: kid2.Pass, Verdict: queue.PassOK, Parent: keyed})
	if got := statusOf(t, ctx, db, keyed); got != "pending@sum" {
		t.Errorf("the keyed parent after its child: %s", got)
	}

	// The depth bound: 16 levels below the message enqueued.
	id := seed1(t, db, "deep", queue.Pending)
	for level := 1; level <= 17; level++ {
		c := claimOne(t, ctx, db, "deep")
		var next int64
		err := db.Pool.QueryRow(ctx, "SELECT pepsi.spawn($1, 'deep')", c.ID).Scan(&next)
		if level == 17 {
			if sqlState(err) != "54001" || !strings.Contains(err.Error(), "at most 16 levels") {
				t.Errorf("a child 17 levels deep: %v", err)
			}
			break
		}
		if err != nil {
			t.Fatalf("level %d: %v", level, err)
		}
		exec(t, db, "SELECT pepsi.finish($1)", c.ID)
		id = next
	}
	_ = id

	// A message that is not running has no children.
	done := seed1(t, db, "x", queue.Done)
	if _, err := db.Pool.Exec(ctx, "SELECT pepsi.spawn($1, 'c')", done); sqlState(err) != "55000" {
		t.Errorf("spawn from a done message: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, "SELECT pepsi.finish($1, NULL, $2)", done, make([]byte, 65537)); sqlState(err) != "22023" {
		t.Errorf("a result of 65537 bytes: %v", err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestGraphRetention: a retention run during a long fan-out deletes none of
// the finished children a waiting parent's join will read, in the default
// partition or in a range of state_done that expires whole; once the
// parent is over, they expire like any other.
func TestGraphRetention(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	parent := seed1(t, db, "split", queue.Pending)
	p := claimOne(t, ctx, db, "split")
	exec(t, db, "SELECT pepsi.spawn_many($1, 'item', ARRAY['1', '2', '3', '4']::bytea[])", parent)
	exec(t, db, "SELECT pepsi.join($1, 'sum', $2)", parent, p.Pass)
	lone := seed1(t, db, "x", queue.Pending)
	finishOne := func(stage string) {
		t.Helper()
		c := claimOne(t, ctx, db, stage)
		exec(t, db, "SELECT pepsi.finish($1, $2, 'r')", c.ID, c.Pass)
	}
	finishOne("item") // before any range: the default partition
	finishOne("x")
	if _, err := db.DoneAhead(ctx, time.Second, 3); err != nil {
		t.Fatal(err)
	}
	waitClock(t, db, 2*time.Second)
	if _, err := db.DoneAhead(ctx, time.Second, 3); err != nil {
		t.Fatal(err)
	}
	finishOne("item") // in a range
	finishOne("item")
	waitClock(t, db, 1500*time.Millisecond)
	if n := expireAll(t, db, 0); n != 1 {
		t.Errorf("retention deleted %d messages, want 1 (the one without a parent)", n)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state s JOIN pepsi.message m USING (id) WHERE s.parent = $1 AND s.status = 'done' AND s.result = 'r'", parent); n != 3 {
		t.Errorf("%d finished children kept with their messages and results, want 3", n)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE id = $1", lone); n != 0 {
		t.Errorf("the message without a parent was not expired")
	}
	// The parent over (cancelled, with its last child), its children go.
	exec(t, db, "SELECT pepsi.cancel(ARRAY[$1]::bigint[])", parent)
	waitClock(t, db, 1500*time.Millisecond)
	if n := expireAll(t, db, 0); n != 3 {
		t.Errorf("after the parent's end, retention deleted %d, want its 3 finished children", n)
	}
}

package dispatch

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// graphSize is n, or the number in the environment variable env: the
// fan-out test runs small in make test and at the size by hand
// (PEPSI_GRAPH_PARENTS=1000 PEPSI_GRAPH_CHILDREN=100).
func graphSize(env string, n int) int {
	if v, err := strconv.Atoi(os.Getenv(env)); err == nil && v > 0 {
		return v
	}
	return n
}

// joinRow is what a join stage read of its children (test_joins).
type joinRow struct {
	children, results, failed, cancelled int64
}

// joins reads test_joins: each join's read, and how many times it ran.
func (b *bundle) joins() (map[int64]joinRow, map[int64]int) {
	b.t.Helper()
	rows, err := b.db.Pool.Query(b.t.Context(), "SELECT id, children, results, failed, cancelled FROM test_joins")
	if err != nil {
		b.t.Fatal(err)
	}
	defer rows.Close()
	got, runs := map[int64]joinRow{}, map[int64]int{}
	for rows.Next() {
		var id int64
		var j joinRow
		if err := rows.Scan(&id, &j.children, &j.results, &j.failed, &j.cancelled); err != nil {
			b.t.Fatal(err)
		}
		got[id] = j
		runs[id]++
	}
	return got, runs
}

// checkJoinsAfterChildren: no join read its children before the last of
// them ended.
func (b *bundle) checkJoinsAfterChildren() {
	b.t.Helper()
	if n := b.int64(`SELECT count(*) FROM test_joins j
	                  WHERE j.at < (SELECT max(c.updated_at) FROM pepsi.state c WHERE c.parent = j.id AND c.status <> 'cancelled')`); n != 0 {
		t := b.t
		t.Errorf("%d joins ran before their last child ended", n)
	}
}

// TestGraphFanOutJoin: parents fan out into children across two child
// stages and wait at a join (half by pepsi.join, half by join:STAGE on the
// status line); each join runs exactly once, after its last child, and
// reads every child's result. Empty fan-outs go straight on.
func TestGraphFanOutJoin(t *testing.T) {
	parents, children := graphSize("PEPSI_GRAPH_PARENTS", 60), graphSize("PEPSI_GRAPH_CHILDREN", 40)
	const empty = 5
	b := setup(t, fast,
		"split\nPARALLELISM = 2\nQUEUE_LIMIT = 4",
		"item-a\nPARALLELISM = 2\nQUEUE_LIMIT = 16",
		"item-b\nPARALLELISM = 2\nQUEUE_LIMIT = 16",
		"sum\nPARALLELISM = 2\nQUEUE_LIMIT = 4")
	var payloads []string
	for i := range parents {
		verb := "fanout"
		if i%2 == 1 {
			verb = "tfanout"
		}
		payloads = append(payloads, fmt.Sprintf("split=%s:%d/item-a+item-b/sum item-a=result item-b=result sum=joinread", verb, children))
	}
	for range empty {
		payloads = append(payloads, "split=fanout:0/item-a/sum sum=joinread")
	}
	b.start()
	start := time.Now()
	ids := b.enqueue("split", payloads...)
	total := int64(parents + empty + parents*children)
	b.waitFor("every parent and child done", 5*time.Minute, func() bool { return b.count("done") == total })
	t.Logf("%d parents × %d children (+%d empty fan-outs) in %v", parents, children, empty, time.Since(start).Round(time.Millisecond))
	b.waitSettled(time.Minute)
	got, runs := b.joins()
	for i, id := range ids {
		want := joinRow{children: int64(children), results: int64(children)}
		if i >= parents {
			want = joinRow{}
		}
		if runs[id] != 1 || got[id] != want {
			t.Errorf("parent %d: join ran %d times, read %+v, want once, %+v", id, runs[id], got[id], want)
		}
	}
	if n := b.int64("SELECT count(*) FROM (SELECT id FROM test_passes WHERE stage = 'sum' GROUP BY id HAVING count(*) <> 1) x"); n != 0 {
		t.Errorf("%d parents passed the join stage other than once", n)
	}
	if n := b.int64("SELECT count(*) FROM pepsi.state WHERE parent IS NOT NULL"); n != int64(parents*children) {
		t.Errorf("%d children, want %d", n, parents*children)
	}
	b.checkJoinsAfterChildren()
	b.checkInvariants()
}

// TestGraphPolicies: JOIN_POLICY fail (the default) fails the parent as
// soon as a child has failed after its retries, and cancels its open
// children (one running, one pending); JOIN_POLICY all runs the join once
// every child has ended, and it reads which failed: one that answered 3
// and one that crashed, each after its retry.
func TestGraphPolicies(t *testing.T) {
	b := setup(t, fast+"\nORPHAN_SWEEP = 2",
		"split",
		"ok\nPARALLELISM = 1\nQUEUE_LIMIT = 1",
		"slow\nPARALLELISM = 1\nQUEUE_LIMIT = 1",
		"bad\nRETRIES = 1\nRETRY_DELAY = 0.1",
		"crashes\nRETRIES = 1\nRETRY_DELAY = 0.1",
		"sum",
		"sum-all\nJOIN_POLICY = all")
	b.start()
	failing := b.enqueue("split", "split=fanout:4/ok+bad+slow+slow/sum bad=exit:3 slow=slow:10s sum=joinread")[0]
	all := b.enqueue("split", "split=fanout:3/ok+bad+crashes/sum-all ok=result bad=exit:3 crashes=crash sum-all=joinread")[0]
	b.waitFor("the failing parent failed", 2*time.Minute, func() bool { st, _, _ := b.row(failing); return st == "failed" })
	b.waitFor("the other parent done", 2*time.Minute, func() bool { st, _, _ := b.row(all); return st == "done" })
	b.waitSettled(time.Minute)

	var perr string
	if err := b.db.Pool.QueryRow(t.Context(), "SELECT error FROM pepsi.state WHERE id = $1", failing).Scan(&perr); err != nil || !strings.Contains(perr, "failed") {
		t.Errorf("failed parent's error %q, %v", perr, err)
	}
	if n := b.int64("SELECT count(*) FROM pepsi.state WHERE parent = $1 AND stage = 'bad' AND status = 'failed' AND attempts = 2", failing); n != 1 {
		t.Errorf("the bad child failed after its retry: %d", n)
	}
	if n := b.int64("SELECT count(*) FROM pepsi.state WHERE parent = $1 AND stage = 'slow' AND status = 'cancelled'", failing); n != 2 {
		t.Errorf("the slow children cancelled: %d, want 2", n)
	}
	got, runs := b.joins()
	if runs[failing] != 0 {
		t.Errorf("the failed parent's join ran %d times", runs[failing])
	}
	if want := (joinRow{children: 3, results: 1, failed: 2}); runs[all] != 1 || got[all] != want {
		t.Errorf("JOIN_POLICY all: join ran %d times, read %+v, want once, %+v", runs[all], got[all], want)
	}
	b.checkInvariants()
}

// TestGraphCancel: cancelling a parent mid-fan-out cancels its children,
// running ones included; cancelling one child counts as its end.
func TestGraphCancel(t *testing.T) {
	b := setup(t, fast,
		"split",
		"kid\nPARALLELISM = 1\nQUEUE_LIMIT = 1",
		"sum")
	b.start()
	parent := b.enqueue("split", "split=fanout:5/kid/sum kid=slow:3s sum=joinread")[0]
	b.waitFor("a child running", time.Minute, func() bool {
		return b.int64("SELECT count(*) FROM pepsi.state WHERE parent = $1 AND status = 'running'", parent) == 1
	})
	if n := b.int64("SELECT pepsi.cancel(ARRAY[$1]::bigint[])", parent); n != 1 {
		t.Fatalf("cancel of the waiting parent: %d", n)
	}
	if n := b.int64("SELECT count(*) FROM pepsi.state WHERE parent = $1 AND status <> 'cancelled'", parent); n != 0 {
		t.Errorf("%d children of the cancelled parent are not cancelled", n)
	}

	// One child cancelled, the other done: the join runs and reads both.
	other := b.enqueue("split", "split=fanout:2/kid/sum kid=slow:2s sum=joinread")[0]
	b.waitFor("its first child running", time.Minute, func() bool {
		return b.int64("SELECT count(*) FROM pepsi.state WHERE parent = $1 AND status = 'running'", other) == 1
	})
	if n := b.int64("SELECT pepsi.cancel(ARRAY(SELECT id FROM pepsi.state WHERE parent = $1 AND status = 'pending'))", other); n != 1 {
		t.Fatalf("cancel of the pending child: %d", n)
	}
	b.waitFor("the parent done", time.Minute, func() bool { st, _, _ := b.row(other); return st == "done" })
	b.waitSettled(time.Minute)
	got, runs := b.joins()
	if want := (joinRow{children: 2, cancelled: 1}); runs[other] != 1 || got[other] != want {
		t.Errorf("join ran %d times, read %+v, want once, %+v", runs[other], got[other], want)
	}
	if runs[parent] != 0 {
		t.Errorf("the cancelled parent's join ran")
	}
	b.checkInvariants()
}

// TestGraphNesting: three levels; each middle message is a child of the
// top one and the parent of its own leaves, and each join reads its own.
func TestGraphNesting(t *testing.T) {
	b := setup(t, fast, "top", "mid", "leaf\nPARALLELISM = 2\nQUEUE_LIMIT = 8", "midsum", "topsum")
	b.start()
	top := b.enqueue("top", "top=fanout:3/mid/topsum mid=fanout:4/leaf/midsum leaf=result midsum=joinread topsum=joinread")[0]
	b.waitFor("the top message done", 2*time.Minute, func() bool { st, _, _ := b.row(top); return st == "done" })
	b.waitSettled(time.Minute)
	got, runs := b.joins()
	if want := (joinRow{children: 3}); runs[top] != 1 || got[top] != want {
		t.Errorf("top join ran %d times, read %+v, want once, %+v", runs[top], got[top], want)
	}
	mids := b.ids("SELECT id FROM pepsi.state WHERE parent = $1", top)
	if len(mids) != 3 {
		t.Fatalf("middle messages: %v", mids)
	}
	for _, m := range mids {
		if want := (joinRow{children: 4, results: 4}); runs[m] != 1 || got[m] != want {
			t.Errorf("middle %d: join ran %d times, read %+v, want once, %+v", m, runs[m], got[m], want)
		}
	}
	if n := b.count("done"); n != 1+3+12 {
		t.Errorf("%d done, want 16", n)
	}
	b.checkJoinsAfterChildren()
	b.checkInvariants()
}

// TestGraphServerRestart: the server crashes (an immediate stop) in the
// middle of a fan-out and comes back. No join runs twice, none is lost, no
// parent waits for ever, and the statistics hold what an outage leaves
// exact.
func TestGraphServerRestart(t *testing.T) {
	c := newCluster(t)
	c.durable()
	t.Setenv("PEPSI_TEST_DSN", c.dsn)
	b := setup(t, chaosWith("MAX_RUNTIME = 20"),
		"split\nPARALLELISM = 2\nQUEUE_LIMIT = 4",
		"item\nPARALLELISM = 2\nQUEUE_LIMIT = 8",
		"sum\nPARALLELISM = 2\nQUEUE_LIMIT = 4")
	const parents, children = 30, 40
	payloads := make([]string, parents)
	for i := range payloads {
		payloads[i] = fmt.Sprintf("@sleep=3ms split=fanout:%d/item/sum item=result sum=joinread", children)
	}
	ids := b.enqueue("split", payloads...)
	b.start()
	b.waitCount("a few joins", 2*time.Minute, 3, "SELECT count(*) FROM test_joins")
	if n := b.int64("SELECT count(*) FROM test_joins"); n == parents {
		t.Fatal("every join ran before the outage: the test proves nothing")
	}
	b.crashServer(c)
	b.waitSettledTolerant(3 * time.Minute)
	if n := b.count("done"); n != parents*(children+1) {
		t.Errorf("%d done, want %d: failures %v", n, parents*(children+1), b.failures())
	}
	got, runs := b.joins()
	for _, id := range ids {
		if want := (joinRow{children: children, results: children}); runs[id] != 1 || got[id] != want {
			t.Errorf("parent %d: join ran %d times, read %+v, want once, %+v", id, runs[id], got[id], want)
		}
	}
	b.checkJoinsAfterChildren()
	b.checkAfterOutage()
}

// TestGraphSweep: a join no settle saw (here a parent made waiting in SQL
// with no child open, and one whose child failed, as a dispatcher killed
// between two settles leaves them) is settled by the janitor's sweep: the
// first released to its join stage, the second failed there.
func TestGraphSweep(t *testing.T) {
	b := setup(t, fast, "split", "kid", "sum")
	parents := b.ids(`WITH m AS (INSERT INTO pepsi.message (payload) VALUES ('sum=joinread'), ('sum=joinread') RETURNING id)
	                  INSERT INTO pepsi.state (id, stage, status) SELECT id, 'split', 'running' FROM m RETURNING id`)
	released, failed := parents[0], parents[1]
	b.int64("SELECT pepsi.spawn_many($1, 'kid', ARRAY['x']::bytea[])", failed)
	b.int64("SELECT count(*) FROM (SELECT pepsi.join(p, 'sum') FROM unnest($1::bigint[]) p) x", parents)
	b.int64("UPDATE pepsi.state SET status = 'failed', error = 'boom' WHERE parent = $1 RETURNING 1", failed)
	b.start()
	b.waitFor("the sweep's joins", time.Minute, func() bool {
		s1, _, _ := b.row(released)
		s2, _, _ := b.row(failed)
		return s1 == "done" && s2 == "failed"
	})
	if got, runs := b.joins(); runs[released] != 1 || got[released] != (joinRow{}) || runs[failed] != 0 {
		t.Errorf("joins ran %v, read %v", runs, got)
	}
	if n := b.int64("SELECT count(*) FROM pepsi.state WHERE id = $1 AND error LIKE 'child % failed: boom'", failed); n != 1 {
		t.Errorf("the failed parent's error does not name its child")
	}
}

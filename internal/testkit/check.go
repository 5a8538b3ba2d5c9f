package testkit

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// Check is a check CheckInvariants makes, or leaves out, besides its own.
type Check int

const (
	// Settled requires the end of a run: every message done, failed or
	// cancelled (none pending, paused or running), and every failed one
	// saying why (its error or dispatch_error).
	Settled Check = iota + 1
	// RowsOnly leaves the statistics out: for a dispatcher still running
	// (its counts not yet written), or one killed or cut off from its lock
	// (its last counts lost).
	RowsOnly
)

// CheckInvariants checks what every dispatcher run must leave behind,
// reporting each violation with t.Errorf and the first offending id: no
// message running, every message with a state row, and, once the
// dispatchers have stopped, dispatch_stats agreeing with the rows (done and
// failed as many as the rows, and every claim settled once: claimed = done
// + failed + paused + requeued + reset + cancelled). It returns whether
// all held.
func CheckInvariants(t testing.TB, db *pgtest.DB, checks ...Check) bool {
	t.Helper()
	c := checker{t: t, db: db, ok: true}
	settled, rowsOnly := false, false
	for _, k := range checks {
		settled = settled || k == Settled
		rowsOnly = rowsOnly || k == RowsOnly
	}
	if settled {
		if n, id := c.first("SELECT count(*), min(id) FROM pepsi.state WHERE status NOT IN ('done', 'failed', 'cancelled')"); n != 0 {
			var status, stage string
			c.scan("SELECT status, stage FROM pepsi.state WHERE id = $1", []any{id}, &status, &stage)
			c.errorf("%d messages not finished (first: %d, %s at %s)", n, id, status, stage)
		}
		if n, id := c.first(`SELECT count(*), min(id) FROM pepsi.state WHERE status = 'failed'
			AND coalesce(dispatch_error, '') = '' AND coalesce(error, '') = ''`); n != 0 {
			c.errorf("%d failed messages without a reason (first: %d)", n, id)
		}
		if n, id := c.first("SELECT count(*), min(id) FROM pepsi.ingress"); n != 0 {
			c.errorf("%d messages enqueued by pepsi.enqueue() never admitted (first: %d)", n, id)
		}
	} else if n, id := c.first("SELECT count(*), min(id) FROM pepsi.state WHERE status = 'running'"); n != 0 {
		c.errorf("%d messages left running (first: %d)", n, id)
	}
	if n, id := c.first("SELECT count(*), min(m.id) FROM pepsi.message m LEFT JOIN pepsi.state s USING (id) WHERE s.id IS NULL"); n != 0 {
		c.errorf("%d messages without a state row (first: %d)", n, id)
	}
	if rowsOnly {
		return c.ok
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, g, err := db.ReadStats(ctx)
	if err != nil {
		t.Fatalf("testkit: read the statistics: %v", err)
	}
	var done, failed int64
	c.scan("SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'failed') FROM pepsi.state", nil, &done, &failed)
	if g.Done != done {
		c.errorf("dispatch_stats.done = %d, rows done = %d", g.Done, done)
	}
	if g.Failed+g.JoinFailed != failed {
		c.errorf("dispatch_stats.failed = %d (+ join_failed %d), rows failed = %d", g.Failed, g.JoinFailed, failed)
	}
	// Every claimed row was settled exactly once: as an answer, a
	// failure, put back, or found cancelled.
	if g.Claimed != g.Done+g.Failed+g.Paused+g.Requeued+g.Reset+g.Cancelled {
		c.errorf("claimed %d != done %d + failed %d + paused %d + requeued %d + reset %d + cancelled %d",
			g.Claimed, g.Done, g.Failed, g.Paused, g.Requeued, g.Reset, g.Cancelled)
	}
	return c.ok
}

// checker runs a check's queries and counts its failures.
type checker struct {
	t  testing.TB
	db *pgtest.DB
	ok bool
}

func (c *checker) errorf(format string, args ...any) {
	c.t.Helper()
	c.ok = false
	c.t.Errorf(format, args...)
}

// scan runs a query of one row into dst; an error fails the test.
func (c *checker) scan(sql string, args []any, dst ...any) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.db.Pool.QueryRow(ctx, sql, args...).Scan(dst...); err != nil {
		c.t.Fatalf("testkit: %s: %v", sql, err)
	}
}

// first runs a query of a count and the least id counted (NULL when none).
func (c *checker) first(sql string) (n, id int64) {
	c.t.Helper()
	var min *int64
	c.scan(sql, nil, &n, &min)
	if min != nil {
		id = *min
	}
	return n, id
}

// CheckPassedOnce checks the test worker's record of committed passes: no
// message passed a stage twice, except those in mayRepeat (the messages in
// flight at a fault, whose pass may have committed before it and run again
// after it; nil: none may). It logs how many passes were made twice, and
// returns whether the check held.
func CheckPassedOnce(t testing.TB, db *pgtest.DB, mayRepeat map[int64]bool) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := db.Pool.Query(ctx, `SELECT id, stage, count(*), array_agg(pid ORDER BY at)
		FROM test_passes GROUP BY id, stage HAVING count(*) > 1 ORDER BY id, stage`)
	if err != nil {
		t.Fatalf("testkit: the test worker's passes: %v", err)
	}
	var twice, bad []string
	var id, n int64
	var stage string
	var pids []int32
	_, err = pgx.ForEachRow(rows, []any{&id, &stage, &n, &pids}, func() error {
		pass := fmt.Sprintf("%d at %s ×%d by %v", id, stage, n, pids)
		twice = append(twice, pass)
		if !mayRepeat[id] {
			bad = append(bad, pass)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testkit: the test worker's passes: %v", err)
	}
	t.Logf("%d stage passes made twice; %d messages may have been (in flight at a fault)", len(twice), len(mayRepeat))
	if len(bad) == 0 {
		return true
	}
	what := "by messages not in flight at a fault"
	if mayRepeat == nil {
		what = "none may be"
	}
	t.Errorf("stage passes made twice, %s: %s", what, strings.Join(bad[:min(len(bad), 20)], "; "))
	return false
}

// FenceLock is the condition on pg_locks (as l) that picks the stages'
// fence locks, which pepsi.fence() takes for a dispatcher's transaction
// (sql/functions/20_fence.sql).
const FenceLock = "l.locktype = 'advisory' AND l.classid = 1885696102::oid AND l.objsubid = 2"

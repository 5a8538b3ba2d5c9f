package admin_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestFailureGroupsKept: the failure groups' counts, kept by the failed
// messages' own moves (sql/028_failure_groups.sql), are those of a
// grouping of every failed message through each way in and out of failed:
// a stage's pepsi.fail(), a failed pass, retry, purge, cancel, a message
// deleted (retention), a failed message's error changed, the janitor's
// fold, and TRUNCATE.
func TestFailureGroupsKept(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	failed := seed(t, db, "a", queue.Failed, 6)
	running := seed(t, db, "b", queue.Running, 4)
	seed(t, db, "a", queue.Done, 3)
	exec(t, db, `UPDATE pepsi.state SET error = 'order ' || id || ' rejected' WHERE id = ANY($1)`, failed[:4])
	exec(t, db, `UPDATE pepsi.state SET dispatch_error = 'timeout after 300s' WHERE id = ANY($1)`, failed[4:])

	step := 0
	check := func(what string, n int) {
		t.Helper()
		step++
		groups, err := db.FailureGroups(ctx, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		total := 0
		for _, g := range groups {
			got = append(got, fmt.Sprintf("%s|%s|%d|%d", g.Stage, g.Reason, g.Count, g.NewestID))
			total += int(g.Count)
		}
		rows, err := db.Pool.Query(ctx, `
SELECT stage || '|' || reason || '|' || n || '|' || newest
  FROM (SELECT stage, regexp_replace(substr(coalesce(nullif(error, ''), nullif(dispatch_error, ''), '(none)'), 1, 250), '[0-9]+', 'N', 'g') AS reason,
               count(*) AS n, (array_agg(id ORDER BY updated_at DESC, id DESC))[1] AS newest
          FROM pepsi.state WHERE status = 'failed' GROUP BY 1, 2) g
 ORDER BY n DESC, stage, reason`)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			want = append(want, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("step %d, %s: groups\n got %v\nwant %v", step, what, got, want)
		}
		if total != n {
			t.Errorf("step %d, %s: %d failed messages in the groups, want %d", step, what, total, n)
		}
	}
	check("seeded", 6)

	exec(t, db, `SELECT pepsi.fail($1, 'sku 7 unknown')`, running[0])
	exec(t, db, `SELECT pepsi.fail($1, 'sku 8 unknown')`, running[1])
	check("two pepsi.fail()", 8)
	exec(t, db, `UPDATE pepsi.state SET status = 'failed', dispatch_error = 'timeout after 30s' WHERE id = $1`, running[2])
	check("a failed pass", 9)

	if _, err := db.Redrive(ctx, admin.RedriveParams{IDs: []int64{failed[0]}}); err != nil {
		t.Fatal(err)
	}
	check("a retry", 8)
	if _, err := db.Redrive(ctx, admin.RedriveParams{Status: queue.Failed, Stage: "a", Reason: "timeout after Ns"}); err != nil {
		t.Fatal(err)
	}
	check("a group's retry", 6)
	if _, err := db.Cancel(ctx, admin.ControlParams{IDs: []int64{failed[1]}, By: "test"}); err != nil {
		t.Fatal(err)
	}
	check("a cancel (of a failed message: none)", 6)
	exec(t, db, `UPDATE pepsi.state SET status = 'cancelled' WHERE id = $1`, failed[1])
	check("failed to cancelled", 5)
	if _, err := db.PurgeSelection(ctx, admin.Selection{IDs: []int64{failed[2]}}, false); err != nil {
		t.Fatal(err)
	}
	check("a purge", 4)
	exec(t, db, `DELETE FROM pepsi.message WHERE id = $1`, running[0])
	check("a message deleted", 3)
	exec(t, db, `UPDATE pepsi.state SET error = 'order 1 lost', stage = 'c' WHERE id = $1`, failed[3])
	check("an error changed", 3)

	n, err := db.Store.FoldFailures(ctx)
	if err != nil || n == 0 {
		t.Fatalf("FoldFailures: %d groups, %v", n, err)
	}
	if left := count(t, db, `SELECT count(*) FROM pepsi.failure_delta`); left != 0 {
		t.Errorf("%d deltas left after the fold", left)
	}
	if empty := count(t, db, `SELECT count(*) FROM pepsi.failure_groups WHERE n = 0`); empty != 0 {
		t.Errorf("%d empty groups kept", empty)
	}
	check("folded", 3)
	exec(t, db, `SELECT pepsi.fail($1, 'sku 9 unknown')`, running[3])
	check("failed after the fold", 4)

	exec(t, db, `TRUNCATE pepsi.message`) // its trigger deletes the queue rows
	check("messages truncated", 0)
	if _, err := db.Store.FoldFailures(ctx); err != nil {
		t.Fatal(err)
	}
	if left := count(t, db, `SELECT count(*) FROM pepsi.failure_delta`) + count(t, db, `SELECT count(*) FROM pepsi.failure_groups`); left != 0 {
		t.Errorf("%d rows of the groups left after the messages' TRUNCATE and a fold", left)
	}
	seed(t, db, "a", queue.Failed, 2)
	check("failed again", 2)
	exec(t, db, `TRUNCATE pepsi.state`)
	check("queue rows truncated", 0)
	if left := count(t, db, `SELECT count(*) FROM pepsi.failure_delta`) + count(t, db, `SELECT count(*) FROM pepsi.failure_groups`); left != 0 {
		t.Errorf("%d rows of the groups left after TRUNCATE pepsi.state", left)
	}
}

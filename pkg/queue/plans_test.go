package queue_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestPlansWithStaleStatistics: the statistics of a queue table are
// always out of date (the server here runs without autovacuum, so they
// are never refreshed). Analyzed while every row was pending at one stage,
// then churned, the table must still be claimed through state_pending and
// settled with one primary-key lookup per verdict: the planner once walked
// the primary key past every done row to claim, and compared every
// verdict with every running row to settle (7 s for 2 112 verdicts).
func TestPlansWithStaleStatistics(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	seed(t, db, "s0", queue.Pending, 6000)
	if _, err := db.Pool.Exec(ctx, "VACUUM (ANALYZE) pepsi.state"); err != nil {
		t.Fatal(err)
	}
	// The churn the statistics do not know of: most rows done, some
	// running at the next stages, a few pending at each.
	if _, err := db.Pool.Exec(ctx, `
UPDATE pepsi.state SET status = CASE WHEN id % 6 < 3 THEN 'done' WHEN id % 6 = 3 THEN 'running' ELSE 'pending' END,
       stage = 's' || (id % 3)`); err != nil {
		t.Fatal(err)
	}
	checkPlans(t, db, dsn, 1000)
}

// TestPlansAfterEmptyVacuum: a queue that emptied was vacuumed (the
// janitor's VACUUM, or autovacuum) while busy sessions kept it from
// truncating the file, which leaves the statistics saying "pages but no
// rows": the planner then takes the table for empty, whatever it holds.
// A burst enqueued after that must still be claimed through state_pending
// and settled by primary key: the settle once walked all of state_live
// against every verdict (200 000 rows × 2 000 verdicts, over 30 s: the
// dispatcher's statement timeout cancelled it).
func TestPlansAfterEmptyVacuum(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	seed(t, db, "s0", queue.Pending, 3000)
	exec(t, db, "UPDATE pepsi.state SET status = 'done'")
	exec(t, db, "VACUUM (TRUNCATE false) pepsi.state_live")
	var pages, tuples float64
	if err := db.Pool.QueryRow(ctx, "SELECT relpages, reltuples FROM pg_class WHERE oid = 'pepsi.state_live'::regclass").
		Scan(&pages, &tuples); err != nil || pages == 0 || tuples != 0 {
		t.Fatalf("after the vacuum, state_live has relpages %v, reltuples %v (want pages, no rows): %v", pages, tuples, err)
	}
	for i := range 3 {
		seed(t, db, fmt.Sprintf("s%d", i), queue.Pending, 6000)
	}
	exec(t, db, "UPDATE pepsi.state SET status = 'running' WHERE id IN (SELECT id FROM pepsi.state_live ORDER BY id LIMIT 2000)")
	checkPlans(t, db, dsn, 2000)
}

// checkPlans checks the claim's plans (checkClaimPlan) and explains (and
// runs, rolled back) the settle of every running row, want of them, as an
// advance, in a custom and a generic plan, each checked with
// checkSettlePlan.
func checkPlans(t *testing.T, db *pgtest.DB, dsn string, want int) {
	t.Helper()
	ctx := testCtx(t)
	conn := connect(t, dsn)
	custom, generic := claimPlans(t, conn, "FORMAT JSON")
	checkClaimPlan(t, "claim, custom plan", []byte(custom))
	checkClaimPlan(t, "claim, generic plan", []byte(generic))

	rows, err := db.Pool.Query(ctx, "SELECT id, stage FROM pepsi.state WHERE status = 'running' ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	var vs []queue.Settle
	for rows.Next() {
		var v queue.Settle
		if err := rows.Scan(&v.ID, &v.Stage); err != nil {
			t.Fatal(err)
		}
		v.Verdict, v.Next = queue.Advance, "s9"
		vs = append(vs, v)
	}
	if rows.Err() != nil || len(vs) != want {
		t.Fatalf("%d running rows (want %d), %v", len(vs), want, rows.Err())
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		plan, err := tx.Query(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+queue.SettleSQL, queue.SettleArgs(vs)...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(plan, pgx.RowTo[string])
		_ = tx.Rollback(ctx)
		if err != nil || len(lines) != 1 {
			t.Fatalf("explain settle: %v", err)
		}
		checkSettlePlan(t, mode, []byte(lines[0]))
	}
}

// checkSettlePlan fails if the settle reads the verdicts (or what it made
// of them) more than once, or scans pepsi.state sequentially.
func checkSettlePlan(t *testing.T, what string, planJSON []byte) {
	t.Helper()
	var out []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(planJSON, &out); err != nil || len(out) != 1 {
		t.Fatalf("%s: cannot parse plan %s: %v", what, planJSON, err)
	}
	walkPlan(out[0].Plan, func(n planNode) {
		switch {
		case (n.NodeType == "CTE Scan" || n.NodeType == "Function Scan") && n.ActualLoops > 1:
			t.Errorf("settle, %s: a %s runs %v times (once per row of another input):\n%s", what, n.NodeType, n.ActualLoops, planJSON)
		case n.NodeType == "Seq Scan" && n.RelationName == "state":
			t.Errorf("settle, %s: scans pepsi.state sequentially:\n%s", what, planJSON)
		}
	})
}

// TestClaimPlannedOnSmallQueue: the claim runs on a generic plan, made
// once per connection, often while the queue is small (a dispatcher
// started on an empty queue). When a backlog arrives, the claim, keyless
// or keyed, must still find the rows it takes by their ctids, not read
// the pending rows in full: its update once walked all of state_pending in
// every claim (1.6 ms a claim at 16 000 pending, half a hot key's pace).
func TestClaimPlannedOnSmallQueue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, sql, params, args string
		claimed                 int
	}{
		{"keyless", queue.ClaimSQL, "text[], int[], bigint", `('{s1}', '{2}', 1)`, 2},
		// Every key held but one slot of c3: the claim takes c3's next message.
		{"keyed", queue.ClaimKeyedSQL, "text[], int[], text[], int[], int[], jsonb[], bigint",
			`('{}', '{}', '{s1}', '{8}', '{4}', ARRAY['{"c0":4,"c1":4,"c2":4,"c3":3,"c4":4,"c5":4,"c6":4,"c7":4}'::jsonb], 1)`, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			checkPlannedSmall(t, c.sql, c.params, c.args, c.claimed)
		})
	}
}

// checkPlannedSmall prepares sql with params on a queue of 32 pending
// messages over 8 keys and runs it with args as the dispatcher does
// (generic plan, LocalSQL), wanting claimed rows; then, with 16 000 more,
// explains it and fails unless its update is a TID scan.
func checkPlannedSmall(t *testing.T, sql, params, args string, claimed int) {
	db, dsn, ctx := newDB(t)
	exec(t, db, "INSERT INTO pepsi.flow_keys (stage, header, key_limit) VALUES ('s1', 'customer', 4)")
	seedKeys := func(n int) {
		exec(t, db, `
WITH m AS (
    INSERT INTO pepsi.message (headers, payload)
    SELECT jsonb_build_object('customer', 'c' || i % 8), ''::bytea FROM generate_series(1, $1) i RETURNING id, headers
)
INSERT INTO pepsi.state (id, stage, flow_key) SELECT id, 's1', headers ->> 'customer' FROM m`, n)
	}
	conn := connect(t, dsn)
	// run runs sql in a transaction with a claim turn's settings, rolled
	// back, and returns its rows' first columns.
	run := func(sql string) []string {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // the claim is undone
		if _, err := tx.Exec(ctx, queue.LocalSQL(true, true, false)); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx, sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		first, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
			return string(r.RawValues()[0]), nil
		})
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return first
	}
	seedKeys(32)
	if _, err := conn.Exec(ctx, "PREPARE pepsi_claim("+params+") AS "+sql); err != nil {
		t.Fatal(err)
	}
	if got := run("EXECUTE pepsi_claim" + args); len(got) != 2*claimed { // a claimed row twice: picked and updated
		t.Fatalf("claim on 32 rows returned %d rows, want %d", len(got), 2*claimed)
	}
	seedKeys(16_000)
	plan := run("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE pepsi_claim" + args)
	if len(plan) != 1 {
		t.Fatalf("explain returned %d rows", len(plan))
	}
	var out []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan[0]), &out); err != nil || len(out) != 1 {
		t.Fatalf("cannot parse plan %s: %v", plan[0], err)
	}
	updates := 0
	walkPlan(out[0].Plan, func(n planNode) {
		if n.NodeType != "ModifyTable" {
			return
		}
		updates++
		if len(n.Plans) == 0 || n.Plans[len(n.Plans)-1].NodeType != "Tid Scan" {
			t.Errorf("the claim's update does not find its rows by ctid (a Tid Scan):\n%s", plan[0])
		}
	})
	if updates != 1 {
		t.Errorf("%d updates in the claim's plan, want 1:\n%s", updates, plan[0])
	}
}

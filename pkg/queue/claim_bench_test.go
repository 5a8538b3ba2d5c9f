package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

var (
	benchStages = []string{"s0", "s1", "s2"}
	benchCaps   = []int32{16, 16, 16}
)

// seedBulk inserts pending rows (and done ones) spread round-robin over
// benchStages with INSERT … SELECT generate_series, then analyzes.
func seedBulk(t testing.TB, db *pgtest.DB, pending, done int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	for _, batch := range []struct {
		n      int
		status string
	}{{pending, "pending"}, {done, "done"}} {
		if batch.n == 0 {
			continue
		}
		_, err := db.Pool.Exec(ctx, `
WITH m AS (
    INSERT INTO pepsi.message (payload) SELECT '\x00'::bytea FROM generate_series(1, $1) RETURNING id
)
INSERT INTO pepsi.state (id, stage, status) SELECT id, 's' || (id % 3), $2 FROM m`, batch.n, batch.status)
		if err != nil {
			t.Fatalf("seed %d %s rows: %v", batch.n, batch.status, err)
		}
	}
	// Autovacuum would do this soon on its own; do it now so the plan and
	// the timing are those of the steady state.
	for _, sql := range []string{"VACUUM (ANALYZE) pepsi.message", "VACUUM (ANALYZE) pepsi.state"} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// planNode is the part of EXPLAIN (FORMAT JSON) output the checks need.
type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	ActualLoops  float64    `json:"Actual Loops"`
	Plans        []planNode `json:"Plans"`
}

func walkPlan(n planNode, fn func(planNode)) {
	fn(n)
	for _, c := range n.Plans {
		walkPlan(c, fn)
	}
}

// checkClaimPlan fails unless the plan walks state_pending and never
// scans pepsi.state sequentially.
func checkClaimPlan(t testing.TB, what string, planJSON []byte) {
	t.Helper()
	var out []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(planJSON, &out); err != nil || len(out) != 1 {
		t.Fatalf("%s: cannot parse plan %s: %v", what, planJSON, err)
	}
	pendingIndex, seqScan := false, false
	walkPlan(out[0].Plan, func(n planNode) {
		switch n.NodeType {
		case "Index Scan", "Index Only Scan":
			pendingIndex = pendingIndex || n.IndexName == "state_pending"
		case "Bitmap Index Scan":
			// Not a walk in id order that stops at the cap.
		case "Seq Scan":
			seqScan = seqScan || n.RelationName == "state"
		}
	})
	if !pendingIndex || seqScan {
		t.Fatalf("%s: plan does not walk state_pending (index scan %v) or scans pepsi.state sequentially (%v):\n%s",
			what, pendingIndex, seqScan, planJSON)
	}
}

// claimPlans returns the claim's plan as the first executions see it
// (custom, for these parameters) and as a cached prepared statement may
// see it after five (generic), each in format (e.g. "FORMAT JSON").
func claimPlans(t testing.TB, conn *pgx.Conn, options string) (custom, generic string) {
	t.Helper()
	ctx := testCtx(t)
	explain := func(sql string, args ...any) string {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) // EXPLAIN ANALYZE runs the UPDATE
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return strings.Join(lines, "\n")
	}
	custom = explain("EXPLAIN ("+options+") "+queue.ClaimSQL, benchStages, benchCaps, int64(1))

	if _, err := conn.Exec(ctx, "PREPARE pepsi_claim(text[], int[], bigint) AS "+queue.ClaimSQL); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "DEALLOCATE pepsi_claim")
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "RESET plan_cache_mode")
	// EXECUTE takes no protocol parameters: spell the arrays out.
	caps := make([]string, len(benchCaps))
	for i, c := range benchCaps {
		caps[i] = fmt.Sprint(c)
	}
	generic = explain(fmt.Sprintf("EXPLAIN (%s) EXECUTE pepsi_claim('{%s}', '{%s}', 1)", options,
		strings.Join(benchStages, ","), strings.Join(caps, ",")))
	return custom, generic
}

// The claim walks the partial index per stage and stops at the cap; it
// never reads the whole queue table, neither for the first executions nor
// once the statement cache switches to a generic plan.
func TestClaimPlanUsesPendingIndex(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	seedBulk(t, db, 20_000, 20_000)
	conn := connect(t, dsn)
	custom, generic := claimPlans(t, conn, "FORMAT JSON")
	checkClaimPlan(t, "custom plan", []byte(custom))
	checkClaimPlan(t, "generic plan", []byte(generic))

	// And the claim does what the plan promises.
	got, err := queue.Claim(ctx, db.Pool, []queue.StageCap{{Stage: "s0", Cap: 16}, {Stage: "s1", Cap: 16}, {Stage: "s2", Cap: 16}}, nil)
	if err != nil || len(got) != 48 {
		t.Fatalf("claim on 20 000 pending rows: %d rows, %v", len(got), err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state WHERE status = 'running'"); n != 48 {
		t.Fatalf("%d running rows after the claim, want 48", n)
	}
}

// BenchmarkClaim times one claim (caps 16 for 3 stages) against 1 000 and
// 1 000 000 pending rows, under a claiming turn's settings. Each claim runs
// in a transaction that is rolled back, so the pending set stays the same.
//
//	go test -run '^$' -bench BenchmarkClaim -benchtime 200x ./pkg/queue/
func BenchmarkClaim(b *testing.B) {
	for _, size := range []int{1_000, 1_000_000} {
		b.Run(fmt.Sprintf("pending=%d", size), func(b *testing.B) {
			if size > 10_000 && testing.Short() {
				b.Skip("1M rows take a while to build; skipped with -short")
			}
			db, dsn := newBenchDB(b)
			ctx := context.Background()
			start := time.Now()
			seedBulk(b, db, size, 0)
			b.Logf("built %d pending rows in %v", size, time.Since(start).Round(time.Millisecond))

			conn := connect(b, dsn)
			custom, generic := claimPlans(b, conn, "FORMAT JSON")
			checkClaimPlan(b, "custom plan", []byte(custom))
			checkClaimPlan(b, "generic plan", []byte(generic))
			custom, generic = claimPlans(b, conn, "ANALYZE, BUFFERS")
			logPlan(b, fmt.Sprintf("%d pending rows, custom plan", size), custom)
			logPlan(b, fmt.Sprintf("%d pending rows, generic plan", size), generic)

			var inClaim time.Duration
			claims := 0
			for b.Loop() {
				tx, err := db.Pool.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				// The settings of a turn that claims (plans, generic,
				// async), which a turn sends in the claim's round trip.
				if _, err := tx.Exec(ctx, queue.LocalSQL(true, true, true)); err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				rows, err := tx.Query(ctx, queue.ClaimSQL, benchStages, benchCaps, int64(1))
				if err != nil {
					b.Fatal(err)
				}
				// The claim returns each row twice: once from its pick
				// (with the time it waited, no stage) and once from its
				// update (with its stage).
				n := 0
				for rows.Next() {
					var id int64
					var stage string
					if err := rows.Scan(&id, &stage, nil, nil, nil, nil); err != nil {
						b.Fatal(err)
					}
					if stage != "" {
						n++
					}
				}
				if err := rows.Err(); err != nil {
					b.Fatal(err)
				}
				inClaim += time.Since(t0)
				claims++
				if err := tx.Rollback(ctx); err != nil {
					b.Fatal(err)
				}
				if n != 48 {
					b.Fatalf("claimed %d rows, want 48", n)
				}
			}
			b.ReportMetric(float64(inClaim.Microseconds())/1000/float64(claims), "ms/claim")
		})
	}
}

// logPlan logs an EXPLAIN ANALYZE text. The testing package keeps only
// the first 10 lines of a benchmark's log, so each plan is logged on one
// line (" | " between plan lines); with -v it is also printed in full.
func logPlan(b *testing.B, what, plan string) {
	lines := strings.Split(plan, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	b.Logf("EXPLAIN ANALYZE, %s: %s", what, strings.Join(lines, " | "))
	if testing.Verbose() {
		fmt.Printf("EXPLAIN ANALYZE, %s:\n%s\n", what, plan)
	}
}

// newBenchDB is newDB for benchmarks.
func newBenchDB(b *testing.B) (*pgtest.DB, string) {
	db, dsn, _ := newDB(b)
	return db, dsn
}

package queue_test

import (
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// rowVersions returns xmin of every statistics row: unchanged means not written.
func rowVersions(t *testing.T, db *pgtest.DB) (stages, dispatch string) {
	t.Helper()
	ctx := testCtx(t)
	if err := db.Pool.QueryRow(ctx, "SELECT coalesce(string_agg(stage || ':' || xmin::text, ',' ORDER BY stage), '') FROM pepsi.stage_stats").Scan(&stages); err != nil {
		t.Fatal(err)
	}
	if err := db.Pool.QueryRow(ctx, "SELECT xmin::text FROM pepsi.dispatch_stats").Scan(&dispatch); err != nil {
		t.Fatal(err)
	}
	return stages, dispatch
}

func TestAddStats(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)

	stages, d, err := db.ReadStats(ctx)
	if err != nil {
		t.Fatalf("ReadStats: %v", err)
	}
	if len(stages) != 0 || !d.IsZero() || d.UpdatedAt.IsZero() {
		t.Fatalf("fresh stats: %+v %+v", stages, d)
	}

	deltas := []queue.StageStats{
		{Stage: "b", Processed: 1, Failed: 2, Timeouts: 3, Crashes: 4, BusySeconds: 1.5},
		{Stage: "zero"},
		{Stage: "a", BusySeconds: 0.25}, // busy time alone is a delta
	}
	global := queue.DispatchStats{Claimed: 5, StagePasses: 6, Requeued: 7, Done: 8, Failed: 9, Paused: 10, Resumed: 11, Reset: 12}
	for range 2 {
		if err := db.AddStats(ctx, deltas, global); err != nil {
			t.Fatalf("AddStats: %v", err)
		}
	}
	stages, d, err = db.ReadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 || stages[0].Stage != "a" || stages[1].Stage != "b" {
		t.Fatalf("stages %+v, want a and b (zero skipped), by name", stages)
	}
	if a := stages[0]; a.Processed != 0 || a.Failed != 0 || a.Timeouts != 0 || a.Crashes != 0 || a.BusySeconds != 0.5 {
		t.Fatalf("a = %+v, want busy 0.5 only", a)
	}
	if b := stages[1]; b.Processed != 2 || b.Failed != 4 || b.Timeouts != 6 || b.Crashes != 8 || b.BusySeconds != 3 || b.UpdatedAt.IsZero() {
		t.Fatalf("b = %+v, want twice the deltas", b)
	}
	want := queue.DispatchStats{Claimed: 10, StagePasses: 12, Requeued: 14, Done: 16, Failed: 18, Paused: 20, Resumed: 22, Reset: 24}
	if d.Claimed != want.Claimed || d.StagePasses != want.StagePasses || d.Requeued != want.Requeued || d.Done != want.Done ||
		d.Failed != want.Failed || d.Paused != want.Paused || d.Resumed != want.Resumed || d.Reset != want.Reset {
		t.Fatalf("dispatch stats %+v, want %+v", d, want)
	}

	// All zero: nothing written at all.
	s0, d0 := rowVersions(t, db)
	_, before, _ := db.ReadStats(ctx)
	if err := db.AddStats(ctx, []queue.StageStats{{Stage: "a"}, {Stage: "new"}}, queue.DispatchStats{}); err != nil {
		t.Fatal(err)
	}
	if err := db.AddStats(ctx, nil, queue.DispatchStats{}); err != nil {
		t.Fatal(err)
	}
	if s1, d1 := rowVersions(t, db); s1 != s0 || d1 != d0 {
		t.Fatalf("all-zero AddStats wrote rows: %s/%s → %s/%s", s0, d0, s1, d1)
	}
	stages, after, _ := db.ReadStats(ctx)
	if !after.UpdatedAt.Equal(before.UpdatedAt) || len(stages) != 2 {
		t.Fatalf("all-zero AddStats changed updated_at %v → %v or stages %+v", before.UpdatedAt, after.UpdatedAt, stages)
	}

	// Stage deltas only: the global row is not written, and the other way round.
	if err := db.AddStats(ctx, []queue.StageStats{{Stage: "c", Processed: 1}}, queue.DispatchStats{}); err != nil {
		t.Fatal(err)
	}
	if _, d1 := rowVersions(t, db); d1 != d0 {
		t.Fatal("stage-only AddStats wrote dispatch_stats")
	}
	s0, _ = rowVersions(t, db)
	if err := db.AddStats(ctx, nil, queue.DispatchStats{Done: 1}); err != nil {
		t.Fatal(err)
	}
	if s1, d1 := rowVersions(t, db); s1 != s0 || d1 == d0 {
		t.Fatalf("global-only AddStats: stages %s → %s, dispatch %s → %s", s0, s1, d0, d1)
	}
	stages, d, _ = db.ReadStats(ctx)
	if len(stages) != 3 || stages[2].Stage != "c" || stages[2].Processed != 1 || d.Done != 17 {
		t.Fatalf("after partial adds: %+v %+v", stages, d)
	}
	if !d.UpdatedAt.After(before.UpdatedAt) {
		t.Fatalf("dispatch_stats.updated_at %v not after %v", d.UpdatedAt, before.UpdatedAt)
	}
}

// TestAddStatsOnce: a write sent again with its token and sequence number
// (its commit was not acknowledged) is applied once; a later one, or one
// of a new run (another token), is applied.
func TestAddStatsOnce(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	f := func(token, seq, done int64) queue.StatsFlush {
		return queue.StatsFlush{Token: token, Seq: seq, Stages: []queue.StageStats{{Stage: "a", Processed: done}},
			Global: queue.DispatchStats{Done: done}}
	}
	for _, fs := range [][]queue.StatsFlush{
		{f(1, 1, 1)},
		{f(1, 1, 1), f(1, 2, 10)}, // the first again, then the next
		{f(1, 2, 10)},             // applied: skipped
		{f(2, 1, 100)},            // a new run
	} {
		if err := db.AddStatsOnce(ctx, fs); err != nil {
			t.Fatal(err)
		}
	}
	stages, d, err := db.ReadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Done != 111 || len(stages) != 1 || stages[0].Processed != 111 {
		t.Errorf("done %d, processed %+v; want 111 each", d.Done, stages)
	}
}

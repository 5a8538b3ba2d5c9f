package queue_test

import (
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestNotRunStages: a stage whose latest statistics write counted more
// answers 75 than passes is listed, with that write's counts; a later
// write with more passes, or a write older than two STATS_INTERVALs,
// takes it off; not_run adds up as the other counters do.
func TestNotRunStages(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	add := func(deltas ...queue.StageStats) {
		t.Helper()
		if err := db.AddStats(ctx, deltas, queue.DispatchStats{}); err != nil {
			t.Fatal(err)
		}
	}
	list := func() map[string]queue.NotRunAnswers {
		t.Helper()
		got, err := db.NotRunStages(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]queue.NotRunAnswers{}
		for _, a := range got {
			m[a.Stage] = a
		}
		return m
	}

	add(queue.StageStats{Stage: "a", NotRun: 5, Processed: 1, Crashes: 1},
		queue.StageStats{Stage: "b", NotRun: 2, Processed: 1, Failed: 1}, // half: not mostly
		queue.StageStats{Stage: "c", Processed: 9})
	got := list()
	if a, ok := got["a"]; len(got) != 1 || !ok || a.NotRun != 5 || a.Passes != 2 || a.At.IsZero() {
		t.Fatalf("NotRunStages = %+v, want a alone, 5 answers 75 against 2 passes", got)
	}
	add(queue.StageStats{Stage: "b", NotRun: 3})
	if got := list(); len(got) != 2 || got["b"].NotRun != 3 || got["b"].Passes != 0 {
		t.Fatalf("after b's write of 3 answers 75: %+v, want a and b (3, 0): the latest write counts", got)
	}
	add(queue.StageStats{Stage: "a", NotRun: 1, Processed: 40})
	if got := list(); len(got) != 1 || got["b"].Stage != "b" {
		t.Fatalf("after a's write of 40 passes: %+v, want b alone", got)
	}
	// A pass whose message was cancelled is taken out of processed and
	// counted cancelled: it stays a pass.
	add(queue.StageStats{Stage: "d", NotRun: 1, Processed: -1, Cancelled: 2})
	if got := list(); len(got) != 1 || got["b"].Stage != "b" {
		t.Fatalf("after d's write of 1 answer 75 and 2 cancelled passes: %+v, want b alone", got)
	}
	exec(t, db, "UPDATE pepsi.stage_stats SET updated_at = now() - interval '121 seconds' WHERE stage = 'b'")
	if got := list(); len(got) != 0 {
		t.Fatalf("b written over two minutes ago: %+v, want none (STATS_INTERVAL 1m)", got)
	}
	stages, _, err := db.ReadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stages {
		if want := map[string]int64{"a": 6, "b": 5, "c": 0, "d": 1}[s.Stage]; s.NotRun != want {
			t.Errorf("ReadStats: %s not_run %d, want %d (the sum of its writes)", s.Stage, s.NotRun, want)
		}
	}
}

package dispatch

import (
	"context"
	"testing"
	"time"
)

// TestStatusLineTransitions: a stage may answer its transition on the
// status line; the dispatcher applies it, and a stage that moved the
// message itself still wins.
func TestStatusLineTransitions(t *testing.T) {
	b := setup(t, fast, "a\nQUEUE_LIMIT = 8", "b\nQUEUE_LIMIT = 8")
	const n = 300
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = "a=tnext:b b=tdone"
	}
	ids := b.enqueue("a", payloads...)
	mixed := b.enqueue("a", "a=tpause:0.2", "a=advance:b b=finish")
	b.start()
	b.waitSettled(time.Minute)
	if got := b.int64("SELECT count(*) FROM pepsi.state WHERE status = 'done' AND stage = 'b' AND id = ANY($1)", ids); got != n {
		t.Errorf("%d of %d done at b", got, n)
	}
	if st, stage, _ := b.row(mixed[0]); st != "done" || stage != "a" {
		t.Errorf("paused by status line: %s at %s, want done at a", st, stage)
	}
	if st, stage, _ := b.row(mixed[1]); st != "done" || stage != "b" {
		t.Errorf("moved by the stage: %s at %s", st, stage)
	}
	if got := b.int64("SELECT count(*) FROM test_passes WHERE id = ANY($1)", ids); got != 0 {
		t.Errorf("%d passes committed by the stage; the status-line stage commits none", got)
	}
	b.checkInvariants()
	_, g, err := b.db.ReadStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if g.Requeued != n+1 || g.Done != n+2 || g.Paused != 1 || g.Resumed != 1 {
		t.Errorf("stats: requeued %d done %d paused %d resumed %d", g.Requeued, g.Done, g.Paused, g.Resumed)
	}
}

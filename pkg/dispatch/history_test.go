package dispatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestFailedPassHistory: a message whose pass fails twice, its stage
// answering non-zero and then its worker crashing, and then passes, is
// done with exactly those two failed passes in its history, each with its
// attempt, kind, reason and worker; a message that never failed has none.
func TestFailedPassHistory(t *testing.T) {
	b := setup(t, fast, "work\nPARALLELISM = 1\nRETRIES = 2\nRETRY_DELAY = 0.1\nRETRY_DELAY_MAX = 0.2", "next")
	ids := b.enqueue("work", "work=failtwice:next next=finish", "work=advance:next next=finish")
	b.start()
	b.waitSettled(time.Minute)
	for _, id := range ids {
		if st, stage, _ := b.row(id); st != "done" || stage != "next" {
			t.Errorf("message %d: %s at %s, want done at next", id, st, stage)
		}
	}
	type pass struct {
		N, Attempt   int
		Stage, Kind  string
		Reason, Host string
		PID          int
		Worker       bool // the pid is one of the stage's workers (test_workers)
	}
	rows, err := b.db.Pool.Query(context.Background(), `SELECT n, attempt, stage, kind, reason, host, pid,
		       EXISTS (SELECT FROM test_workers w WHERE w.pid = h.pid AND w.stage = 'work')
		  FROM pepsi.history h WHERE id = $1 ORDER BY n`, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[pass])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("history of the message that failed twice: %+v, want 2 passes", got)
	}
	want := []struct {
		kind, reason string
	}{{"answer", "stage work answered 3: failing on purpose"}, {"crash", "worker crashed: exit status 3"}}
	for i, p := range got {
		if p.N != i+1 || p.Attempt != i+1 || p.Stage != "work" || p.Kind != want[i].kind || p.Reason != want[i].reason ||
			!p.Worker || p.Host == "" {
			t.Errorf("pass %d: %+v, want attempt %d, %s, %q, by a worker of work", i+1, p, i+1, want[i].kind, want[i].reason)
		}
	}
	if n := b.int64("SELECT count(*) FROM pepsi.history WHERE id <> $1", ids[0]); n != 0 {
		t.Errorf("%d history rows of the message that never failed", n)
	}
	if !strings.Contains(b.logs.String(), "worker crashed") {
		t.Errorf("no crash in the log")
	}
	b.checkInvariants()
}

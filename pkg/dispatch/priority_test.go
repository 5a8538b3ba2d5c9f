package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPriorityOrder: one worker with room for eight ids passes a stage's
// messages lowest priority first, in id order within a priority: the claim
// picks them so and the hand-out keeps that order within a batch.
func TestPriorityOrder(t *testing.T) {
	b := setup(t, fast, "parse\nPARALLELISM = 1\nQUEUE_LIMIT = 8")
	const n = 60
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = "parse=finish"
	}
	ids := b.enqueue("parse", payloads...)
	if _, err := b.db.Pool.Exec(context.Background(),
		"UPDATE pepsi.state SET priority = (id * 7) % 5 - 2 WHERE id = ANY($1)", ids); err != nil {
		t.Fatal(err)
	}
	b.start()
	b.waitFor("all done", 2*time.Minute, func() bool { return b.count("done") == n })
	b.checkInvariants()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := b.db.Pool.Query(ctx, `SELECT p.id, s.priority FROM test_passes p JOIN pepsi.state s USING (id) ORDER BY p.at, p.id`)
	if err != nil {
		t.Fatal(err)
	}
	type pass struct {
		ID   int64
		Prio int32
	}
	passes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[pass])
	if err != nil {
		t.Fatal(err)
	}
	if len(passes) != n {
		t.Fatalf("%d passes, want %d", len(passes), n)
	}
	for i := 1; i < len(passes); i++ {
		a, c := passes[i-1], passes[i]
		if a.Prio > c.Prio || a.Prio == c.Prio && a.ID > c.ID {
			t.Fatalf("pass %d: message %d (priority %d) after %d (priority %d): not in (priority, id) order", i, c.ID, c.Prio, a.ID, a.Prio)
		}
	}
}

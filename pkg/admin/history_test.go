package admin_test

import (
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestHistoryRead: History reads a message's failed passes oldest first;
// Show carries them; pepsi queue purge takes them with their messages
// and leaves the others'.
func TestHistoryRead(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	failed := seed(t, db, "s", queue.Failed, 2)
	kept := seed(t, db, "s", queue.Pending, 1)[0]
	for _, id := range append(failed, kept) {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO pepsi.history (id, n, at, stage, attempt, kind, reason, pid)
			SELECT $1, n, now() - (3 - n) * interval '1 minute', 's', n, 'timeout', 'pass ' || n, 100 + n
			  FROM generate_series(1, 2) n`, id); err != nil {
			t.Fatal(err)
		}
	}
	h, err := db.History(ctx, failed[0])
	if err != nil || len(h) != 2 || h[0].N != 1 || h[1].Reason != "pass 2" || !h[0].At.Before(h[1].At) || *h[1].PID != 102 || h[0].Kind != "timeout" {
		t.Fatalf("History = %+v, %v", h, err)
	}
	m, err := db.Show(ctx, failed[1])
	if err != nil || len(m.History) != 2 {
		t.Fatalf("Show: %+v, %v", m, err)
	}
	if _, err := db.Purge(ctx, admin.PurgeParams{Status: queue.Failed}); err != nil {
		t.Fatal(err)
	}
	var left, others int64
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE id <> $1), count(*) FILTER (WHERE id = $1) FROM pepsi.history", kept).
		Scan(&left, &others); err != nil {
		t.Fatal(err)
	}
	if left != 0 || others != 2 {
		t.Fatalf("after the purge: %d history rows of purged messages, %d of the kept one (want 0, 2)", left, others)
	}
	if h, err := db.History(ctx, failed[0]); err != nil || len(h) != 0 {
		t.Fatalf("History of a purged message = %+v, %v", h, err)
	}
}

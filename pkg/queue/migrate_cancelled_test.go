package queue_test

import (
	"strings"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestMigrateCancelled: the migration that gives cancelled a status of its
// own moves the messages an earlier pepsi.cancel() failed ("cancelled by
// USER") to it, and leaves the failures of stages failed; the statistics
// gain their cancelled columns, at 0.
func TestMigrateCancelled(t *testing.T) {
	known := migrations(t)
	version := 0
	for _, m := range known {
		if strings.HasSuffix(m.Name, "cancelled") {
			version = m.Version
		}
	}
	if version == 0 {
		t.Fatal("no migration named cancelled")
	}
	ctx, _, conn, _ := migratedTo(t, version-1)
	for _, q := range []string{
		"INSERT INTO pepsi.message (id, payload) SELECT g, 'x' FROM generate_series(1, 4) g",
		`INSERT INTO pepsi.state (id, stage, status, error) VALUES (1, 'a', 'failed', 'cancelled by alice'),
			(2, 'a', 'failed', 'no such customer'), (3, 'a', 'pending', NULL), (4, 'a', 'done', NULL)`,
		"INSERT INTO pepsi.stage_stats (stage, processed, failed) VALUES ('a', 7, 1)",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := queue.Migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := conn.QueryRow(ctx, `SELECT string_agg(id || ' ' || status || ' ' || tableoid::regclass::text, ', ' ORDER BY id)
		FROM pepsi.state`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want := "1 cancelled pepsi.state_cancelled, 2 failed pepsi.state_failed, 3 pending pepsi.state_live, 4 done pepsi.state_done_default"; got != want {
		t.Errorf("rows after the migration: %s; want %s", got, want)
	}
	var n int64
	if err := conn.QueryRow(ctx, "SELECT cancelled FROM pepsi.stage_stats WHERE stage = 'a'").Scan(&n); err != nil || n != 0 {
		t.Errorf("stage_stats.cancelled: %d, %v", n, err)
	}
}

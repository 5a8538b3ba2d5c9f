package dispatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pepsi-dev/pepsi/internal/testkit"
)

// TestOrphanSweep: a running row that no worker holds (a claim whose
// answer was lost) is reset by the sweep and then processed.
func TestOrphanSweep(t *testing.T) {
	b := setup(t, fast+"\nORPHAN_SWEEP = 0.3", "work")
	b.start()
	ids := b.enqueue("work", "work=slow:1ms")
	// Done, and settled by the dispatcher (its statistics are written after).
	b.waitFor("message settled", time.Minute, func() bool { return b.int64("SELECT done FROM pepsi.dispatch_stats") == 1 })
	// Simulate a lost claim: the row is running, but no worker has it.
	if _, err := b.db.Pool.Exec(context.Background(),
		"UPDATE pepsi.state SET status = 'running', updated_at = now() - interval '1 hour' WHERE id = $1", ids[0]); err != nil {
		t.Fatal(err)
	}
	b.waitFor("orphan reset and done again", time.Minute, func() bool {
		st, _, _ := b.row(ids[0])
		return st == "done" && b.int64("SELECT orphans FROM pepsi.dispatch_stats") == 1
	})
	if n := b.int64("SELECT count(*) FROM test_passes WHERE id = $1", ids[0]); n != 2 {
		t.Errorf("%d passes, want 2 (the orphan ran again)", n)
	}
}

// TestRetention: done messages older than RETENTION are deleted, and
// counted; newer ones and failed ones stay.
func TestRetention(t *testing.T) {
	b := setup(t, fast+"\nRETENTION = 1h", "work")
	old := b.enqueue("work", make([]string, 2500)...)
	keep := b.enqueue("work", "a", "b")
	ctx := context.Background()
	if _, err := b.db.Pool.Exec(ctx, `UPDATE pepsi.state SET status = 'done', updated_at = now() - interval '2 hours' WHERE id = ANY($1)`, old); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Pool.Exec(ctx, `UPDATE pepsi.state SET status = 'failed', updated_at = now() - interval '2 hours' WHERE id = $1`, keep[0]); err != nil {
		t.Fatal(err)
	}
	b.start()
	b.waitFor("old done messages deleted", time.Minute, func() bool {
		return b.int64("SELECT count(*) FROM pepsi.message") == 2 && b.int64("SELECT expired FROM pepsi.dispatch_stats") == 2500
	})
	b.waitSettled(time.Minute)
	if st, _, _ := b.row(keep[0]); st != "failed" {
		t.Errorf("failed message: %s", st)
	}
	if st, _, _ := b.row(keep[1]); st != "done" {
		t.Errorf("new message: %s", st)
	}
}

// TestVacuumSweep: the churn of a pipeline leaves dead row versions in
// pepsi.state_live, and deleted messages (what the retention sweep does) in
// pepsi.message_default; the dispatcher vacuums both itself (the test
// server runs with autovacuum off, as this machine's does) and says so at
// debug; it analyzes pepsi.state too, and folds the failure groups'
// deltas. The ranges of message ids are dropped first, so that the messages
// go to the default partition, as they do when no range is ahead.
func TestVacuumSweep(t *testing.T) {
	b := setup(t, fast+"\nVACUUM_INTERVAL = 0.2", "work\nPARALLELISM = 2\nQUEUE_LIMIT = 8")
	if _, err := b.db.Pool.Exec(context.Background(), `DO $$
		DECLARE r record;
		BEGIN
		    FOR r IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		              WHERE i.inhparent = 'pepsi.message'::regclass AND c.relname <> 'message_default' LOOP
		        EXECUTE format('DROP TABLE pepsi.%I', r.relname);
		    END LOOP;
		END $$`); err != nil {
		t.Fatal(err)
	}
	b.enqueue("work", make([]string, 1500)...)
	b.start()
	b.waitSettled(3 * time.Minute)
	b.waitFor("pepsi.state_live vacuumed by the dispatcher", 2*time.Minute, func() bool {
		return b.int64("SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'pepsi.state_live'::regclass") > 0
	})
	b.waitFor("the vacuum logged", time.Minute, func() bool {
		return strings.Contains(b.logs.String(), `msg="vacuumed pepsi.state_live"`)
	})
	// The vacuum service's analyze check: pepsi.state, partitioned, is
	// never analyzed by the server's autovacuum.
	b.waitFor("pepsi.state analyzed by the dispatcher", 2*time.Minute, func() bool {
		return b.int64("SELECT analyze_count FROM pg_stat_user_tables WHERE relid = 'pepsi.state'::regclass") > 0
	})
	b.waitFor("the analyze logged", time.Minute, func() bool {
		return strings.Contains(b.logs.String(), `msg="analyzed pepsi.state"`)
	})
	// The vacuum service folds the failure groups' deltas into their
	// sums (a group that sums to 0 goes).
	if _, err := b.db.Pool.Exec(context.Background(), `INSERT INTO pepsi.failure_delta (stage, reason, n)
		VALUES ('work', 'gone N', 1), ('work', 'gone N', -1), ('work', 'kept N', 1), ('work', 'kept N', 1)`); err != nil {
		t.Fatal(err)
	}
	b.waitFor("the failure groups' deltas folded", time.Minute, func() bool {
		return b.int64("SELECT count(*) FROM pepsi.failure_delta") == 0
	})
	if n := b.int64("SELECT coalesce(sum(n), 0) FROM pepsi.failure_groups WHERE stage = 'work' AND reason = 'kept N'"); n != 2 ||
		b.int64("SELECT count(*) FROM pepsi.failure_groups WHERE reason = 'gone N'") != 0 {
		t.Errorf("folded: the group kept N has %d, or gone N is kept", n)
	}
	if _, err := b.db.Pool.Exec(context.Background(), `DELETE FROM pepsi.failure_groups WHERE reason = 'kept N'`); err != nil {
		t.Fatal(err)
	}
	if n := b.int64("SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'pepsi.message_default'::regclass"); n != 0 {
		t.Fatalf("pepsi.message_default vacuumed %d times before anything was deleted from it", n)
	}
	// 1 200 messages go as the retention sweep takes them: rows and state.
	if _, err := b.db.Pool.Exec(context.Background(), `WITH d AS (DELETE FROM pepsi.message WHERE id IN
		(SELECT id FROM pepsi.message ORDER BY id LIMIT 1200) RETURNING id) DELETE FROM pepsi.state WHERE id IN (SELECT id FROM d)`); err != nil {
		t.Fatal(err)
	}
	b.waitFor("pepsi.message_default vacuumed by the dispatcher", 2*time.Minute, func() bool {
		return b.int64("SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'pepsi.message_default'::regclass") > 0
	})
	b.waitFor("its vacuum logged", time.Minute, func() bool {
		return strings.Contains(b.logs.String(), `msg="vacuumed pepsi.message_default"`)
	})
	if err := b.stop(); err != nil {
		t.Errorf("dispatcher returned %v", err)
	}
	// The statistics count the 1 200 deleted by hand: rows only.
	if !b.site.Check(testkit.RowsOnly) {
		b.showLogs()
	}
}

// TestRetentionMessageRanges: the retention sweep keeps ranges of message
// ids ahead of the sequence, and drops a range whose ids are all drawn
// once its done messages have expired, moving the one failed message it
// still holds to the default partition, where it can be read; nothing
// else of the range is left.
func TestRetentionMessageRanges(t *testing.T) {
	b := setup(t, fast+"\nRETENTION = 2", "work")
	ctx := context.Background()
	if _, err := b.db.Pool.Exec(ctx, "SELECT setval('pepsi.message_id_seq', 9600)"); err != nil {
		t.Fatal(err)
	}
	bodies := make([]string, 800) // ids 9601 to 10400: the first range's last 400, the next one's first
	bodies[0] = "work=fail:kept"
	ids := b.enqueue("work", bodies...)
	if ids[0] != 9601 || ids[len(ids)-1] != 10400 {
		t.Fatalf("ids %d to %d, want 9601 to 10400", ids[0], ids[len(ids)-1])
	}
	b.start()
	b.waitSettled(2 * time.Minute)
	b.waitFor("the first range of messages dropped", 2*time.Minute, func() bool {
		return b.int64("SELECT count(*) FROM pg_class WHERE relname = 'message_1_10001'") == 0
	})
	b.waitFor("the done messages expired", time.Minute, func() bool {
		return b.int64("SELECT expired FROM pepsi.dispatch_stats") == 799
	})
	var part string
	if err := b.db.Pool.QueryRow(ctx, "SELECT tableoid::regclass::text FROM pepsi.message WHERE id = $1", ids[0]).Scan(&part); err != nil ||
		part != "pepsi.message_default" {
		t.Errorf("the failed message in %s (%v), want the default partition", part, err)
	}
	if st, _, _ := b.row(ids[0]); st != "failed" {
		t.Errorf("the failed message: %s", st)
	}
	if n := b.int64("SELECT count(*) FROM pepsi.message"); n != 1 {
		t.Errorf("%d messages left, want the failed one", n)
	}
	// Three ranges ahead of the sequence, the next one's among them.
	if n := b.int64(`SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'pepsi.message'::regclass AND split_part(c.relname, '_', 2) ~ '^[0-9]+$'
		  AND split_part(c.relname, '_', 2)::bigint > 10400`); n < 2 {
		t.Errorf("%d ranges of messages ahead of the sequence", n)
	}
	if err := b.stop(); err != nil {
		t.Errorf("dispatcher returned %v", err)
	}
	if !strings.Contains(b.logs.String(), `msg="retention: ranges of messages dropped"`) {
		t.Error("no debug line for the dropped range")
	}
	// The statistics count the expired messages that the rows no longer
	// show: rows only.
	if !b.site.Check(testkit.RowsOnly) {
		b.showLogs()
	}
}

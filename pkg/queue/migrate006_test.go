package queue_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestMigrateStageSets: 006 upgrades a populated version-5 database in
// place: the messages untouched, the statistics kept as the rows of the
// dispatcher of every stage ("*"), the wake flag per set. PEPSI_TEST_
// MIGRATE_ROWS sets how many messages (default 10 000; the note's figure
// is for 1 000 000).
func TestMigrateStageSets(t *testing.T) {
	ctx, dsn, conn, known := migratedTo(t, 5)
	rows := migrateRows(t)
	for _, q := range []string{
		"INSERT INTO pepsi.message (id, payload) SELECT g, 'x' FROM generate_series(1, " + strconv.Itoa(rows) + ") g",
		"INSERT INTO pepsi.state (id, stage, status) SELECT g, 'a', CASE WHEN g % 2 = 0 THEN 'done' ELSE 'pending' END FROM generate_series(1, " + strconv.Itoa(rows) + ") g",
		"INSERT INTO pepsi.stage_stats (stage, processed, failed) VALUES ('a', 7, 1), ('b', 3, 0)",
		"UPDATE pepsi.dispatch_stats SET claimed = 9, done = 5, failed = 1, requeued = 3",
		"UPDATE pepsi.wake SET armed = false",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var err error
	start := time.Now()
	applied, err := queue.Migrate(ctx, conn)
	if err != nil || len(applied) != len(known)-5 {
		t.Fatalf("Migrate = %v, %v", applied, err)
	}
	t.Logf("006 on a database of %d messages: %v", rows, time.Since(start).Round(time.Millisecond))

	db, err := queue.Open(ctx, dsn, queue.Options{App: pgtest.App})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stages, g, err := db.ReadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 || stages[0].Processed != 7 || stages[0].Failed != 1 || stages[1].Processed != 3 ||
		g.Claimed != 9 || g.Done != 5 || g.Failed != 1 || g.Requeued != 3 {
		t.Errorf("statistics after 006: %+v, %+v", stages, g)
	}
	var n int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pepsi.state s JOIN pepsi.message m USING (id)").Scan(&n); err != nil || n != int64(rows) {
		t.Errorf("%d messages after 006 (%v), want %d", n, err, rows)
	}
	// Another set's rows add up with the old ones.
	sets, err := queue.Open(ctx, dsn, queue.Options{App: pgtest.App, Writer: queue.SetName([]string{"b"})})
	if err != nil {
		t.Fatal(err)
	}
	defer sets.Close()
	if err := sets.AddStats(ctx, []queue.StageStats{{Stage: "b", Processed: 2}}, queue.DispatchStats{Claimed: 2, Done: 2}); err != nil {
		t.Fatal(err)
	}
	stages, g, err = db.ReadStats(ctx)
	if err != nil || stages[1].Processed != 5 || g.Done != 7 || g.Claimed != 11 {
		t.Errorf("statistics with a set's rows: %+v, %+v, %v", stages, g, err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pepsi.dispatch_stats").Scan(&n); err != nil || n != 2 {
		t.Errorf("%d dispatch_stats rows (%v), want 2 (every stage's, and set b's)", n, err)
	}
	// The wake flag: a new database reads as not armed (no dispatcher
	// listens, migration 015); any armed set makes producers notify.
	var armed bool
	if err := conn.QueryRow(ctx, "SELECT pepsi.armed()").Scan(&armed); err != nil || armed {
		t.Errorf("pepsi.armed() on the new empty table = %v, %v; want false", armed, err)
	}
	for _, w := range []struct {
		set string
		on  bool
	}{{"a", false}, {"b", false}} {
		if err := db.SetArmed(ctx, w.set, w.on); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.QueryRow(ctx, "SELECT pepsi.armed()").Scan(&armed); err != nil || armed {
		t.Errorf("pepsi.armed() with no set armed = %v, %v; want false", armed, err)
	}
	if err := db.SetArmed(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT pepsi.armed()").Scan(&armed); err != nil || !armed {
		t.Errorf("pepsi.armed() with one set armed = %v, %v; want true", armed, err)
	}
}

// migrations returns the embedded migrations.
// migratedTo returns a new database migrated to version only, a
// connection to it and every known migration.
func migratedTo(t *testing.T, version int) (context.Context, string, *pgx.Conn, []queue.Migration) {
	t.Helper()
	ctx, dsn := testCtx(t), pgtest.Empty(t)
	conn, known := connect(t, dsn), migrations(t)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA pepsi; CREATE TABLE pepsi.schema_migration (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, m := range known[:version] {
		if _, err := conn.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("%03d: %v", m.Version, err)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO pepsi.schema_migration (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, dsn, conn, known
}

// migrateRows is how many messages an upgrade test populates:
// PEPSI_TEST_MIGRATE_ROWS, default 10 000.
// migratePopulated fills a database migratedTo version with rows messages
// (header customer: one of 10 values), half of them pending at stage a
// and half done, migrates it to the latest version and returns how long
// that took.
func migratePopulated(t *testing.T, ctx context.Context, conn *pgx.Conn, version int, known []queue.Migration, rows int) time.Duration {
	t.Helper()
	n := strconv.Itoa(rows)
	for _, q := range []string{
		"INSERT INTO pepsi.message (id, payload, headers) SELECT g, 'x', jsonb_build_object('customer', 'c' || g % 10) FROM generate_series(1, " + n + ") g",
		"INSERT INTO pepsi.state (id, stage, status) SELECT g, 'a', CASE WHEN g % 2 = 0 THEN 'done' ELSE 'pending' END FROM generate_series(1, " + n + ") g",
		"SELECT setval('pepsi.message_id_seq', " + n + ")",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	start := time.Now()
	applied, err := queue.Migrate(ctx, conn)
	if err != nil || len(applied) != len(known)-version {
		t.Fatalf("Migrate = %v, %v", applied, err)
	}
	return time.Since(start)
}

func migrateRows(t *testing.T) int {
	t.Helper()
	s := os.Getenv("PEPSI_TEST_MIGRATE_ROWS")
	if s == "" {
		return 10000
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func migrations(t *testing.T) []queue.Migration {
	t.Helper()
	known, err := queue.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	return known
}

package queue_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// schemaObjects lists what the schema pepsi holds: its relations and
// functions, "" when there is no such schema.
func schemaObjects(t *testing.T, dsn string) string {
	t.Helper()
	ctx := testCtx(t)
	conn := connect(t, dsn)
	var s string
	err := conn.QueryRow(ctx, `SELECT coalesce(string_agg(name, ' ' ORDER BY name), '') FROM (
		SELECT nspname AS name FROM pg_namespace WHERE nspname = 'pepsi'
		UNION ALL SELECT 'pepsi.' || relname FROM pg_class WHERE relnamespace = to_regnamespace('pepsi')
		UNION ALL SELECT 'pepsi.' || proname || '()' FROM pg_proc WHERE pronamespace = to_regnamespace('pepsi')) o`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestMigrateForeignSchema: a schema pepsi that is someone else's (a table
// pepsi.state, no pepsi.schema_migration) is refused before anything is
// created in it; an empty one is taken.
func TestMigrateForeignSchema(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Empty(t)
	ctx := testCtx(t)
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA pepsi; CREATE TABLE pepsi.state (x int)"); err != nil {
		t.Fatal(err)
	}
	applied, err := queue.Migrate(ctx, conn)
	if err == nil || len(applied) != 0 || !strings.Contains(err.Error(), "schema pepsi exists and is not pepsi's") ||
		!strings.Contains(err.Error(), "pepsi.state") {
		t.Fatalf("Migrate over a foreign schema pepsi: applied %v, err %v", applied, err)
	}
	if got, want := schemaObjects(t, dsn), "pepsi pepsi.state"; got != want {
		t.Errorf("after the refused migrate the schema holds %q, want %q", got, want)
	}

	if _, err := conn.Exec(ctx, "DROP TABLE pepsi.state"); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.Migrate(ctx, conn); err != nil {
		t.Fatalf("Migrate into an empty schema pepsi: %v", err)
	}
}

// TestMigrateFirstFailureLeavesNothing: when the first migration of a
// fresh database fails, nothing is left behind, not even the migrations'
// table or the schema.
func TestMigrateFirstFailureLeavesNothing(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Empty(t)
	ctx := testCtx(t)
	conn := connect(t, dsn)
	fsys := fstest.MapFS{"001_broken.sql": {Data: []byte("CREATE TABLE pepsi.a (x int);\nSELECT 1/0;\n")}}
	if _, err := queue.MigrateOnlyFSForTest(ctx, conn, fsys, queue.MigrateOptions{}); err == nil || !strings.Contains(err.Error(), "001_broken") {
		t.Fatalf("Migrate of a failing 001: %v", err)
	}
	if got := schemaObjects(t, dsn); got != "" {
		t.Errorf("a failed first migration left %q", got)
	}
}

package app

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// TestMigrateForeignSchema: pepsi migrate into a database whose schema
// pepsi is someone else's says so on one line, exits 1, and creates
// nothing.
func TestMigrateForeignSchema(t *testing.T) {
	dsn := pgtest.Empty(t)
	env(t, dsn, "")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA pepsi; CREATE TABLE pepsi.state (x int)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	r := pepsi(t, "", "migrate")
	r.wantCode(t, 1)
	r.wantOneError(t, "pepsi migrate: schema pepsi exists and is not pepsi's: it holds pepsi.state and no pepsi.schema_migration; nothing was created")
	if n := queryInt(t, dsn, "SELECT count(*)::int FROM pg_class WHERE relnamespace = 'pepsi'::regnamespace"); n != 1 {
		t.Errorf("%d relations in the schema pepsi after the refused migrate, want 1 (pepsi.state)", n)
	}
}

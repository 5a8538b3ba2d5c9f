package pgadmin_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgadmin"
	"github.com/pepsi-dev/pepsi/pkg/pgerr"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
)

// TestRecreateDrop: a database is made empty, made again from a DSN that
// names it, and dropped with its sessions; dropping it again is no error.
func TestRecreateDrop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	server := pgtest.ServerDSN()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "pepsi_pgadmin_" + hex.EncodeToString(b[:])
	dsn := pgadmin.WithDatabase(server, name)
	t.Cleanup(func() { _ = pgadmin.Drop(context.Background(), server, name) })

	if err := pgadmin.Recreate(ctx, server, name); err != nil {
		t.Fatalf("Recreate: %v", err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to the new database: %v", err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t ()"); err != nil {
		t.Fatal(err)
	}
	// From its own DSN, with a session open on it: dropped all the same.
	if err := pgadmin.Recreate(ctx, dsn, name); err != nil {
		t.Fatalf("Recreate from a DSN naming the database: %v", err)
	}
	conn2, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect after Recreate: %v", err)
	}
	var n int
	if err := conn2.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 't'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("tables after Recreate: %d, %v; want an empty database", n, err)
	}
	conn2.Close(ctx)
	if err := pgadmin.Drop(ctx, server, name); err != nil {
		t.Fatalf("Drop: %v", err)
	}
	if _, err := pgx.Connect(ctx, dsn); err == nil {
		t.Fatal("connected to a dropped database")
	} else if code, _ := pgerr.SQLState(err); code != pgerrcode.InvalidCatalogName {
		t.Fatalf("connect to a dropped database: %v, want SQLSTATE %s", err, pgerrcode.InvalidCatalogName)
	}
	if err := pgadmin.Drop(ctx, server, name); err != nil {
		t.Fatalf("Drop of a database that is gone: %v", err)
	}
}

func TestWithDatabase(t *testing.T) {
	for in, want := range map[string]string{
		"postgres:///postgres?host=/var/run/postgresql": "postgres:///d?host=/var/run/postgresql",
		"postgresql://u@h:5432/x":                       "postgresql://u@h:5432/d",
		"host=/tmp dbname=x":                            "host=/tmp dbname=x dbname=d",
	} {
		if got := pgadmin.WithDatabase(in, "d"); got != want {
			t.Errorf("WithDatabase(%q) = %q, want %q", in, got, want)
		}
	}
}

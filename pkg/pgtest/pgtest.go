// Package pgtest gives tests a fresh, migrated pepsi database on a real
// PostgreSQL server and drops it when the test ends.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/internal/pgadmin"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// DefaultDSN is the server tests use when PEPSI_TEST_DSN is not set.
const DefaultDSN = "postgres:///postgres?host=/var/run/postgresql"

// ServerDSN returns the DSN of the server tests create databases on.
func ServerDSN() string {
	if dsn := os.Getenv("PEPSI_TEST_DSN"); dsn != "" {
		return dsn
	}
	return DefaultDSN
}

// Empty creates an empty database, dropped when t ends, and returns its DSN.
func Empty(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	server := ServerDSN()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "pepsi_test_" + hex.EncodeToString(b[:])
	if err := pgadmin.Recreate(ctx, server, name); err != nil {
		t.Fatalf("pgtest: create database on %s (set PEPSI_TEST_DSN): %v", server, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pgadmin.Drop(ctx, server, name); err != nil {
			t.Errorf("pgtest: drop %s: %v", name, err)
		}
	})
	return pgadmin.WithDatabase(server, name)
}

// New creates a migrated database, dropped when t ends, and returns a pool
// on it (closed when t ends) and its DSN.
func New(t testing.TB) (*queue.DB, string) {
	t.Helper()
	dsn := Empty(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	if _, err := queue.Migrate(ctx, conn); err != nil {
		t.Fatalf("pgtest: migrate: %v", err)
	}
	conn.Close(ctx)
	db, err := queue.Open(ctx, dsn, queue.Options{App: "pgtest", MaxConns: 8})
	if err != nil {
		t.Fatalf("pgtest: open: %v", err)
	}
	t.Cleanup(db.Close)
	return db, dsn
}

// Package pgtest gives tests a fresh, migrated pepsi database on a real
// PostgreSQL server and drops it when the test ends.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pepsi-dev/pepsi/pkg/pgadmin"
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

// App names the test's own sessions in pg_stat_activity: "pgtest pid N
// on HOST", on both of DB's pools.
const App = "pgtest"

// DB is a test database: the product's pool on it (queue.DB), and Pool for
// the test's own statements.
type DB struct {
	*queue.DB
	Pool *pgxpool.Pool // the test's own SQL: fixtures and checks
}

// New creates a migrated database, dropped when t ends, and returns its
// pools (closed when t ends) and its DSN.
func New(t testing.TB) (*DB, string) {
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
	db, err := queue.Open(ctx, dsn, queue.Options{App: App, MaxConns: 8})
	if err != nil {
		t.Fatalf("pgtest: open: %v", err)
	}
	t.Cleanup(db.Close)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cfg.MaxConns = 8
	host, _ := os.Hostname()
	cfg.ConnConfig.RuntimeParams["application_name"] = fmt.Sprintf("%s pid %d on %s", App, os.Getpid(), host)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: open: %v", err)
	}
	t.Cleanup(pool.Close)
	return &DB{DB: db, Pool: pool}, dsn
}

// Claimed enqueues one message per payload at stage, admits them and
// claims them as the dispatcher does (queue.Claim: each pass with its
// token), and returns them in the payloads' order. Only those messages
// may be pending at stage.
func (db *DB) Claimed(t testing.TB, stage string, payloads ...[]byte) []queue.Claimed {
	t.Helper()
	ctx := context.Background()
	ids := make([]int64, len(payloads))
	for i, p := range payloads {
		id, err := queue.Enqueue(ctx, db.Pool, stage, p, nil)
		if err != nil {
			t.Fatalf("pgtest: enqueue: %v", err)
		}
		ids[i] = id
	}
	if _, err := db.Admit(ctx); err != nil {
		t.Fatalf("pgtest: admit: %v", err)
	}
	got, err := queue.Claim(ctx, db.Pool, []queue.StageCap{{Stage: stage, Cap: len(ids)}}, nil)
	if err != nil || len(got) != len(ids) {
		t.Fatalf("pgtest: claim of %d messages at %s: %d claimed, %v", len(ids), stage, len(got), err)
	}
	byID := make(map[int64]queue.Claimed, len(got))
	for _, c := range got {
		byID[c.ID] = c
	}
	out := make([]queue.Claimed, len(ids))
	for i, id := range ids {
		c, ok := byID[id]
		if !ok {
			t.Fatalf("pgtest: message %d was not claimed at %s", id, stage)
		}
		out[i] = c
	}
	return out
}

package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	ctx := testCtx(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return conn
}

func TestMigrateTwiceAndStatus(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Empty(t)
	ctx := testCtx(t)
	conn := connect(t, dsn)

	known, err := queue.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(known) == 0 || known[0].Version != 1 {
		t.Fatalf("embedded migrations = %+v, want versions from 1", known)
	}

	st, current, err := queue.MigrateStatus(ctx, conn)
	if err != nil {
		t.Fatalf("MigrateStatus on empty database: %v", err)
	}
	if current != 0 || len(st) != len(known) || st[0].AppliedAt != nil {
		t.Fatalf("empty database status = %+v, current %d; want nothing applied", st, current)
	}

	applied, err := queue.Migrate(ctx, conn)
	if err != nil {
		t.Fatalf("first Migrate: %v", err)
	}
	if len(applied) != len(known) || applied[0].Version != 1 {
		t.Fatalf("first Migrate applied %+v, want all %d", applied, len(known))
	}
	applied, err = queue.Migrate(ctx, conn)
	if err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if len(applied) != 0 {
		t.Fatalf("second Migrate applied %+v, want nothing", applied)
	}

	st, current, err = queue.MigrateStatus(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if current != len(known) {
		t.Fatalf("current = %d, want %d", current, len(known))
	}
	if st[0].Version != 1 || st[0].Name != known[0].Name || st[0].AppliedAt == nil || st[0].AppliedAt.IsZero() {
		t.Fatalf("status[0] = %+v, want version 1 applied", st[0])
	}
	var rows int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pepsi.schema_migration").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != len(known) {
		t.Fatalf("schema_migration has %d rows, want %d", rows, len(known))
	}
}

// Two migrations racing on an empty database: the advisory lock makes one
// apply everything and the other nothing.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Empty(t)
	ctx := testCtx(t)
	known, err := queue.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	conns := []*pgx.Conn{connect(t, dsn), connect(t, dsn), connect(t, dsn)}
	var wg sync.WaitGroup
	applied := make([]int, len(conns))
	errs := make([]error, len(conns))
	for i, c := range conns {
		wg.Go(func() {
			ms, err := queue.Migrate(ctx, c)
			applied[i], errs[i] = len(ms), err
		})
	}
	wg.Wait()
	total := 0
	for i := range conns {
		if errs[i] != nil {
			t.Errorf("Migrate %d: %v", i, errs[i])
		}
		total += applied[i]
	}
	if total != len(known) {
		t.Fatalf("migrations applied in total %v, want %d", applied, len(known))
	}
}

func TestMigrateRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	exec(t, db, "INSERT INTO pepsi.schema_migration (version, name) VALUES (999, 'future')")
	conn := connect(t, dsn)

	applied, err := queue.Migrate(ctx, conn)
	if err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Migrate on a newer schema: applied %v, err %v; want an error mentioning \"newer\"", applied, err)
	}
	if len(applied) != 0 {
		t.Fatalf("Migrate on a newer schema applied %v", applied)
	}
	if err := db.CheckSchema(ctx); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("CheckSchema on a newer schema: %v, want an error mentioning \"newer\"", err)
	}
	_, current, err := queue.MigrateStatus(ctx, conn)
	if err != nil || current != 999 {
		t.Fatalf("MigrateStatus current = %d, %v; want 999", current, err)
	}
}

func TestCheckSchema(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Empty(t)
	ctx := testCtx(t)
	db, err := queue.Open(ctx, dsn, queue.Options{App: "pepsi test", MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	err = db.CheckSchema(ctx)
	if err == nil {
		t.Fatal("CheckSchema on an empty database: nil error")
	}
	// The error must tell the operator what to do, not leak a SQL error.
	if !strings.Contains(err.Error(), "pepsi migrate") {
		t.Fatalf("CheckSchema on an empty database: %v; want advice to run 'pepsi migrate'", err)
	}

	// The migration table exists but is empty: still unmigrated.
	if _, err := connect(t, dsn).Exec(ctx, `CREATE SCHEMA pepsi;
		CREATE TABLE pepsi.schema_migration (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	if err := db.CheckSchema(ctx); err == nil || !strings.Contains(err.Error(), "pepsi migrate") {
		t.Fatalf("CheckSchema with an empty migration table: %v", err)
	}

	if _, err := queue.Migrate(ctx, connect(t, dsn)); err != nil {
		t.Fatal(err)
	}
	if err := db.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after Migrate: %v", err)
	}
}

func TestLoadMigrations(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

	ms, err := queue.LoadMigrations(fstest.MapFS{
		"002_b.sql":   file("SELECT 2"),
		"001_a.sql":   file("SELECT 1"),
		"README.md":   file("not a migration"),
		"sql.go":      file("package sql"),
		"x_001.sql":   file("not a migration either"),
		"003_c_d.sql": file("SELECT 3"),
	})
	if err != nil {
		t.Fatalf("valid set: %v", err)
	}
	want := []queue.Migration{{1, "a", "SELECT 1"}, {2, "b", "SELECT 2"}, {3, "c_d", "SELECT 3"}}
	if len(ms) != len(want) {
		t.Fatalf("got %+v, want %+v", ms, want)
	}
	for i := range want {
		if ms[i] != want[i] {
			t.Fatalf("migration %d = %+v, want %+v", i, ms[i], want[i])
		}
	}

	for name, fsys := range map[string]fstest.MapFS{
		"gap":                 {"001_a.sql": file("SELECT 1"), "003_c.sql": file("SELECT 3")},
		"duplicate":           {"001_a.sql": file("SELECT 1"), "001_b.sql": file("SELECT 1"), "002_c.sql": file("SELECT 2")},
		"duplicate at end":    {"001_a.sql": file("SELECT 1"), "002_b.sql": file("SELECT 2"), "002_c.sql": file("SELECT 2")},
		"does not start at 1": {"002_b.sql": file("SELECT 2")},
	} {
		if ms, err := queue.LoadMigrations(fsys); err == nil {
			t.Errorf("%s: loaded %+v, want an error", name, ms)
		}
	}
}

// TestMessageDeleteCascades: the queue rows go with their messages, by
// DELETE and by TRUNCATE, as the foreign key made them before version 3.
func TestMessageDeleteCascades(t *testing.T) {
	t.Parallel()
	db, _, ctx := newDB(t)
	ids := seed(t, db, "work", queue.Pending, 10)
	if _, err := db.Pool.Exec(ctx, "DELETE FROM pepsi.message WHERE id = ANY($1)", ids[:4]); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state"); n != 6 {
		t.Fatalf("%d queue rows after deleting 4 of 10 messages, want 6", n)
	}
	if _, err := db.Pool.Exec(ctx, "TRUNCATE pepsi.message"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "SELECT count(*) FROM pepsi.state"); n != 0 {
		t.Fatalf("%d queue rows after TRUNCATE pepsi.message, want 0", n)
	}
	seed(t, db, "work", queue.Pending, 3)
	if _, err := db.Pool.Exec(ctx, "TRUNCATE pepsi.state, pepsi.message"); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateLockTimeout: a migration whose table a running transaction
// holds (as a dispatcher's claim does) gives up each try after its lock
// timeout instead of queueing the table's other users behind it, is told
// of each such try, and applies once the table is free; one that never
// finds it free fails naming what to do.
func TestMigrateLockTimeout(t *testing.T) {
	t.Parallel()
	db, dsn, ctx := newDB(t)
	known, err := queue.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	next := len(known) + 1
	name := fmt.Sprintf("%03d_column", next)
	extra := fstest.MapFS{name + ".sql": {Data: []byte("ALTER TABLE pepsi.state ADD COLUMN test_col integer")}}

	hold := func() pgx.Tx {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // before the pool closes
		if _, err := tx.Exec(ctx, "LOCK pepsi.state IN ROW EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
		return tx
	}

	// Held throughout: every try gives up.
	tx := hold()
	waits := 0
	o := queue.MigrateOptions{LockTimeout: 50 * time.Millisecond, Tries: 3, Waiting: func(m queue.Migration, try int, err error) { waits++ }}
	applied, err := queue.MigrateFSForTest(ctx, connect(t, dsn), extra, o)
	if !errors.Is(err, queue.ErrMigrateLocked) || !strings.Contains(err.Error(), "migration "+name+": ") ||
		!strings.Contains(err.Error(), "stop the dispatchers") {
		t.Fatalf("Migrate with pepsi.state held: %v, want ErrMigrateLocked naming %s and what to do", err, name)
	}
	if len(applied) != 0 || waits != 2 {
		t.Errorf("applied %v after %d waits, want none after 2", applied, waits)
	}
	// Freed after the first try: applied on a later one.
	waits = 0
	o.Tries = 1000
	o.Waiting = func(queue.Migration, int, error) {
		if waits++; waits == 1 {
			if err := tx.Rollback(ctx); err != nil {
				t.Error(err)
			}
		}
	}
	applied, err = queue.MigrateFSForTest(ctx, connect(t, dsn), extra, o)
	if err != nil || len(applied) != 1 || applied[0].Version != next {
		t.Fatalf("Migrate once pepsi.state is free: applied %v, %v; want %s", applied, err, name)
	}
	if waits < 1 {
		t.Errorf("%d waits, want at least 1", waits)
	}
	if n := count(t, db, "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'pepsi' AND table_name = 'state' AND column_name = 'test_col'"); n != 1 {
		t.Errorf("013 applied but pepsi.state has no test_col")
	}
}

package admin_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pepsi-dev/pepsi/pkg/admin"
	"github.com/pepsi-dev/pepsi/pkg/pgtest"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// testCtx returns a context that ends with the test (or after a minute).
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// testDB is a test database: pkg/admin's handle on it, and pgtest.DB's
// Store (a producer's, for fixtures) and Pool (the test's own statements).
type testDB struct {
	*admin.DB
	Store *queue.DB
	Pool  *pgxpool.Pool
}

// newDB is pgtest.New with an admin.DB on the database, its sessions
// named pgtest.App too, plus a context.
func newDB(t testing.TB) (*testDB, string, context.Context) {
	t.Helper()
	pg, dsn := pgtest.New(t)
	ctx := testCtx(t)
	db, err := admin.Open(ctx, dsn, queue.Options{App: pgtest.App, MaxConns: 8})
	if err != nil {
		t.Fatalf("admin.Open: %v", err)
	}
	t.Cleanup(db.Close) // before pgtest drops the database
	return &testDB{DB: db, Store: pg.DB, Pool: pg.Pool}, dsn, ctx
}

// seed inserts n messages at stage with the given status straight into the
// tables and returns their ids in ascending (ingress) order.
func seed(t testing.TB, db *testDB, stage string, status queue.Status, n int) []int64 {
	t.Helper()
	ctx := testCtx(t)
	rows, err := db.Pool.Query(ctx, `
WITH m AS (
    INSERT INTO pepsi.message (payload) SELECT ''::bytea FROM generate_series(1, $1) RETURNING id
)
INSERT INTO pepsi.state (id, stage, status, timeout)
SELECT id, $2, $3, CASE WHEN $3 = 'paused' THEN now() + interval '1 hour' END FROM m
RETURNING id`, n, stage, string(status))
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
	slices.Sort(ids)
	return ids
}

// seed1 inserts one message and returns its id.
func seed1(t testing.TB, db *testDB, stage string, status queue.Status) int64 {
	t.Helper()
	return seed(t, db, stage, status, 1)[0]
}

// stateRow is a pepsi.state row read directly.
type stateRow struct {
	Stage         string
	Status        queue.Status
	Attempts      int
	Timeout       *time.Time
	DispatchError *string
	Error         *string
	UpdatedAt     time.Time
}

// same reports whether r and o hold the same values.
func (r stateRow) same(o stateRow) bool {
	tEq := (r.Timeout == nil) == (o.Timeout == nil) && (r.Timeout == nil || r.Timeout.Equal(*o.Timeout))
	return tEq && r.Stage == o.Stage && r.Status == o.Status && r.Attempts == o.Attempts &&
		deref(r.DispatchError) == deref(o.DispatchError) && deref(r.Error) == deref(o.Error) && r.UpdatedAt.Equal(o.UpdatedAt)
}

func getState(t testing.TB, db *testDB, id int64) stateRow {
	t.Helper()
	var r stateRow
	var st string
	err := db.Pool.QueryRow(testCtx(t), `SELECT stage, status, attempts, timeout, dispatch_error, error, updated_at
		FROM pepsi.state WHERE id = $1`, id).Scan(&r.Stage, &st, &r.Attempts, &r.Timeout, &r.DispatchError, &r.Error, &r.UpdatedAt)
	if err != nil {
		t.Fatalf("read state %d: %v", id, err)
	}
	r.Status = queue.Status(st)
	return r
}

func exec(t testing.TB, db *testDB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(testCtx(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t testing.TB, db *testDB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.Pool.QueryRow(testCtx(t), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// admit moves what pepsi.enqueue() wrote to pepsi.state, as a dispatcher's
// poll would.
func admit(t testing.TB, db *testDB) {
	t.Helper()
	if _, err := db.Admit(testCtx(t)); err != nil {
		t.Fatalf("admit: %v", err)
	}
}

func dial(t *testing.T, dsn, channel string) *queue.Listener {
	t.Helper()
	ctx := testCtx(t)
	l, err := queue.Dial(ctx, dsn, channel)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l
}

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

// waitNotification waits up to d for the next notification on conn.
func waitNotification(t testing.TB, conn *pgx.Conn, d time.Duration) *pgconn.Notification {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("no notification within %v: %v", d, err)
	}
	return n
}

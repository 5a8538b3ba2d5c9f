package queue_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

// newDB is pgtest.New plus a context.
func newDB(t testing.TB) (*pgtest.DB, string, context.Context) {
	t.Helper()
	db, dsn := pgtest.New(t)
	return db, dsn, testCtx(t)
}

// seed inserts n messages at stage with the given status straight into the
// tables and returns their ids in ascending (ingress) order.
func seed(t testing.TB, db *pgtest.DB, stage string, status queue.Status, n int) []int64 {
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
func seed1(t testing.TB, db *pgtest.DB, stage string, status queue.Status) int64 {
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

func getState(t testing.TB, db *pgtest.DB, id int64) stateRow {
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

func exec(t testing.TB, db *pgtest.DB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(testCtx(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t testing.TB, db *pgtest.DB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.Pool.QueryRow(testCtx(t), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// payload reads a message's payload straight from pepsi.message.
func payload(ctx context.Context, db *pgtest.DB, id int64) ([]byte, error) {
	var p []byte
	err := db.Pool.QueryRow(ctx, "SELECT payload FROM pepsi.message WHERE id = $1", id).Scan(&p)
	return p, err
}

// serverNow is the server's clock_timestamp().
func serverNow(t testing.TB, db *pgtest.DB) time.Time {
	t.Helper()
	var now time.Time
	if err := db.Pool.QueryRow(testCtx(t), "SELECT clock_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// admit moves what pepsi.enqueue() wrote to pepsi.state, as a dispatcher's
// poll would.
func admit(t testing.TB, db *pgtest.DB) {
	t.Helper()
	if _, err := db.Admit(testCtx(t)); err != nil {
		t.Fatalf("admit: %v", err)
	}
}

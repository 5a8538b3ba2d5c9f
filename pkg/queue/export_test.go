package queue

import (
	"context"
	"io/fs"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	schema "github.com/pepsi-dev/pepsi/sql"
)

// Test-only access to unexported parts for the external test package
// (queue_test), which needs pkg/pgtest and so cannot live in package queue.

// ClaimSQL is the claim statement, for plan tests and benchmarks.
var ClaimSQL = claimSQL

// LoadMigrations reads migrations from fsys.
var LoadMigrations = loadMigrations

// ExecForTest runs sql on the listener's own session.
func (l *Listener) ExecForTest(ctx context.Context, sql string, args ...any) error {
	_, err := l.conn.Exec(ctx, sql, args...)
	return err
}

// SettleSQL is the settle statement, for plan tests.
const SettleSQL = settleSQL

// SettleArgs returns SettleSQL's arguments for vs.
var SettleArgs = settleArgs

// NotMoved is the dispatch_error of a message whose stage answered 0
// without moving it.
const NotMoved = notMoved

// ErrRecovery is what Listener.Ping returns on a read-only standby.
var ErrRecovery = errRecovery

// HoldsLock reports whether the listener's session holds the
// single-dispatcher lock.
func (l *Listener) HoldsLock(ctx context.Context) (bool, error) {
	var ok bool
	err := l.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()
		  AND ((classid::bigint << 32) | objid::bigint) = $1)`, int64(DispatcherLock)).Scan(&ok)
	return ok, err
}

// ResumePaused runs resumeSQL, which RunTurn batches, on its own: it flips
// paused rows that are due to pending and returns how many it flipped and
// when the next paused row falls due (zero: none).
func (db *DB) ResumePaused(ctx context.Context) (int64, time.Time, error) {
	var n int64
	var next *time.Time
	err := Retry(ctx, func() error {
		return db.pool.QueryRow(ctx, resumeSQL, []string(nil)).Scan(&n, &next)
	})
	if err != nil || next == nil {
		return n, time.Time{}, err
	}
	return n, *next, nil
}

// ShowForTest returns a setting of a session of the pool.
func (db *DB) ShowForTest(ctx context.Context, name string) (string, error) {
	var v string
	err := db.pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}

// MigrateFSForTest is MigrateWith over the embedded migrations plus extra.
func MigrateFSForTest(ctx context.Context, conn *pgx.Conn, extra fstest.MapFS, o MigrateOptions) ([]Migration, error) {
	all := fstest.MapFS{}
	entries, err := fs.ReadDir(schema.Files, ".")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		body, err := fs.ReadFile(schema.Files, e.Name())
		if err != nil {
			return nil, err
		}
		all[e.Name()] = &fstest.MapFile{Data: body}
	}
	for name, f := range extra {
		all[name] = f
	}
	o.fsys = all
	return MigrateWith(ctx, conn, o)
}

// FenceSQL is the statement a dispatcher's writing transactions begin
// with.
const FenceSQL = fenceSQL

// ClaimKeyedSQL is the claim statement with keyed stages, for plan tests.
var ClaimKeyedSQL = claimKeyedSQL

// LocalSQL is the statement that sets a turn's transaction's settings.
var LocalSQL = localSQL

// MigrateOnlyFSForTest is MigrateWith over the migrations of fsys alone.
func MigrateOnlyFSForTest(ctx context.Context, conn *pgx.Conn, fsys fstest.MapFS, o MigrateOptions) ([]Migration, error) {
	o.fsys = fsys
	return MigrateWith(ctx, conn, o)
}

// Package queue is the dispatcher's store, pepsi's data access layer for
// the dispatcher and for producers: every SQL statement they run lives
// here (the schema lives in sql/; the operator's reads and repairs are
// pkg/admin's; the lab, in bench/, keeps its own tables and fixtures).
package queue

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pepsi-dev/pepsi/pkg/pgerr"
)

// Status is the state of a message's queue row.
type Status string

// The statuses a queue row can have.
const (
	Pending   Status = "pending"
	Running   Status = "running"
	Paused    Status = "paused"  // until its timeout: a retry, or a scheduled message
	Held      Status = "held"    // until an operator releases it (pepsi queue hold)
	Waiting   Status = "waiting" // at a join stage, until its children have ended (pepsi.join)
	Done      Status = "done"
	Failed    Status = "failed"
	Cancelled Status = "cancelled" // by an operator (pepsi queue cancel, pepsi.cancel)
)

// Statuses lists every status in lifecycle order.
var Statuses = []Status{Pending, Running, Paused, Held, Waiting, Done, Failed, Cancelled}

// Finished reports whether s is a final status: done, failed or cancelled.
func (s Status) Finished() bool { return s == Done || s == Failed || s == Cancelled }

// ParseStatus returns the status named s, or an error naming it.
func ParseStatus(s string) (Status, error) {
	for _, st := range Statuses {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("unknown status %q (want %s)", s, StatusWords)
}

// StatusWords names every status, for messages.
const StatusWords = "pending, running, paused, held, waiting, done, failed or cancelled"

// DB is a pool of connections to a pepsi database.
type DB struct {
	pool   *pgxpool.Pool
	writer string // the statistics rows AddStats adds to
	fence  atomic.Pointer[fence]
}

// Options are how Open sets up the pool.
type Options struct {
	// App names the sessions in pg_stat_activity: application_name
	// "App pid N on HOST" (unless the DSN names them), so that an
	// administrator, or a dispatcher refused its lock, sees who is
	// connected: "pepsi queue purge pid 4242 on mx1".
	App string
	// MaxConns caps the pool; 0 leaves pgxpool's default.
	MaxConns int32
	// Writer names the statistics rows AddStats adds to (the dispatcher's
	// stage set; see SetName); "" is "*", the rows of a dispatcher that
	// owns every stage.
	Writer string
	// NoJIT turns the server's JIT compilation off in the pool's sessions
	// (SET jit = off as each connects), for the dispatcher's sessions,
	// which are its own (never a transaction pooler's): their statements
	// touch a batch of rows by key, but the planner's cost for a large
	// batch passes jit_above_cost, and compiling it takes many times what
	// the statement does (docs/design.md).
	NoJIT bool
}

// Open connects a pool to dsn and checks that the server answers.
func Open(ctx context.Context, dsn string, o Options) (*DB, error) {
	pool, err := OpenPool(ctx, dsn, o)
	if err != nil {
		return nil, err
	}
	return New(pool, o.Writer), nil
}

// OpenPool connects a pool to dsn as Open does and checks that the server
// answers: the pool under a DB, and under pkg/admin's.
func OpenPool(ctx context.Context, dsn string, o Options) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("bad DSN: %w", err)
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	if _, set := cfg.ConnConfig.RuntimeParams["application_name"]; !set && o.App != "" {
		host, _ := os.Hostname()
		cfg.ConnConfig.RuntimeParams["application_name"] = fmt.Sprintf("%s pid %d on %s", o.App, os.Getpid(), host)
	}
	cfg.ConnConfig.BuildContextWatcherHandler = cancelOnServer
	if o.NoJIT {
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, "SET jit = off")
			return err
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect: %w", DescribeConnect(err))
	}
	return pool, nil
}

// New returns a DB on pool (see OpenPool), which its Close closes; writer
// is Options.Writer.
func New(pool *pgxpool.Pool, writer string) *DB {
	if writer == "" {
		writer = AllStages
	}
	return &DB{pool: pool, writer: writer}
}

// cancelOnServer makes a cancelled context cancel the statement on the
// server too, before the connection is given up: a statement its caller
// stopped waiting for (a dispatcher that gave up on a stalled database)
// must not go on and commit later, behind the caller's back.
func cancelOnServer(c *pgconn.PgConn) ctxwatch.Handler {
	return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: 5 * time.Second}
}

// Close closes every connection of the pool.
func (db *DB) Close() { db.pool.Close() }

// Reset drops every connection of the pool, so that the next ones are new
// sessions: after a failover, on the new primary.
func (db *DB) Reset() { db.pool.Reset() }

// Ping checks that the server answers.
func (db *DB) Ping(ctx context.Context) error { return db.pool.Ping(ctx) }

// Retry runs fn, re-running it a few times while it fails transiently
// (pgerr.IsTransient).
func Retry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = fn(); err == nil || !pgerr.IsTransient(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// inTx runs fn in a READ COMMITTED transaction, retried when transient.
func (db *DB) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return Retry(ctx, func() error {
		return pgx.BeginFunc(ctx, db.pool, fn)
	})
}

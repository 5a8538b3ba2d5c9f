package admin

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// DB is a pepsi database as the operator's commands, the dashboard and
// /metrics use it: this package's reads and repairs, and the few of the
// dispatcher's store they share with it (store.go), on one pool.
type DB struct {
	q    *queue.DB // the dispatcher's store, on pool
	pool *pgxpool.Pool
}

// Open connects a pool to dsn as queue.Open does and checks that the
// server answers.
func Open(ctx context.Context, dsn string, o queue.Options) (*DB, error) {
	pool, err := queue.OpenPool(ctx, dsn, o)
	if err != nil {
		return nil, err
	}
	return &DB{q: queue.New(pool, o.Writer), pool: pool}, nil
}

// Close closes every connection of the pool.
func (db *DB) Close() { db.pool.Close() }

// Ping checks that the server answers.
func (db *DB) Ping(ctx context.Context) error { return db.pool.Ping(ctx) }

// ErrNotFound is returned when a message id does not exist.
var ErrNotFound = errors.New("no such message")

// Now returns the server's clock, for ages that do not depend on the
// client's.
func (db *DB) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := db.pool.QueryRow(ctx, "SELECT now()").Scan(&now)
	return now, err
}

// Setting returns the value of the server's setting name in a session of
// the pool, as SHOW prints it.
func (db *DB) Setting(ctx context.Context, name string) (string, error) {
	var v string
	err := db.pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}

// inTx runs fn in a READ COMMITTED transaction, retried when transient.
func (db *DB) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return queue.Retry(ctx, func() error {
		return pgx.BeginFunc(ctx, db.pool, fn)
	})
}

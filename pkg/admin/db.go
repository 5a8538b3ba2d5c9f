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
// /metrics use it: the dispatcher's store (queue.DB, for what they share
// with it) with this package's reads and repairs, on one pool.
type DB struct {
	*queue.DB
	pool *pgxpool.Pool
}

// Open connects a pool to dsn as queue.Open does and checks that the
// server answers.
func Open(ctx context.Context, dsn string, o queue.Options) (*DB, error) {
	pool, err := queue.OpenPool(ctx, dsn, o)
	if err != nil {
		return nil, err
	}
	return &DB{DB: queue.New(pool, o.Writer), pool: pool}, nil
}

// ErrNotFound is returned when a message id does not exist.
var ErrNotFound = errors.New("no such message")

// Now returns the server's clock, for ages that do not depend on the
// client's.
func (db *DB) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := db.pool.QueryRow(ctx, "SELECT now()").Scan(&now)
	return now, err
}

// inTx runs fn in a READ COMMITTED transaction, retried when transient.
func (db *DB) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return queue.Retry(ctx, func() error {
		return pgx.BeginFunc(ctx, db.pool, fn)
	})
}

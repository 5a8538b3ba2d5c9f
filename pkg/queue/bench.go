package queue

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// TimeClaim runs the claim for caps in a transaction that it rolls back,
// so that the pending set stays as it was, and returns how many rows the
// claim took and how long its statement ran. For benchmarks (pepsi bench).
func (db *DB) TimeClaim(ctx context.Context, caps []StageCap) (int, time.Duration, error) {
	args, ok := claimArgs(caps)
	if !ok {
		return 0, 0, nil
	}
	var n int
	var took time.Duration
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		start := time.Now()
		rows, err := tx.Query(ctx, claimSQL, args...)
		got, err := scanClaimed(rows, err, nil)
		took, n = time.Since(start), len(got)
		if err != nil {
			return err
		}
		return errRollback
	})
	if err == errRollback {
		err = nil
	}
	return n, took, err
}

type rollback struct{}

func (rollback) Error() string { return "rolled back" }

var errRollback error = rollback{}

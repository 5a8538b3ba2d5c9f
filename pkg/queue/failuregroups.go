package queue

import "context"

// FoldFailures folds the failure groups' deltas (pepsi.failure_delta, which
// the failed messages' moves write) into their sums (pepsi.failure_groups)
// and returns how many groups changed: see sql/028_failure_groups.sql. The
// janitor's vacuum check runs it every VACUUM_INTERVAL, so that a reader
// of the groups sums a few rows a group.
func (db *DB) FoldFailures(ctx context.Context) (int64, error) {
	var n int64
	err := db.pool.QueryRow(ctx, `SELECT pepsi.fold_failures()`).Scan(&n)
	return n, err
}

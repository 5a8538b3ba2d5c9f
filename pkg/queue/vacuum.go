package queue

import (
	"context"
	"fmt"
	"slices"
)

// Churn is what the server's statistics say of one of the queue's tables'
// row versions: live rows and dead ones that VACUUM would reclaim.
type Churn struct {
	Live, Dead int64
}

// Vacuumed are the tables the dispatcher vacuums: pepsi.state_live, which
// every stage pass rewrites, pepsi.message_default, which the retention
// sweep deletes from row by row, pepsi.ingress, each of whose rows is
// deleted as it is admitted, pepsi.history, whose rows go with their
// messages and at the bound of 20 a message, and pepsi.failure_delta, which
// FoldFailures empties every VACUUM_INTERVAL. The other partitions of
// pepsi.state and pepsi.message are written once per row and dropped
// whole.
var Vacuumed = []string{"pepsi.state_live", "pepsi.message_default", "pepsi.ingress", "pepsi.history", "pepsi.failure_delta"}

// TableChurn reads table's (one of Vacuumed) live and dead row counts from
// the server's cumulative statistics (updated by each backend within a
// second or so of its commits).
func (db *DB) TableChurn(ctx context.Context, table string) (Churn, error) {
	var c Churn
	err := db.pool.QueryRow(ctx, `
SELECT coalesce(n_live_tup, 0), coalesce(n_dead_tup, 0)
  FROM pg_stat_user_tables WHERE relid = $1::regclass`, table).Scan(&c.Live, &c.Dead)
	if err != nil {
		return c, fmt.Errorf("read %s statistics: %w", table, err)
	}
	return c, nil
}

// Vacuum vacuums table (one of Vacuumed), unless another VACUUM
// (autovacuum, say) holds it, in which case it does nothing. It runs
// outside a transaction on a connection of its own for as long as it
// takes.
func (db *DB) Vacuum(ctx context.Context, table string) error {
	if !slices.Contains(Vacuumed, table) {
		return fmt.Errorf("vacuum %s: not one of pepsi's tables", table)
	}
	if _, err := db.pool.Exec(ctx, "VACUUM (SKIP_LOCKED, TRUNCATE false) "+table); err != nil {
		return fmt.Errorf("vacuum %s: %w", table, err)
	}
	return nil
}

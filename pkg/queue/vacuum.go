package queue

import (
	"context"
	"fmt"
)

// Churn is what the server's statistics say of the queue table's row
// versions: live rows and dead ones that VACUUM would reclaim.
type Churn struct {
	Live, Dead int64
}

// StateChurn reads pepsi.state's live and dead row counts from the
// server's cumulative statistics (updated by each backend within a second
// or so of its commits).
func (db *DB) StateChurn(ctx context.Context) (Churn, error) {
	var c Churn
	err := db.pool.QueryRow(ctx, `
SELECT coalesce(n_live_tup, 0), coalesce(n_dead_tup, 0)
  FROM pg_stat_user_tables WHERE relid = 'pepsi.state'::regclass`).Scan(&c.Live, &c.Dead)
	if err != nil {
		return c, fmt.Errorf("read pepsi.state statistics: %w", err)
	}
	return c, nil
}

// VacuumState vacuums pepsi.state, unless another VACUUM (autovacuum, say)
// holds it, in which case it does nothing. It runs outside a transaction
// on a connection of its own for as long as it takes.
func (db *DB) VacuumState(ctx context.Context) error {
	if _, err := db.pool.Exec(ctx, "VACUUM (SKIP_LOCKED) pepsi.state"); err != nil {
		return fmt.Errorf("vacuum pepsi.state: %w", err)
	}
	return nil
}

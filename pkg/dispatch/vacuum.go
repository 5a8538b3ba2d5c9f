package dispatch

import (
	"context"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The vacuum rule: a table is vacuumed once its dead row versions number
// more than vacuumBase plus vacuumScale of its live rows.
const (
	vacuumBase  = 1000
	vacuumScale = 0.05
)

// vacuum keeps pepsi.state_live, pepsi.message_default and pepsi.ingress
// from bloating until ctx is done: every VACUUM_INTERVAL it reads each
// table's live and dead row counts and vacuums it when the rule says so.
// Every stage pass rewrites a queue row twice (settle, claim), and the
// retention sweep deletes the messages that expire from the default
// partition; with the server's autovacuum off, or asleep between its
// rounds, the dead versions pile up in the heap and in the claim's index
// walk, and each claim and settle pays for them. It owns no dispatcher
// state: it only reads the statistics and runs VACUUM on a pool
// connection of its own.
func (d *Dispatcher) vacuum(ctx context.Context, db *queue.DB, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !d.janitor.Load() {
			continue // another dispatcher vacuums
		}
		var err error
		for _, table := range queue.Vacuumed {
			if err = d.vacuumTable(ctx, db, table); err != nil {
				break
			}
		}
		if err != nil && ctx.Err() == nil && !failing {
			d.log.Warn("vacuum sweep failed; retrying at the next interval", "err", err)
		}
		failing = err != nil
	}
}

// vacuumTable vacuums table when the rule says so.
func (d *Dispatcher) vacuumTable(ctx context.Context, db *queue.DB, table string) error {
	c, err := db.TableChurn(ctx, table)
	if err != nil || float64(c.Dead) <= vacuumBase+vacuumScale*float64(c.Live) {
		return err
	}
	start := time.Now()
	if err := db.Vacuum(ctx, table); err != nil {
		return err
	}
	d.log.Debug("vacuumed "+table, "dead", c.Dead, "live", c.Live, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

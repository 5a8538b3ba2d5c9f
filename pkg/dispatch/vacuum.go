package dispatch

import (
	"context"
	"log/slog"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// The vacuum rule: a table is vacuumed once its dead row versions number
// more than vacuumBase plus vacuumScale of its live rows.
const (
	vacuumBase  = 1000
	vacuumScale = 0.05
)

// vacuum is the janitor's vacuum check. Every pass rewrites a queue row
// twice (settle, claim), and the retention sweep deletes the messages that
// expire from the default partition; with the server's autovacuum off, or
// asleep between its rounds, the dead versions pile up in the heap and in
// the claim's index walk, and each claim and settle pays for them. So
// every VACUUM_INTERVAL it reads the live and dead row counts of the
// tables of queue.Vacuumed and vacuums a table when the rule says so (see
// docs/design.md, "Vacuum"); then it keeps the tables' planner statistics
// (analyzer), and folds the failure groups' deltas into their sums
// (queue.DB.FoldFailures).
type vacuum struct {
	startStop
	store vacuumStore
	log   *slog.Logger
	every time.Duration // VACUUM_INTERVAL
	an    *analyzer     // the analyze check, after the vacuum check
}

// Start checks the tables every interval until Stop.
func (v *vacuum) Start(ctx context.Context) error {
	v.start(ctx, v.run)
	return nil
}

// run checks until stop; a Stop cancels a VACUUM in flight, which leaves
// nothing half done.
func (v *vacuum) run(_, stop context.Context) {
	t := time.NewTicker(v.every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-stop.Done():
			return
		case <-t.C:
		}
		var err error
		for _, table := range queue.Vacuumed {
			if err = v.check(stop, table); err != nil {
				break
			}
		}
		if err == nil && v.an != nil {
			err = v.an.check(stop)
		}
		if err == nil {
			_, err = v.store.FoldFailures(stop)
		}
		if err != nil && stop.Err() == nil && !failing {
			v.log.Warn("vacuum, analyze or failure groups check failed; retrying at the next interval", "err", err)
		}
		failing = err != nil
	}
}

// check vacuums table when the rule says so.
func (v *vacuum) check(ctx context.Context, table string) error {
	c, err := v.store.TableChurn(ctx, table)
	if err != nil || float64(c.Dead) <= vacuumBase+vacuumScale*float64(c.Live) {
		return err
	}
	start := time.Now()
	if err := v.store.Vacuum(ctx, table); err != nil {
		return err
	}
	v.log.Debug("vacuumed "+table, "dead", c.Dead, "live", c.Live, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

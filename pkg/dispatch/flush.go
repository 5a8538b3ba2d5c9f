package dispatch

import (
	"context"
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// idleFlushGap is the least time between two flushes made because the
// pipeline went idle.
const idleFlushGap = time.Second

// statsWrite adds the statistics deltas to the database in one
// transaction. A write that failed, maybe after its commit went through,
// is sent again as it was: each is applied at most once (queue.StatsFlush).
type statsWrite struct {
	flushes []queue.StatsFlush
}

func (c *statsWrite) what() string { return "writing statistics" }

func (c *statsWrite) run(ctx context.Context, s choreStore) error {
	return s.AddStatsOnce(ctx, c.flushes)
}

func (c *statsWrite) done(d *Dispatcher, now time.Time, ok bool) {
	d.tally.flushed(c.flushes, ok)
	if ok {
		d.lastFlush = now
	}
}

// flushDue reports whether the statistics should be written now: every
// STATS_INTERVAL, or when the pipeline went idle (at most once per
// idleFlushGap).
func (d *Dispatcher) flushDue(now time.Time) bool {
	return d.tally.dirty && (!now.Before(d.lastFlush.Add(d.cfg.Dispatch.StatsInterval)) ||
		(!now.Before(d.lastFlush.Add(idleFlushGap)) && d.idle()))
}
